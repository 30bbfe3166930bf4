"""Convert a GGUF checkpoint to an ordinary HF model directory once, then reuse it.

``transformers`` can load a GGUF file directly (``from_pretrained(dir, gguf_file=...)``), but its
reader re-parses the whole file for the config, the weights and the tokenizer and rebuilds its name
maps per tensor: about 30-60 s for the 98 MB SmolLM2 file on a busy 2-core machine. Saved back as
safetensors (fp32, the dequantised values exactly) plus ``tokenizer.json``, the same model loads in
under a second. The cache is keyed by the file's content hash and the ``transformers`` version, so
a copy of the file elsewhere (a GPU machine's ``/tmp``) hits the same entry and a changed converter
never serves stale weights. Concurrent ranks take a file lock: one converts, the others wait and read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import torch

from distlab.atomic import exclusive_lock

CACHE_ENV = "DISTLAB_MODEL_CACHE"
_DONE = "conversion-complete"


def default_cache_root() -> Path:
    """``$DISTLAB_MODEL_CACHE`` or ``~/.cache/distlab/gguf``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "distlab" / "gguf"


def file_digest(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_dir_for(gguf: Path, root: Path | None = None) -> Path:
    import transformers

    key = hashlib.sha256(f"{file_digest(gguf)}|{transformers.__version__}".encode()).hexdigest()[:16]
    return (root or default_cache_root()) / f"{gguf.stem}-{key}"


def load_gguf_direct(gguf: Path):
    """Load through transformers' GGUF reader (dequantised to fp32); returns a plain, unquantised model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = dict(gguf_file=gguf.name, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
    # The weights are dense fp32 now; drop the "quantized" marking so peft, saving and training
    # treat this as the ordinary model it is.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tok


def converted_dir(gguf: Path, root: Path | None = None) -> Path:
    """The cached HF directory for ``gguf``, converting it first if needed (under a cross-process lock)."""
    target = cache_dir_for(gguf, root)
    if (target / _DONE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target.parent / f".{target.name}.lock"):
        if (target / _DONE).exists():  # another process finished while we waited
            return target
        model, tok = load_gguf_direct(gguf)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        try:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            (tmp / _DONE).write_text(f"converted from {gguf}\n")
            if target.exists():
                shutil.rmtree(target)  # a partial directory left by a crash before the marker
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target
