"""``distlab export``: one checkpoint, verified as ``distlab eval`` verifies it, written for use outside distlab.

``--format pt`` (the core's own): every model's consolidated weights in one ``torch.save`` file. Any other
format comes from the checkpoint's recipe (``Recipe.export`` and ``Recipe.export_formats``; the LM recipes write
``hf``, a ``save_pretrained`` directory): the core rebuilds the run's config from the checkpoint and hands the
recipe an empty directory; a previous export there is kept aside until the new one is complete. Given a run directory,
the newest checkpoint whose files match their manifest is exported and each newer, corrupt one is named.
"""

from __future__ import annotations

import inspect
import json
import shutil
import tempfile
from pathlib import Path

from distlab.errors import DistlabError

MARKER = "distlab_export.json"  # written into every exported directory: what it came from
EXPORT_DTYPES = ("bf16", "fp16", "fp32")  # --dtype: what a recipe's export casts its weights to


def export_checkpoint(target: Path, fmt: str = "pt", output: Path | None = None, adapter: bool = False,
                      dtype: str | None = None) -> tuple[Path, Path, list[str]]:
    """``(written path, checkpoint used, skipped corrupt checkpoints)``; a one-line DistlabError otherwise.

    ``dtype`` (``bf16``, ``fp16``, ``fp32``) casts the weights a recipe's format writes: a bf16 model directory is
    half the size of the fp32 one training keeps, and is what serving stacks load. None keeps the checkpoint's."""
    from distlab.training.checkpoint import STEP_DIR, export_model, find_checkpoint, verify_checkpoint
    from distlab.run.rundir import run_dir_of

    if adapter and fmt == "pt":
        raise DistlabError("--adapter keeps a LoRA adapter, which only a model directory can hold; add --format hf")
    if dtype is not None and fmt == "pt":
        raise DistlabError(f"--dtype {dtype} casts a model directory; --format pt keeps the checkpoint's dtypes. Add "
                           f"--format hf")
    if dtype is not None and dtype not in EXPORT_DTYPES:
        raise DistlabError(f"--dtype {dtype}: choose one of {', '.join(EXPORT_DTYPES)}")
    skipped: list[str] = []
    ckpt = find_checkpoint(Path(target), skipped=skipped)  # a run's checkpoints are verified there, newest first
    problem = verify_checkpoint(ckpt) if STEP_DIR.match(Path(target).name) else None  # a given one here: once
    if problem:
        raise DistlabError(f"cannot export {ckpt}: {problem}; pick another step, or pass the run directory for "
                           f"its newest good checkpoint")
    if fmt == "pt":
        out = Path(output) if output else run_dir_of(ckpt) / "model.pt"
        return export_model(ckpt, out, verified=True), ckpt, skipped
    extra = json.loads((ckpt / "extra.json").read_text())
    recipe, cfg = _recipe_and_config(ckpt, extra, fmt)
    if dtype is not None and "dtype" not in inspect.signature(recipe.export).parameters:
        raise DistlabError(f"recipe {recipe.name} cannot cast its --format {fmt} export; leave out --dtype")
    out = Path(output) if output else run_dir_of(ckpt) / (f"{fmt}-adapter" if adapter else fmt)
    _check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # written at its final path (an adapter may name files inside it), with a previous export set aside until
    # this one is complete: a failure leaves the previous one as it was, never a mix of the two
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    if out.exists():
        out.rename(old / out.name)
    try:
        out.mkdir()
        recipe.export(cfg, ckpt, out, fmt, adapter, **({"dtype": dtype} if dtype else {}))
        (out / MARKER).write_text(json.dumps({"checkpoint": str(ckpt.resolve()), "step": extra.get("step"),
                                              "recipe": recipe.name, "format": fmt, "adapter": adapter,
                                              "dtype": dtype}, indent=2))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        if (old / out.name).exists():
            (old / out.name).rename(out)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
    return out, ckpt, skipped


def _recipe_and_config(ckpt: Path, extra: dict, fmt: str):
    from distlab.config import resolve_config
    from distlab.recipe import load_recipe

    name = extra.get("recipe")
    if not name:
        raise DistlabError(f"{ckpt} does not name its recipe; only --format pt can export it")
    recipe = load_recipe(name)
    formats = ["pt", *recipe.export_formats] if recipe.export is not None else ["pt"]
    if fmt not in formats:
        raise DistlabError(f"recipe {name} cannot export --format {fmt}; its formats: {', '.join(formats)}")
    if not extra.get("config"):
        raise DistlabError(f"{ckpt}/extra.json holds no config; only --format pt can export it")
    with tempfile.TemporaryDirectory() as td:
        saved = Path(td) / "config.yaml"
        saved.write_text(extra["config"])
        cfg = resolve_config(recipe, [str(saved)], [])
    return recipe, cfg


def _check_out(out: Path) -> None:
    """Never write over something that is not an earlier export: the output is replaced as a whole."""
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file()):
        raise DistlabError(f"{out} exists and is not a distlab export; pass -o with a new or empty directory")
