"""Issue 19 exploration: time one HRM/TRM training step (forward with ACT and the Q target, loss, backward,
both optimizers) under candidate same-math changes, each in its own process so Inductor starts clean.

    python3 benchmarks/archive/hrm_step_variants.py --preset sudoku-extreme-1k --variants base,split,cdt,split+cdt

A variant is ``+``-joined switches:
  base      the code as it is
  cdt       Inductor's coordinate-descent tuning of its generated kernels
  autotune  torch.compile mode max-autotune-no-cudagraphs
  nofused   arch.fused_mixer=false: TRM's no-grad sequence-mixer passes in PyTorch instead of the Triton kernel
The SwiGLU split and TRM's positions-first sequence mixer were measured with this script as temporary switches
(split, seqmm, seqfirst; docs/benchmarks.md) and then became the code.
Prints one line per variant: ms per step (median of the timed steps), examples/s, compile+warm-up seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def apply_switches(switches: set[str]) -> None:
    import torch

    unknown = switches - {"base", "cdt", "autotune", "nofused"}
    if unknown:
        raise SystemExit(f"unknown variant switch(es) {sorted(unknown)}: use base, cdt, autotune, nofused")
    if "cdt" in switches:
        torch._inductor.config.coordinate_descent_tuning = True


def run_one(preset: str, variant: str, steps: int, warmup: int, batch: int) -> dict:
    import numpy as np
    import torch
    import yaml

    from distlab.recipes.hrm.models.build import build_model
    from distlab.recipes.hrm.optim import build_optimizers

    switches = set(variant.split("+"))
    apply_switches(switches)
    cfg = yaml.safe_load((ROOT / "src/distlab/recipes/hrm/presets" / f"{preset}.yaml").read_text())
    cfg["arch"]["fused_mixer"] = "nofused" not in switches
    meta = {"vocab_size": 11, "seq_len": 81, "num_puzzle_identifiers": 1}
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = build_model(cfg["arch"], meta).to(dev)
    opts = build_optimizers(model, "adam_atan2", cfg["lr"], cfg["weight_decay"], (0.9, 0.95),
                            cfg["puzzle_emb_lr"], cfg["puzzle_emb_weight_decay"], "float32")
    mode = "max-autotune-no-cudagraphs" if "autotune" in switches else None
    compiled = torch.compile(model, mode=mode)
    rng = np.random.default_rng(0)

    def batch_of() -> dict:
        x = torch.from_numpy(rng.integers(1, 11, size=(batch, 81))).to(dev)
        pids = torch.zeros(batch, dtype=torch.long, device=dev)
        return {"inputs": x, "labels": x.clone(), "puzzle_identifiers": pids}

    batches = [batch_of() for _ in range(8)]
    carry = model.initial_carry(batches[0])
    times = []
    t0 = time.perf_counter()
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        carry, loss, _, _, _ = compiled(carry, batches[i % 8])
        (loss / batch).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i == warmup - 1:
            warm_s = time.perf_counter() - t0
        if i >= warmup:
            times.append(time.perf_counter() - t)
    ms = 1000 * statistics.median(times)
    return {"preset": preset, "variant": variant, "ms_per_step": round(ms, 2),
            "examples_per_s": round(batch / ms * 1000), "warmup_s": round(warm_s, 1),
            "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="sudoku-extreme-1k")
    ap.add_argument("--variants", default="base")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=768)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.preset, a.one, a.steps, a.warmup, a.batch)), flush=True)
        return
    for variant in a.variants.split(","):
        cmd = [sys.executable, __file__, "--preset", a.preset, "--one", variant, "--steps", str(a.steps),
               "--warmup", str(a.warmup), "--batch", str(a.batch)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            print(lines[-1] if lines else f"{a.preset} {variant}: failed: {out.stderr.strip().splitlines()[-1:]}",
                  flush=True)
        except subprocess.TimeoutExpired:
            print(f"{a.preset} {variant}: over {a.timeout} s", flush=True)


if __name__ == "__main__":
    main()
