"""Fault drills on a multi-GPU machine (issue 44, item 3), printed as one table.

Each drill starts a real job, waits until every rank trains and a checkpoint exists, applies the fault, and times
how long the launcher takes to end the job; then it checks the launcher's last line names the rank, that no process
of the run is left, and that the same command resumes (on the same and on half the devices) to the end:

    python3 benchmarks/fault_drills.py --launch "--gpus 4" --half "--gpus 2"      # on the device (NCCL)
    python3 benchmarks/fault_drills.py --launch "--procs 2" --half "--procs 1" --recipe toy   # the CPU (gloo)

Drills (``--drills``, all by default): kill -9 of the last rank, SIGSTOP of rank 0, SIGSTOP of the last rank. A stalled NCCL collective is what a
stopped rank causes its peers: the SIGSTOP drills are the NCCL-timeout drills too (dist.timeout_s is short here).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

RECIPE_ARGS = {
    "hrm": ["data.build=sudoku", "data.train_size=256", "data.test_size=64", "data.workers=4", "global_batch_size=64",
            "arch.hidden_size=128", "arch.num_heads=4", "arch.H_layers=2", "arch.L_layers=2",
            "arch.halt_max_steps=4", "arch.puzzle_emb_ndim=128", "lr_warmup_steps=5", "data.eval_limit=64"],
    "toy": ["step_delay_s=0.2"],
    # a random-weight Qwen2.5-0.5B shape (no download): sampling, sandbox scoring and the update all run, so a fault
    # can land in any of them; the overlong penalty varies with length, so updates move the weights and a resume
    # that replayed different data would show in the checksum
    "grpo": ["model.source=random:qwen2.5-0.5b", "prompts_per_step=8", "num_generations=4",
             "sampling.max_completion_length=32", "evaluation.before=false", "reward_funcs=[tests,overlong]",
             "overlong_buffer=16"],
}
DRILLS = {"kill9": (-1, signal.SIGKILL), "stop0": (0, signal.SIGSTOP), "stoplast": (-1, signal.SIGSTOP)}


def start(args: argparse.Namespace, name: str, launch: str, steps: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "distlab.cli", "train", args.recipe, *RECIPE_ARGS[args.recipe], f"steps={steps}",
           "ckpt.every=10", "log.every=5", f"dist.timeout_s={args.timeout_s}", f"run.dir={args.root}",
           f"run.name={name}", *args.set, *shlex.split(launch)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rank_pids(run_dir: Path, ranks: int, deadline: float) -> list[int]:
    """The ranks' pids from their logs' ``pid=`` lines, once every rank is past start-up."""
    while time.time() < deadline:
        pids = []
        for r in range(ranks):
            log = run_dir / f"rank{r}.log"
            text = log.read_text() if log.exists() else ""
            if "pid=" in text:
                pids.append(int(text.split("pid=")[1].split()[0]))
        if len(pids) == ranks and any((run_dir / "checkpoints").glob("*")):
            return pids
        time.sleep(0.5)
    raise SystemExit(f"{run_dir}: the ranks never started or no checkpoint was written")


def leftovers(name: str) -> list[int]:
    """Live processes whose command line names the run (a /proc scan)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if f"run.name={name}" in cmd:
                out.append(int(entry))
    return out


def drill(args: argparse.Namespace, name: str, victim: int, sig: signal.Signals) -> dict:
    ranks = args.ranks
    proc = start(args, name, args.launch, args.steps)
    pids = rank_pids(Path(args.root) / name, ranks, time.time() + 300)
    victim = victim % ranks
    os.kill(pids[victim], sig)
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=args.timeout_s + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    took = time.monotonic() - t0
    for pid in pids:  # a stopped rank must not outlive the drill, pass or fail
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    errors = [ln for ln in err.splitlines() if ln.startswith("distlab: error:")]
    time.sleep(2)
    row = {"drill": f"{sig.name} rank {victim}", "exit": proc.returncode, "seconds": round(took, 1),
           "names_rank": bool(errors) and f"rank {victim}" in errors[-1], "within_timeout_plus_30":
           took <= args.timeout_s + 30, "leftovers": len(leftovers(name)), "line": errors[-1] if errors else ""}
    # a copy of the interrupted run first, to resume on half the devices beside the resume on the same ones
    subprocess.run(["cp", "-r", f"{args.root}/{name}", f"{args.root}/{name}-half"], check=True)
    for label, run, launch in (("same", name, args.launch), ("half", f"{name}-half", args.half)):
        done = start(args, run, launch, args.steps)
        done.communicate(timeout=900)
        row[f"resume_{label}"] = outcome(done, Path(args.root) / run)
        if args.whole:
            row[f"data_{label}"] = same_batches(Path(args.root) / args.whole, Path(args.root) / run)
    return row


def digests(run_dir: Path) -> dict[int, str]:
    """step -> the digest of the global batch it trained on, from the run's metrics rows (a resumed run's rows for
    steps it ran twice: the later ones)."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return {r["step"]: r["data_digest"] for r in rows if r.get("split") == "train" and r.get("data_digest")}


def same_batches(whole: Path, resumed: Path) -> str:
    """Whether a resumed run trained on the uninterrupted run's batches, step by step, over the steps both logged:
    what shows the same data order where the numerics of two GPU runs differ anyway."""
    a, b = digests(whole), digests(resumed)
    both = sorted(set(a) & set(b))
    if not both:
        return "no steps logged by both (log.every, data_digest)"
    differ = [s for s in both if a[s] != b[s]]
    return (f"same batches at all {len(both)} logged steps ({both[0]}-{both[-1]})" if not differ
            else f"DIFFERENT batches at {len(differ)} of {len(both)} logged steps, first at step {differ[0]}")


def outcome(proc: subprocess.Popen, run_dir: Path) -> str:
    """A finished run's step, world, loss (GRPO: mean reward) and parameter checksum, or its exit code."""
    summary = run_dir / "summary.json"
    if proc.returncode != 0 or not summary.exists():
        return f"exit {proc.returncode}"
    s = json.loads(summary.read_text())
    train = s["train"]
    loss = f"loss {train['loss']}" if "loss" in train else f"reward {train.get('reward_mean')}"
    return f"step {s['step']}, world {s['world_size']}, {loss}, params {s['param_checksum'][:10]}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launch", default="--gpus 4", help="how the drilled job launches")
    p.add_argument("--half", default="--gpus 2", help="how the second resume launches")
    p.add_argument("--recipe", default="hrm", choices=sorted(RECIPE_ARGS))
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--timeout-s", type=float, default=60.0, help="dist.timeout_s of the drilled jobs")
    p.add_argument("--root", default="/tmp/drills")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides after the recipe's drill settings")
    p.add_argument("--uninterrupted", action="store_true", help="first run the job once without a fault")
    p.add_argument("--drills", default=",".join(DRILLS), help=f"comma-separated, from {', '.join(DRILLS)}")
    args = p.parse_args()
    unknown = sorted(set(args.drills.split(",")) - set(DRILLS))
    if unknown:
        p.error(f"unknown drill(s) {', '.join(unknown)}: choose from {', '.join(DRILLS)}")
    args.ranks = int(shlex.split(args.launch)[-1])
    args.whole = ""
    if args.uninterrupted:  # what a resume should reproduce: the same command never interrupted
        name = args.whole = f"whole-{os.getpid()}"
        proc = start(args, name, args.launch, args.steps)
        proc.communicate(timeout=900)
        print(json.dumps({"drill": "none (uninterrupted)", "result": outcome(proc, Path(args.root) / name)}), flush=True)
    for name in args.drills.split(","):
        victim, sig = DRILLS[name]
        print(json.dumps(drill(args, f"{name}-{os.getpid()}", victim, sig)), flush=True)  # each row as it ends


if __name__ == "__main__":
    main()
