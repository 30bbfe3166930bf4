"""Host time per compiled HRM training step on the CPU, at a width where the arithmetic is negligible.

On 4 H100s the HRM step is host-bound (its forward takes longer to launch than the GPU takes to run the whole
step), so what a change saves in per-call overhead (graph pieces, guards, Python frames) shows up directly in
throughput. A tiny-width model on the CPU measures that overhead alone: every kernel is microseconds, so the
wall time of each phase is almost all host work. The numbers say nothing about GPU kernel time.

The step is the trainer's (``recipes/hrm/train.py``): ``dist.grad_accum`` micro-batches, each with its own ACT
carry and, where the source tree has them, its own puzzle-embedding slot; DDP over gloo with ``--procs 2``; the
dense and the sparse optimizer. Run it against any source tree to compare commits::

    PYTHONPATH=/tmp/old/src python benchmarks/hrm_host_overhead.py --procs 2   # before
    python benchmarks/hrm_host_overhead.py --procs 2                           # after

Prints one JSON line: median milliseconds per step of forward, backward, optimizer and the whole step on rank 0,
as wall time and as CPU time of the training thread. On a machine shared with other work the wall time swings with
the load (a phase waits for a core); the thread's CPU time counts only the work the step itself did, so compare
that one across runs there.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ARCH = dict(name="hrm", hidden_size=16, num_heads=2, expansion=2.0, H_cycles=2, L_cycles=2, H_layers=4, L_layers=4,
            halt_max_steps=8, halt_exploration_prob=0.1, puzzle_emb_ndim=16, forward_dtype="float32",
            loss_type="stablemax", act="q_learning")
META = {"vocab_size": 11, "seq_len": 81, "num_puzzle_identifiers": 64}


PHASES = ("forward", "backward", "optimizer", "step")


def _medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: round(1e3 * statistics.median(v), 3) for k, v in times.items()}


def _batch(size: int, step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    inputs = torch.randint(1, META["vocab_size"], (size, META["seq_len"]), generator=g)
    ids = torch.randint(0, META["num_puzzle_identifiers"], (size,), generator=g)
    return {"inputs": inputs, "labels": inputs.clone(), "puzzle_identifiers": ids}


def _run(rank: int, world: int, port: int, args: argparse.Namespace, queue) -> None:
    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    from distlab.config import DistConfig
    from distlab.runtime.dist import Runtime
    from distlab.recipes.hrm.models import build_model
    from distlab.recipes.hrm.models.puzzle_emb import SparsePuzzleEmbedding
    from distlab.recipes.hrm.optim import build_optimizers
    from distlab.training.wrap import no_sync, wrap_model

    torch.manual_seed(0)
    rt = Runtime.from_process_group()
    core = build_model({**ARCH, "hidden_size": args.hidden, "H_layers": args.layers, "L_layers": args.layers},
                       META).train()
    model = wrap_model(core, rt, DistConfig(compile=True))
    opts = build_optimizers(core, "adamw", lr=1e-3, rt=rt, equal_rows=True)
    emb = next(m for m in core.modules() if isinstance(m, SparsePuzzleEmbedding))
    use_slot = getattr(emb, "use_slot", None)  # absent in trees from before the slots
    per_micro = args.batch // world // args.accum
    carries: list = [None] * args.accum
    wall: dict[str, list[float]] = {k: [] for k in PHASES}
    cpu: dict[str, list[float]] = {k: [] for k in PHASES}
    for step in range(args.warmup + args.steps):
        step_wall, step_cpu = {"forward": 0.0, "backward": 0.0}, {"forward": 0.0, "backward": 0.0}
        t_step, c_step = time.perf_counter(), time.thread_time()
        for micro in range(args.accum):
            batch = _batch(per_micro, step * args.accum * world + micro * world + rank)
            carries[micro] = core.initial_carry(batch) if carries[micro] is None else carries[micro]
            with no_sync(model, micro < args.accum - 1):
                t0, c0 = time.perf_counter(), time.thread_time()
                if use_slot is not None:
                    use_slot(micro, per_micro)
                carries[micro], loss, *_ = model(carries[micro], batch)
                t1, c1 = time.perf_counter(), time.thread_time()
                (loss / args.batch * world).backward()
                t2, c2 = time.perf_counter(), time.thread_time()
            step_wall["forward"] += t1 - t0
            step_wall["backward"] += t2 - t1
            step_cpu["forward"] += c1 - c0
            step_cpu["backward"] += c2 - c1
        t3, c3 = time.perf_counter(), time.thread_time()
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        t4, c4 = time.perf_counter(), time.thread_time()
        if step >= args.warmup:
            for out, phases in ((wall, {**step_wall, "optimizer": t4 - t3, "step": t4 - t_step}),
                                (cpu, {**step_cpu, "optimizer": c4 - c3, "step": c4 - c_step})):
                for k, v in phases.items():
                    out[k].append(v)
    if rank == 0:
        queue.put({"median_wall_ms": _medians(wall), "median_thread_cpu_ms": _medians(cpu)})
    if world > 1:
        dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", type=int, default=1, help="ranks (gloo, one process each); 2+ wraps the model in DDP")
    p.add_argument("--batch", type=int, default=16, help="global batch per optimizer step")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step (dist.grad_accum)")
    p.add_argument("--hidden", type=int, default=ARCH["hidden_size"], help="arch.hidden_size (tiny: little compute)")
    p.add_argument("--layers", type=int, default=ARCH["H_layers"], help="arch.H_layers and arch.L_layers (HRM's: 4)")
    p.add_argument("--steps", type=int, default=60, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation)")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_run, args=(args.procs, port, args, queue), nprocs=args.procs, start_method="spawn")
    import distlab

    print(json.dumps({"source": os.path.dirname(os.path.dirname(distlab.__file__)), "procs": args.procs,
                      "batch": args.batch, "accum": args.accum, "hidden": args.hidden, "layers": args.layers,
                      "steps": args.steps,
                      **queue.get()}))


if __name__ == "__main__":
    main()
