"""Run a function in N real processes joined by a gloo process group (CPU).

Multi-process behaviour is tested with real processes, never mocked: each rank is a separate
Python process started by torch.multiprocessing, rendezvous goes through a TCP store on a free
localhost port.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, fn: Callable, args: tuple, queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        queue.put((rank, fn(rank, world_size, *args)))
    finally:
        dist.destroy_process_group()


def run_ranks(fn: Callable, world_size: int, *args: Any) -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` on every rank; return the results ordered by rank.

    ``fn`` must be a module-level function (it is pickled) and its result picklable. A job whose rank aborted
    (SIGABRT, "terminate called without an active exception") before any rank reported a result is started once
    more on a fresh port: on a loaded 2-core machine gloo's start-up aborted about one process group in twenty,
    before the test's function ran. An exception in ``fn``, or an abort after a result, fails at once.
    """
    try:
        return _run_ranks_once(fn, world_size, *args)
    except mp.ProcessExitedException as exc:
        if exc.signal_name != "SIGABRT" or getattr(exc, "results_seen", True):
            raise
        return _run_ranks_once(fn, world_size, *args)


def _run_ranks_once(fn: Callable, world_size: int, *args: Any) -> list[Any]:
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = mp.start_processes(_worker, args=(world_size, free_port(), fn, args, queue),
                               nprocs=world_size, join=False, start_method="spawn")
    results: dict[int, Any] = {}
    done = False
    while not done:  # drain while waiting: a rank blocks on a full pipe until its result is read
        while not queue.empty():
            rank, value = queue.get()
            results[rank] = value
        try:
            done = procs.join(timeout=0.1)  # raises if a rank failed
        except mp.ProcessExitedException as exc:
            exc.results_seen = bool(results)
            raise
    while not queue.empty():
        rank, value = queue.get()
        results[rank] = value
    return [results[r] for r in range(world_size)]
