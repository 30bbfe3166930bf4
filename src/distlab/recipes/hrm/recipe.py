"""The ``hrm`` recipe: HRM, TRM and plain-transformer reasoning models on Sudoku, Maze and ARC."""

from __future__ import annotations

from pathlib import Path

from distlab.config import CompileMode
from distlab.errors import DistlabError
from distlab.recipe import Recipe
from distlab.recipes.hrm.config import HRMConfig
from distlab.runtime.sampler import check_divisible

PRESETS = Path(__file__).parent / "presets"
SAMPLINGS = ("groups", "examples")


def train(cfg: HRMConfig, session) -> dict:
    from distlab.recipes.hrm.train import ensure_dataset, train as run

    if session.rt.is_main:
        ensure_dataset(cfg)  # a missing dataset is built once, by rank 0, before the others read it
    session.rt.barrier("dataset ready", timeout_s=max(cfg.dist.timeout_s, 3600))
    return run(cfg, session)


def validate(cfg: HRMConfig, world_size: int) -> None:
    """Checks that need no GPU and no data loading, done before any process starts."""
    check_divisible(cfg.global_batch_size, world_size, cfg.dist.grad_accum)
    if cfg.data.build not in ("none", "sudoku", "maze", "arc"):
        raise DistlabError(f"data.build={cfg.data.build!r} is not one of sudoku, maze, arc, none")
    if cfg.sampling not in SAMPLINGS:
        raise DistlabError(f"sampling={cfg.sampling!r} is not one of {', '.join(SAMPLINGS)}; use sampling=groups "
                           "(HRM's epochs)")
    if cfg.optimizer not in ("adam_atan2", "adamw"):
        raise DistlabError(f"optimizer={cfg.optimizer!r} is not one of adam_atan2, adamw")
    mode = CompileMode(cfg.dist.compile_mode)
    if mode.replays_cuda_graphs and cfg.dist.grad_accum > 1:
        # the trainer copies the ACT carry out of each replay, but gradients accumulated over micro-batches stay
        # in the one captured backward's output memory, which the next micro-batch's replay overwrites
        raise DistlabError(f"dist.compile_mode={mode.name} replays CUDA graphs, whose next replay overwrites the "
                           f"gradients dist.grad_accum={cfg.dist.grad_accum} accumulates; use dist.grad_accum=1 "
                           "(a larger global batch per GPU) or dist.compile_mode=default")
    if cfg.dist.precision == "fp16" and cfg.arch.forward_dtype == "bfloat16":
        raise DistlabError("dist.precision=fp16 with arch.forward_dtype=bfloat16 would run layers in bf16 and fp16 "
                           "at once; add arch.forward_dtype=float16 (or float32: autocast then picks fp16 per op)")
    _validate_eval(cfg)
    state = cfg.optim.state_dtype
    if state != "fp32" and cfg.optimizer != "adamw":
        raise DistlabError(f"optim.state_dtype={state} applies to AdamW; optimizer={cfg.optimizer} keeps fp32 "
                           f"moments: add optimizer=adamw or use optim.state_dtype=fp32")
    # the data last: a wrong setting is named even while the dataset does not exist yet
    path = cfg.data.resolved_path()
    built = (path / "train" / "dataset.json").exists()
    if cfg.data.build == "none" and not built:
        what = (f"{path} holds no train/dataset.json (an incomplete or foreign folder)" if path.is_dir()
                else f"dataset {path} not found")
        raise DistlabError(f"{what}; build it with `distlab data sudoku --output-dir {path}` "
                           f"(or maze/arc), or set data.build=sudoku to build it automatically")
    if built:  # memory-mapped, so cheap: a truncated or inconsistent file is named before any process starts
        from distlab.recipes.hrm.data.format import load_split

        for split in ("train", "test"):
            load_split(path, split)
    from distlab.recipes.hrm.eval_data import check_before_start

    check_before_start(cfg, path, built)


# Upper bound of eval.samples: pass@100 (the largest k reported) needs 100; 1024 leaves room for vote studies
# while keeping an evaluation within ~1000x a plain one rather than unbounded.
MAX_EVAL_SAMPLES = 1024


def _validate_eval(cfg: HRMConfig) -> None:
    from distlab.recipes.hrm.config import NOISE_MODES, SELECTIONS

    e = cfg.eval
    if e.samples < 1:
        raise DistlabError(f"eval.samples={e.samples} is invalid: it must be 1 or more (1 = plain evaluation, K = K "
                           f"trajectories per puzzle)")
    if e.samples > MAX_EVAL_SAMPLES:
        # each sample is one more full trajectory of every test batch, and the K answers of a batch are stacked to
        # pick one: time grows K-fold and memory with K, so 100,000 ran for hours inside one progress step
        raise DistlabError(f"eval.samples={e.samples} is too many: it must be at most {MAX_EVAL_SAMPLES} (each sample "
                           f"runs the whole test set once more and is held in memory to pick an answer); use "
                           f"eval.samples={MAX_EVAL_SAMPLES} or less (pass@100 needs 100)")
    if e.select not in SELECTIONS:
        raise DistlabError(f"eval.select={e.select!r} is not one of {', '.join(SELECTIONS)}")
    if e.noise not in NOISE_MODES:
        raise DistlabError(f"eval.noise={e.noise!r} is not one of {', '.join(NOISE_MODES)}")
    if e.noise_scale < 0:
        raise DistlabError(f"eval.noise_scale={e.noise_scale} must be >= 0")


def evaluate_checkpoint(cfg: HRMConfig, session, ckpt: Path) -> dict:
    """Scores the EMA weights when the run kept them (TRM evaluates its average), on any world size, on data.path's
    test split and then each of eval.also's; a dataset the model cannot read is refused before it is built."""
    from distlab.recipes.hrm.data.format import load_split
    from distlab.recipes.hrm.eval_data import (MODEL_KEYS, check_also, check_readable, label, score_also,
                                               timed_evaluate, trained_signature)
    from distlab.recipes.hrm.optim import SparseSignSGD
    from distlab.recipes.hrm.train import build, evaluation_weights, metadata_dict, track_state

    data_dir = cfg.data.resolved_path()
    trained = trained_signature(ckpt)  # None: a checkpoint from before it was recorded; data.path's train split then
    if trained is not None:
        check_readable(trained, data_dir)
    check_also(cfg, trained)
    test = load_split(data_dir, "test")
    meta = {k: trained[k] for k in MODEL_KEYS} if trained else metadata_dict(load_split(data_dir, "train"))
    model, opts, ema = build(cfg, session, meta)
    track_state(session, model, [o for o in opts if not isinstance(o, SparseSignSGD)], ema)
    loaded = session.load_checkpoint(ckpt)
    save_dir = session.run_dir if session.rt.is_main else None  # eval mode: the evaluation's own folder
    with evaluation_weights(model, ema):
        metrics, also = timed_evaluate(cfg, session, model, test, save_dir), score_also(cfg, session, model, save_dir)
    return {"step": loaded["step"], "weights": "ema" if ema is not None else "raw", **label(data_dir),
            **({"trained_on": trained["path"]} if trained else {}), **metrics, **({"also": also} if also else {})}


def model_spec(cfg: HRMConfig):
    from distlab.recipe import ModelSpec
    from distlab.recipes.hrm.models.build import build_model

    seq = 81 if cfg.data.build in ("sudoku", "none") else 900
    meta = {"vocab_size": 12, "seq_len": seq, "num_puzzle_identifiers": 1}
    params = sum(p.numel() for p in build_model(cfg.arch, meta).parameters())
    a = cfg.arch
    # activations of the differentiated blocks (HRM's one-step gradient keeps few): ~34 bytes/elt/layer
    layers = a.L_layers + a.H_layers if a.name == "hrm" else (a.L_layers * (a.L_cycles + 1) if a.name == "trm"
                                                              else a.num_layers)
    act = layers * seq * a.hidden_size * 34
    return ModelSpec(f"hrm/{a.name}", params, activation_bytes_per_example=act,
                     batch_per_device=cfg.global_batch_size, optimizer="adam")


def register_commands(top, data_subparsers) -> None:
    from distlab.recipes.hrm.data.cli import register

    register(data_subparsers)


RECIPE = Recipe(name="hrm", config=HRMConfig, train=train, presets_dir=PRESETS,
                batch_keys=("global_batch_size",), lr_keys=("lr",), validate=validate,
                evaluate=evaluate_checkpoint, model_spec=model_spec, register_commands=register_commands,
                report_metrics=("exact_accuracy", "blank_accuracy", "token_accuracy", "pass@1", "pass@2", "pass@10",
                                "pass@100"),
                supports=frozenset({"run.time_limit_s", "dist.wrap", "dist.compile", "dist.compile_split_ddp",
                                    "dist.compile_mode", "dist.grad_accum",
                                    "log.profile_steps", "dist.activation_checkpointing", "dist.comm_hook",
                                    "dist.auto_micro_batch", "optim.state_dtype"}),
                positive_keys=frozenset({"steps", "epochs", "lr", "global_batch_size", "hidden_size", "train_size",
                                         "test_size", "workers", "samples"}),
                # the dataset is kept (its size names the built files); steps=2 replaces steps=0 (derived from epochs)
                smoke={"steps": 2, "data.eval_limit": 32, "data.interim_eval_limit": 32, "eval.samples": 1,
                       "log.every": 1})
