"""``distlab export RUN --format hf``: the trained policy as a ``save_pretrained`` directory transformers loads.

The model is rebuilt as training built it (the run's ``model.source``, LoRA rank, dtypes and seed), the
checkpoint's weights are read into it, and then either the LoRA adapter is merged into the base weights (the
default: a plain ``AutoModelForCausalLM`` directory) or kept (``--adapter``: a PEFT adapter directory, loaded
with ``AutoPeftModelForCausalLM`` or ``PeftModel.from_pretrained``). The tokenizer is saved beside it, so the
directory generates on its own. An adapter names its base model's directory: the source's HF directory, or the
converted copy of a GGUF file; a ``tiny:`` or ``random:`` model has none, so its base weights are written into
``base/``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from distlab.errors import DistlabError

FORMATS = ("hf",)


def export_hf(cfg: Any, ckpt: Path, out: Path, fmt: str, adapter: bool, model: str = "policy",
              dtype: str | None = None) -> None:
    """Write model ``model`` of checkpoint ``ckpt`` (run config ``cfg``) into the empty directory ``out``; ``dtype``
    (bf16, fp16, fp32) casts every weight after a LoRA merge, which itself runs at the precision training kept."""
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers calls its own deprecated API (peft, saving)
        warnings.filterwarnings("ignore", message="Could not find a config file")  # tiny: base/ is written next
        _export(cfg, ckpt, out, fmt, adapter, model, dtype)


def _export(cfg: Any, ckpt: Path, out: Path, fmt: str, adapter: bool, model: str, dtype: str | None) -> None:
    from distlab.training.checkpoint import load_model_weights
    from distlab.training.placement import DTYPES, keep_trained_weights_fp32
    from distlab.recipes.lm.models.source import load_causal_lm

    if fmt not in FORMATS:
        raise DistlabError(f"--format {fmt}: the LM recipes export {', '.join(FORMATS)}")
    settings = cfg.models[model]
    lora_r = cfg.model.lora_r if settings.trainable else 0
    if adapter and lora_r <= 0:
        raise DistlabError(f"--adapter keeps a LoRA adapter, but this run trained every weight (model.lora_r="
                           f"{cfg.model.lora_r}); export without --adapter")
    net, tok = load_causal_lm(cfg.model.source, dtype=DTYPES[settings.dtype], device="cpu", lora_r=lora_r,
                              lora_alpha=cfg.model.lora_alpha or None,
                              attn_implementation=cfg.model.attn_implementation, seed=cfg.run.seed)
    if settings.trainable:
        keep_trained_weights_fp32(net)  # as training held them (placement.place), so the read loses nothing
    load_model_weights(net, ckpt, prefer=model)
    net.eval()
    _save(net, tok, cfg, out, adapter, lora_r, DTYPES[dtype] if dtype else None)


def _save(net, tok, cfg: Any, out: Path, adapter: bool, lora_r: int, dtype: torch.dtype | None) -> None:
    from distlab.recipes.lm.models.source import resolve_source

    if adapter:
        resolved = resolve_source(cfg.model.source)
        if resolved.kind in ("tiny", "random"):  # built in memory: no base directory to point at
            base_dir = out / "base"
        elif resolved.kind == "gguf":
            from distlab.recipes.lm.models.gguf_cache import converted_dir

            base_dir = converted_dir(resolved.path)
        else:
            base_dir = resolved.path
        net.peft_config["default"].base_model_name_or_path = str(Path(base_dir).resolve())
        if dtype is not None:
            net = net.to(dtype)
        net.save_pretrained(out)
        if resolved.kind in ("tiny", "random"):
            base = net.unload()  # the base weights, adapters taken out unmerged
            base.save_pretrained(base_dir)
            tok.save_pretrained(base_dir)
    else:
        if lora_r > 0:
            net = net.merge_and_unload()
        if dtype is not None:
            net = net.to(dtype)
        net.save_pretrained(out)
    tok.save_pretrained(out)
