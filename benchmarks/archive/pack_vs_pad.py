"""The GRPO update pass padded, trimmed and packed: time and peak memory on one GPU (issue 31, item 4).

The update pass of a GRPO step (policy log-probs and entropies of every completion, forward and backward, one
micro-batch at a time) is run three ways on the same rows, through the recipe's own functions
(``batching.sequences``/``by_length``/``micro_batches``, ``logprobs.logprobs``):

* ``padded``  -- every micro-batch padded to the widest row of the whole batch, rows in sampling order (before);
* ``trimmed`` -- rows sorted by length, each micro-batch cut to its own widest row (today's default);
* ``packed``  -- as ``trimmed`` plus ``padding_free=true``: sequences packed into rows with a block-diagonal mask.

Row lengths are drawn, seeded, from a stated distribution (prompts uniform in [--prompt-min, --prompt-max]
tokens; completions log-normal with median --completion-median, capped at --completion-max), the shape of
code-RL rollouts where a few completions run to the limit and most stop early. Random-weight models of
published shapes (``random:<shape>``) are enough: the cost does not depend on what the weights learned.

    python benchmarks/archive/pack_vs_pad.py --shapes qwen2.5-0.5b,qwen2.5-1.5b --out $OUT
    python benchmarks/archive/pack_vs_pad.py --smoke      # tiny model on the CPU: checks the plumbing
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for mem_options
from mem_options import _commit, _device  # noqa: E402  (the other memory tables' header)

from distlab.recipes.lm.models.source import load_causal_lm  # noqa: E402
from distlab.recipes.lm.pg.batching import by_length, micro_batches, sequences  # noqa: E402
from distlab.recipes.lm.pg.logprobs import logprobs, pack_rows  # noqa: E402

MODES = ("padded", "trimmed", "packed")


def draw_rows(n: int, seed: int, prompt_min: int, prompt_max: int, median: int, cap: int, vocab: int
              ) -> tuple[list[list[int]], list[list[int]]]:
    """``n`` (prompt ids, completion ids) pairs of the stated length distribution."""
    g = torch.Generator().manual_seed(seed)
    plen = torch.randint(prompt_min, prompt_max + 1, (n,), generator=g)
    clen = (torch.randn(n, generator=g) * 0.9 + torch.log(torch.tensor(float(median)))).exp()
    clen = clen.round().clamp(4, cap).long()
    ids = lambda k: torch.randint(3, vocab, (int(k),), generator=g).tolist()  # noqa: E731
    return [ids(k) for k in plen], [ids(k) for k in clen]


def update_pass(model, prompts, comps, mode: str, micro: int, chunk: int, device) -> dict:
    """One pass over every micro-batch (forward and backward), as the recipe's update does it."""
    if mode != "padded":
        order = by_length([len(p) + len(c) for p, c in zip(prompts, comps)]).tolist()
        prompts, comps = [prompts[i] for i in order], [comps[i] for i in order]
    ids, attn, comp = sequences(prompts, comps, 0, device)
    batches = micro_batches(len(prompts), micro, None if mode == "padded" else attn)
    tokens = 0
    for sl in batches:
        logp, ent = logprobs(model, ids[sl], attn[sl], comp[sl], chunk_tokens=chunk, entropy=True,
                             pack=mode == "packed")
        (logp.sum() + 0.01 * ent.sum()).div(comp.sum()).backward()
        tokens += int(pack_rows(attn[sl]).positions.numel() if mode == "packed" else ids[sl].numel())
    real = int(attn.sum())
    return {"slots": tokens, "real_tokens": real, "micro_batches": len(batches)}


def measure(model, rows, mode: str, micro: int, chunk: int, device, repeats: int) -> dict:
    """Median wall time of ``repeats`` passes (after one warm-up pass) and the pass's peak memory."""
    cuda = device.type == "cuda"
    update_pass(model, *rows, mode, micro, chunk, device)  # warm-up: kernels, allocator
    model.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        info = update_pass(model, *rows, mode, micro, chunk, device)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    times.sort()
    return {"mode": mode, "pass_s": times[len(times) // 2], "peak_gib": peak, **info,
            "padding_share": 1 - info["real_tokens"] / info["slots"]}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="qwen2.5-0.5b,qwen2.5-1.5b")
    p.add_argument("--rows", type=int, default=64, help="completions in the step (prompts x G)")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--chunk", type=int, default=1024, help="logprob_chunk")
    p.add_argument("--prompt-min", type=int, default=80)
    p.add_argument("--prompt-max", type=int, default=320)
    p.add_argument("--completion-median", type=int, default=120)
    p.add_argument("--completion-max", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--attn", default="sdpa", help="model.attn_implementation: sdpa (dense packing mask) or "
                                                   "flex_attention (document block mask; needs a GPU for backward)")
    p.add_argument("--out", default=os.environ.get("OUT", ""))
    p.add_argument("--smoke", action="store_true", help="tiny model on the CPU, short rows")
    a = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    sources = ["tiny:llama-2l"] if a.smoke else [f"random:{s}" for s in a.shapes.split(",")]
    if a.smoke:
        a.rows, a.micro_batch, a.prompt_min, a.prompt_max, a.completion_median, a.completion_max = 8, 4, 4, 12, 6, 24
        a.repeats = 1
    results = []
    for source in sources:
        model, _ = load_causal_lm(source, dtype="fp32", device=device, attn_implementation=a.attn)
        model.train()
        vocab = min(model.config.vocab_size, 259)  # the byte tokenizer's ids: inside every vocabulary
        rows = draw_rows(a.rows, a.seed, a.prompt_min, a.prompt_max, a.completion_median, a.completion_max, vocab)
        for mode in MODES:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                r = {"model": source, **measure(model, rows, mode, a.micro_batch, a.chunk, device, a.repeats)}
            print(json.dumps(r), flush=True)
            results.append(r)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    head = (f"date -u: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\ncommit: {_commit()}\n"
            f"device: {_device() if device.type == 'cuda' else 'cpu'}\ntorch: {torch.__version__}\n"
            f"rows: {a.rows}, micro-batch {a.micro_batch}, prompts U[{a.prompt_min},{a.prompt_max}], completions "
            f"log-normal median {a.completion_median} capped at {a.completion_max}, bf16 autocast, fp32 weights, "
            f"attention {a.attn}")
    lines = [head, "", "| model | mode | pass s | vs padded | peak GiB | slots | padding share | micro-batches |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        base = next(x for x in results if x["model"] == r["model"] and x["mode"] == "padded")
        lines.append(f"| {r['model']} | {r['mode']} | {r['pass_s']:.3f} | {base['pass_s'] / r['pass_s']:.2f}x | "
                     f"{r['peak_gib']:.2f} | {r['slots']} | {r['padding_share']:.0%} | {r['micro_batches']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "pack_vs_pad.md").write_text(text)
        (Path(a.out) / "pack_vs_pad.json").write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
