"""HRM/TRM training loop on the core: ACT carry, sparse puzzle embeddings, periodic evaluation.

One optimizer step consumes one global batch, but under ACT only the sequences that halted in the
previous segment take new examples; the rest keep their recurrent state (deep supervision). The
carry is per-rank state, saved with each checkpoint so a resume on the same world size continues
exactly where it stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from pathlib import Path

import numpy as np

from distlab.atomic import exclusive_lock
from distlab.errors import DistlabError
from distlab.recipes.hrm.batch import make_batch
from distlab.recipes.hrm.config import HRMConfig
from distlab.recipes.hrm.data.format import PuzzleSplit, load_split
from distlab.recipes.hrm.eval_data import TRAINED_ON, data_signature, model_metadata, score_also, short_name
from distlab.recipes.hrm.evaluation import evaluate
from distlab.recipes.hrm.flops import flops_per_example
from distlab.recipes.hrm.models import fused_mixer
from distlab.recipes.hrm.models.build import build_model
from distlab.recipes.hrm.models.config import curriculum_cycles, parse_curriculum
from distlab.recipes.hrm.models.ema import EMA
from distlab.recipes.hrm.models.loss import run_segment
from distlab.recipes.hrm.optim import SparseSignSGD, build_optimizers, find_puzzle_emb
from distlab.run.profiling import phase
from distlab.runtime.sampler import GlobalBatchSampler
from distlab.training.checkpoint import Box
from distlab.training.loop import after_step
from distlab.training.lr_schedule import set_lr
from distlab.training.wrap import replays_cuda_graphs, unwrap

log = logging.getLogger("distlab")


def total_steps(cfg: HRMConfig, split: PuzzleSplit) -> int:
    """``steps``, or the steps ``epochs`` take: HRM's and TRM's ``pretrain.py`` count
    ``int(epochs x total_groups x mean_puzzle_examples / global_batch_size)``."""
    if cfg.steps > 0:
        return cfg.steps
    if cfg.sampling == "examples":
        return max(1, math.ceil(cfg.epochs * split.num_examples / cfg.global_batch_size))
    return max(1, int(cfg.epochs * split.examples_per_epoch / cfg.global_batch_size))


def make_sampler(cfg: HRMConfig, split: PuzzleSplit, rank: int, world_size: int) -> GlobalBatchSampler:
    """The training order: group-balanced epochs (HRM's) unless ``sampling=examples``."""
    groups = split.example_groups() if cfg.sampling == "groups" else None
    return GlobalBatchSampler(split.num_examples, cfg.global_batch_size, rank, world_size, cfg.run.seed,
                              groups=groups)


def metadata_dict(split: PuzzleSplit) -> dict:
    return model_metadata(split.metadata)


def build(cfg: HRMConfig, session, meta: dict):
    """Model (wrapped), dense optimizers, sparse optimizer and EMA, identical on every rank."""
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    arch = cfg.arch
    if arch.mlp_t and arch.fused_mixer and rt.device.type == "cuda" and not fused_mixer.supported(rt.device):
        log.info("arch.fused_mixer: this GPU predates Ampere, so TRM's sequence mixer runs in PyTorch")
        arch = dataclasses.replace(arch, fused_mixer=False)
    core = build_model(arch, meta)
    if cfg.dist.verify_init:
        rt.verify_identical(core, "initial parameters")
    if cfg.arch.act in ("fixed", "none"):  # no halting is learned: freeze the Q head so no rank waits on its grads
        for name, p in core.named_parameters():
            if "q_head" in name:
                p.requires_grad_(False)
    model = session.wrap(core)
    opts = build_optimizers(unwrap(model), cfg.optimizer, cfg.lr, cfg.weight_decay, (cfg.beta1, cfg.beta2),
                            cfg.puzzle_emb_lr, cfg.puzzle_emb_weight_decay, cfg.optim.state_dtype, rt=rt,
                            equal_rows=True)  # every rank takes global_batch_size / world_size examples a step
    decay = 0.999 if cfg.arch.ema_decay is None else cfg.arch.ema_decay
    ema = EMA(unwrap(model), decay, warmup=cfg.ema_warmup) if cfg.ema else None
    return model, opts, ema


def evaluation_weights(model, ema: EMA | None):
    """The weights an evaluation scores, as a context: the EMA average when the run keeps one (TRM), else the
    model's own."""
    return ema.apply_to(unwrap(model)) if ema is not None else contextlib.nullcontext()


def track_state(session, model, dense: list, ema: EMA | None) -> None:
    """What training and evaluation both restore: the model, its dense optimizers and the EMA weights."""
    session.track_model("model", model, dense)
    if ema is not None:
        session.track("ema", ema)


def train(cfg: HRMConfig, session) -> dict:
    rt = session.rt
    data_dir = cfg.data.resolved_path()
    train_split, test_split = load_split(data_dir, "train"), load_split(data_dir, "test")
    if train_split.num_examples == 0:  # checked here: `distlab eval` validates the same config and may score it
        raise DistlabError(f"{data_dir} has no training examples (a holdout is built for evaluation only); train on "
                           f"another dataset and score this one with `distlab eval RUN data.path={data_dir}`")
    meta = metadata_dict(train_split)
    model, opts, ema = build(cfg, session, meta)
    dense = [o for o in opts if not isinstance(o, SparseSignSGD)]  # the sparse table lives in the model state
    steps = total_steps(cfg, train_split)
    sampler = make_sampler(cfg, train_split, rt.rank, rt.world_size)
    session.auto_micro_batch(model, cfg.global_batch_size // rt.world_size,
                             _probe(cfg, session, model, train_split))
    carry_box = Box()
    track_state(session, model, dense, ema)
    session.track("sampler", sampler)
    session.track("carry", carry_box, per_rank=True)
    session.counters["elapsed_s"] = 0.0
    session.counters[TRAINED_ON] = data_signature(data_dir)  # what `distlab eval` checks other datasets against
    step = session.restore()
    accum = cfg.dist.grad_accum
    elapsed_before, carries = session.counters["elapsed_s"], _restored_carries(carry_box.value, accum)
    if step and carries[0] is None:
        log.warning("ACT carry not restored (new world size or grad_accum): in-flight sequences restart from "
                    "fresh data")
    arrays = train_split.example_arrays()
    flops_step = flops_per_example(cfg.arch, meta, training=True) * cfg.global_batch_size
    progress, meter = session.progress(steps, step), session.throughput()
    seq_tokens = meta["seq_len"] * cfg.global_batch_size
    status, last, t_start, flops_done = "completed", {}, time.perf_counter(), flops_step * step
    window, window_steps = {}, 0  # metric sums since the last log line (on the device: no sync per step)
    planned = steps  # arch.curriculum follows the planned steps (a time limit may lower ``steps`` on the way)
    staged = cfg.arch.curriculum and len(parse_curriculum(cfg.arch.curriculum, cfg.arch.H_cycles)) > 1
    if staged and cfg.run.time_limit_s:  # a one-stage schedule (train at a fixed depth) has nothing to grow
        log.warning("arch.curriculum grows the depth over steps=%d, not over run.time_limit_s=%gs: if the time limit "
                    "ends the run first, the deeper stages never train; set steps to what the budget reaches",
                    planned, cfg.run.time_limit_s)
    model.train()
    # the puzzle embedding's trainable copies: one persistent slot per micro-batch, chosen here, outside the
    # compiled model, so its graph stays whole (see models/puzzle_emb.py)
    puzzle_emb = find_puzzle_emb(unwrap(model))
    graphs = replays_cuda_graphs(cfg.dist, rt.device)  # dist.compile_mode=reduce_overhead: whole-graph replays
    while step < steps:
        if cfg.arch.curriculum:  # a pure function of the step: a resumed run trains at the depth it stopped at
            unwrap(model).model.inner.active_H_cycles = curriculum_cycles(cfg.arch.curriculum, cfg.arch.H_cycles,
                                                                         step, planned)
        # dist.grad_accum micro-batches per optimizer step, each with its own ACT carry (a carry holds the
        # sequences of one micro-batch slot); gradients are all-reduced on the last micro-batch only
        for micro, idx in enumerate(np.split(sampler.next(), accum)):
            with phase("data"):
                batch = make_batch(train_split, idx, rt.device, arrays)
            if carries[micro] is None:
                carries[micro] = unwrap(model).initial_carry(batch)
            with session.no_sync(model, micro):
                with phase("forward"), session.autocast():
                    if puzzle_emb is not None:
                        puzzle_emb.use_slot(micro, len(idx))
                    carries[micro], loss, part, _, _ = run_segment(model, carries[micro], batch, graphs,
                                                                       keep_outputs=False)
                # HRM's loss is a sum over examples: / global batch makes it the global mean once the
                # micro-batches are summed, x world size undoes DDP's averaging over ranks
                with phase("backward"):
                    session.amp.backward((loss / cfg.global_batch_size) * rt.world_size)
            for k, v in part.items():  # sums (count, correct tokens, losses) add over micro-batches
                window[k] = window.get(k, 0) + (v.detach() if hasattr(v, "detach") else v)
        with phase("optimizer"):
            # HRM's pretrain.py: warm-up from 0 at step 0, then cosine to lr_min_ratio over the (possibly lowered) steps
            lrs = set_lr(opts, step, cfg.lr_warmup_steps, steps, "cosine", cfg.lr_min_ratio, warmup_from_zero=True)
            # the grad norm is measured only when clipping; None also when fp16 skipped the step (inf/NaN gradients)
            gnorm = session.amp.step(opts, model, cfg.clip_grad if cfg.clip_grad > 0 else None)
            for opt in opts:
                opt.zero_grad(set_to_none=True)  # the sparse optimizer drops the copies of a skipped step
        if ema is not None:
            with phase("ema"):
                ema.update(unwrap(model))
        step += 1
        session.profile_step()
        flops_done += flops_step
        meter.add(cfg.global_batch_size, seq_tokens, flops_step)
        window_steps += 1
        if step % cfg.log.every == 0 or step == steps:
            last = _window_metrics(rt.reduce_sums({k: float(v) for k, v in window.items()}),
                                   cfg.global_batch_size * window_steps, window_steps)
            last["lr"] = lrs[0]
            window, window_steps = {}, 0
            if gnorm is not None:  # measured only when clipping (clip_grad > 0)
                last["grad_norm"] = float(gnorm)
            session.metrics.log(step, {**last, **meter.report(), "epoch": sampler.epoch})
            progress.update(step, loss=last["loss"], acc=last.get("accuracy", 0.0))
        else:
            progress.update(step)
        elapsed = elapsed_before + time.perf_counter() - t_start
        carry_box.value, session.counters["elapsed_s"] = (carries[0] if accum == 1 else list(carries)), elapsed
        stopped, steps = after_step(session, step, steps, every=cfg.eval_every, evaluate=lambda at: _eval(
            cfg, session, model, ema, test_split, at, flops_done, elapsed, final=False))
        if stopped:
            status = "preempted"
            break
    progress.close()
    from distlab.runtime.dist import module_checksum

    result = {"status": status, "step": step, "steps": steps, "train": last, "data": str(data_dir),
              "param_checksum": module_checksum(unwrap(model)), "world_size": rt.world_size}
    if status == "completed":
        elapsed = elapsed_before + time.perf_counter() - t_start
        result["eval"] = _eval(cfg, session, model, ema, test_split, step, flops_done, elapsed, final=True)
        if cfg.eval.also:
            result["also"] = _eval_also(cfg, session, model, ema, step)
    return result


def _probe(cfg: HRMConfig, session, model, split: PuzzleSplit):
    """``dist.auto_micro_batch``'s probe: one fresh-carry training segment on ``n`` examples, its puzzle-embedding
    gradients dropped (the unwrapped module: no DDP collective, so ranks probe independently)."""
    def probe(n: int) -> None:
        inner = unwrap(model)
        batch = make_batch(split, np.arange(n) % split.num_examples, session.rt.device)
        try:
            with session.autocast():
                _, loss, _, _, _ = inner(inner.initial_carry(batch), batch)
            (loss / cfg.global_batch_size).backward()
        finally:
            emb = find_puzzle_emb(inner)
            if emb is not None:
                emb.pop_local_grads()
    return probe


def _restored_carries(saved, accum: int) -> list:
    """One ACT carry per micro-batch slot; a checkpoint holds one carry (grad_accum=1) or a list of them."""
    if accum == 1:
        return [None if isinstance(saved, list) else saved]
    if isinstance(saved, list) and len(saved) == accum:
        return list(saved)
    return [None] * accum


def _window_metrics(tot: dict[str, float], examples: int, steps: int) -> dict[str, float]:
    """One log line from the sums since the last one. Under ACT a sequence is scored on the step it halts,
    and a batch that started together halts together, so a single step often scores nothing: accuracies are
    over every sequence that halted in the window (nan when none did), losses per example of every step's
    batch (as HRM), ``halted`` the sequences that halted per step."""
    count = tot.pop("count")

    def mean(key: str, total: float) -> float:
        if key.endswith("loss"):
            return total / examples
        return total / count if count else math.nan

    out = {k: mean(k, v) for k, v in tot.items()}
    return {"loss": out.pop("lm_loss"), **out, "halted": count / steps}


def _eval(cfg, session, model, ema, split, step, flops_done, elapsed, final: bool) -> dict:
    with evaluation_weights(model, ema):
        out = evaluate(cfg, session, model, split, save_dir=session.run_dir if final else None, interim=not final)
    row = {k: v for k, v in out.items() if isinstance(v, (int, float))}
    # device-seconds = ranks x wall time; named gpu_seconds too only when the devices are GPUs
    row.update(flops=flops_done, device_seconds=elapsed * session.rt.world_size, wall_s=elapsed)
    if session.rt.device.type == "cuda":
        row["gpu_seconds"] = row["device_seconds"]
    session.metrics.log(step, row, split="eval")
    if session.rt.is_main:
        log.info("eval @%d: exact %.4f token %.4f blank cells %.4f (n=%d); copy-the-input baseline: token %.4f "
                 "exact %.4f", step, out["exact_accuracy"], out["token_accuracy"], out["blank_accuracy"], out["count"],
                 out["copy_baseline_token_accuracy"], out["copy_baseline_exact_accuracy"])
    return {**out, **row}


def _eval_also(cfg, session, model, ema, step: int) -> dict[str, dict]:
    """The final evaluation of each ``eval.also`` dataset, logged as split ``eval:<name>`` (holdout or folder)."""
    with evaluation_weights(model, ema):
        also = score_also(cfg, session, model, session.run_dir if session.rt.is_main else None)
    for path, out in also.items():
        session.metrics.log(step, {k: v for k, v in out.items() if isinstance(v, (int, float, str))},
                            split=f"eval:{short_name(path)}")
        if session.rt.is_main:
            log.info("eval @%d on %s: exact %.4f blank cells %.4f (n=%d)%s", step, short_name(path),
                     out["exact_accuracy"], out["blank_accuracy"], out["count"],
                     f"; selected of {out['samples']}: exact {out['sampled_exact_accuracy']:.4f}"
                     if "samples" in out else "")
    return also


def ensure_dataset(cfg: HRMConfig) -> Path:
    """Build the dataset named by the config if it is missing (used by demos and suites)."""
    path = cfg.data.resolved_path()
    if _dataset_complete(path):
        return path
    if cfg.data.build == "none":
        raise DistlabError(f"dataset {path} not found; build it (distlab data sudoku|maze|arc --output-dir {path}) or "
                           f"set data.build=sudoku|maze|arc to build it automatically")
    # concurrent runs of a suite share one derived dataset path: the first builds it, the others wait
    with exclusive_lock(path.parent / f".{path.name}.lock"):
        if not _dataset_complete(path):
            _build_dataset(cfg, path)
    return path


def _dataset_complete(path: Path) -> bool:
    return (path / "train" / "dataset.json").exists() and (path / "test" / "dataset.json").exists()


def _build_dataset(cfg: HRMConfig, path: Path) -> None:
    from distlab.recipes.hrm.data import arc, maze, sudoku

    d = cfg.data
    if d.build == "sudoku":
        kw = {"min_difficulty": d.min_difficulty} if d.min_difficulty >= 0 else {}
        if d.blanks:
            kw["blanks"] = d.blanks
        sudoku.build_sudoku(path, source=d.source, train_size=d.train_size, test_size=d.test_size,
                            num_aug=d.num_aug, seed=d.seed, workers=d.workers, **kw)
    elif d.build == "maze":
        kw = {"min_path_length": int(d.min_difficulty)} if d.min_difficulty >= 0 else {}
        maze.build_maze(path, source=d.source, train_size=d.train_size, test_size=d.test_size,
                        aug=d.num_aug > 0, seed=d.seed, **kw)
    elif d.build == "arc":
        arc.build_arc(path, source=d.source if d.source != "generate" else "arc1", num_aug=d.num_aug, seed=d.seed,
                      workers=d.workers)
    else:
        raise DistlabError(f"data.build={d.build!r} is not one of sudoku, maze, arc, none")
