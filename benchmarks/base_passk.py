#!/usr/bin/env python3
"""Greedy pass@1 of an untrained model on a built-in task set, with its 95% interval, in one process.

A base model's figure is what every trained result is read against (and, for a quantised checkpoint, what says
how much the quantisation cost beside the published bf16 figure), so it is measured with the recipes' own prompt,
sampler, stop strings and sandbox: the numbers equal the ``before`` evaluation of a GRPO run on the same set.

    python3 benchmarks/base_passk.py /work/assets/qwen2.5-coder-0.5b-instruct.gguf --task mbpp --split test \
        --json docs/results/qwen_base_mbpp_cpu.json
    python3 benchmarks/base_passk.py tiny:llama-2l --task synthetic --n 8        # a smoke test

``--harness evalplus`` asks and judges as EvalPlus does (docs/evaluation.md), for a figure beside a published one:

    python3 benchmarks/base_passk.py /work/assets/qwen2.5-coder-0.5b-instruct.gguf --task mbpp --split sanitized \
        --harness evalplus --max-new-tokens 768 --dtype bfloat16 --json qwen_base_mbpp_evalplus.json

Progress (problems done, rate, ETA) is printed as chunks finish; ``--chunk`` sets prompts per generate call.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import torch  # noqa: E402

from distlab.atomic import atomic_write_json  # noqa: E402
from distlab.errors import DistlabError  # noqa: E402
from distlab.recipes.lm.config import EvalConfig, SamplingConfig, TaskConfig  # noqa: E402
from distlab.recipes.lm.eval.evaluation import evaluate_pass_at_k  # noqa: E402
from distlab.recipes.lm.harnesses import HARNESSES  # noqa: E402
from distlab.recipes.lm.models.source import load_causal_lm  # noqa: E402
from distlab.recipes.lm.rewards.scorer import RewardScorer  # noqa: E402
from distlab.recipes.lm.tasks.select import eval_tasks  # noqa: E402
from distlab.run.logs import phase_progress  # noqa: E402
from distlab.runtime.dist import Runtime  # noqa: E402
from distlab.sandbox.config import SandboxConfig  # noqa: E402


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(args: argparse.Namespace) -> dict:
    commit = _commit()  # the code that runs: taken before the minutes of evaluation in which HEAD may move
    task = TaskConfig(eval=args.task, eval_split=args.split, eval_size=args.n, mbpp_dir=args.mbpp_dir,
                      eval_families=args.families)
    tasks = eval_tasks(task)
    sampling = SamplingConfig(max_completion_length=args.max_new_tokens, chunk_prompts=args.chunk)
    device = torch.device(args.device)
    t0 = time.perf_counter()
    model, tok = load_causal_lm(args.model)
    model = model.to(device=device, dtype=getattr(torch, args.dtype)).eval()
    load_s = time.perf_counter() - t0
    scorer = RewardScorer(SandboxConfig(workers=args.workers, timeout_s=args.timeout_s), args.prompt_mode)
    started = time.perf_counter()
    try:
        out = evaluate_pass_at_k(model, tok, tasks, [], sampling, EvalConfig(harness=args.harness), scorer,
                                 Runtime(device=device),
                                 seed=args.seed, step_rows=args.chunk,
                                 progress=lambda label, total: phase_progress(label, total, "problem", quiet_s=0))
    finally:
        scorer.close()
    m = out["metrics"]
    return {"model": args.model, "task": f"{args.task}/{args.split}", "n_problems": m["n_problems"],
            "pass@1": m["pass@1"], "pass@1_low": m["pass@1_low"], "pass@1_high": m["pass@1_high"],
            "prompt_mode": args.prompt_mode, "harness": args.harness, "max_new_tokens": args.max_new_tokens,
            "dtype": args.dtype,
            "device": args.device if device.type != "cuda" else torch.cuda.get_device_name(device),
            "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
            "load_s": round(load_s, 1), "eval_s": round(time.perf_counter() - started, 1),
            "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), "commit": commit,
            "per_problem": out["per_problem"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a model source: HF dir, file.gguf, package:NAME or tiny:PRESET")
    p.add_argument("--task", default="mbpp", help="mbpp | humaneval | synthetic | math | FILE.jsonl")
    p.add_argument("--split", default="test")
    p.add_argument("--n", type=int, default=0, help="first N problems (0 = all)")
    p.add_argument("--families", default="", help="synthetic/math families, comma-separated")
    p.add_argument("--mbpp-dir", default="../shared/data/mbpp")
    p.add_argument("--prompt-mode", default="chat", choices=("chat", "text"))
    p.add_argument("--harness", default="distlab", choices=HARNESSES, help="how problems are asked and judged "
                   "(docs/evaluation.md); evalplus: EvalPlus's prompts, extraction, tolerance and time limits")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--chunk", type=int, default=32, help="prompts per generate call")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--workers", type=int, default=2, help="sandbox workers")
    p.add_argument("--timeout-s", type=float, default=5.0, help="sandbox time limit per program")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the result (and per-problem rows) here, atomically")
    args = p.parse_args(argv)
    try:
        res = run(args)
    except DistlabError as exc:
        print(f"base_passk: error: {exc}", file=sys.stderr)
        return 2
    print(f"{res['model']} on {res['task']} ({res['n_problems']} problems, greedy, {res['prompt_mode']}, "
          f"{res['harness']} harness): pass@1 "
          f"{100 * res['pass@1']:.1f}% [{100 * res['pass@1_low']:.1f}, {100 * res['pass@1_high']:.1f}] in "
          f"{res['eval_s'] / 60:.1f} min on {res['device']}")
    if args.json:
        atomic_write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
