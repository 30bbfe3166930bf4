#!/usr/bin/env python3
"""Seconds per AdamW step on this machine's CPU for each ``optim.state_dtype``: what an optimizer step costs when
FSDP2's CPU offload (``dist.cpu_offload=true``) keeps the parameters, gradients and moments on the host.

The low-precision states come from torchao, whose step is compiled per parameter shape, so the first step includes
the compilation. Default shapes: one Llama-3.2-3B layer's distinct matrices (75M parameters).

    python benchmarks/adam_states_cpu.py [--steps 3] [--states fp32,int8] [--shapes 8192x3072,3072x8192,...]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from distlab.training.optim_state import STATE_DTYPES, adamw

SHAPES = "8192x3072,3072x8192,3072x3072,1024x3072"


def parse_shapes(text: str) -> list[tuple[int, int]]:
    try:
        shapes = [tuple(int(n) for n in s.split("x")) for s in text.split(",")]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise SystemExit(f"adam_states_cpu.py: --shapes '{text}': give ROWSxCOLS,ROWSxCOLS (positive integers)")
    return shapes


def time_steps(state_dtype: str, shapes: list[tuple[int, int]], steps: int, seed: int = 0) -> list[float]:
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(*s, generator=gen) * 0.02) for s in shapes]
    opt = adamw(params, state_dtype=state_dtype, lr=1e-4)
    out = []
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 1e-3
        start = time.perf_counter()
        opt.step()
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--states", default="fp32,int8")
    ap.add_argument("--shapes", default=SHAPES)
    a = ap.parse_args(argv)
    states = a.states.split(",")
    bad = [s for s in states if s not in STATE_DTYPES]
    if bad or a.steps < 1:
        raise SystemExit(f"adam_states_cpu.py: --states takes {', '.join(STATE_DTYPES)} and --steps >= 1 "
                         f"(got {a.states!r}, {a.steps})")
    shapes = parse_shapes(a.shapes)
    n = sum(r * c for r, c in shapes)
    print(f"{n / 1e6:.1f}M parameters in {len(shapes)} tensors, {torch.get_num_threads()} CPU threads, torch "
          f"{torch.__version__}")
    print("state dtype | " + " | ".join(f"step {i + 1} s" for i in range(a.steps)))
    for s in states:
        print(f"{s} | " + " | ".join(f"{t:.2f}" for t in time_steps(s, shapes, a.steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
