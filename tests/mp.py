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

    ``fn`` must be a module-level function (it is pickled) and its result picklable. gloo aborts now and then on a
    loaded 2-core machine (SIGABRT, "terminate called without an active exception"): at start-up, about one process
    group in twenty, before the test's function ran, and in teardown (``destroy_process_group``) after the ranks
    reported. An abort after every rank reported keeps the results; any other abort starts the job again on a fresh
    port, up to ``START_ATTEMPTS`` times in all (2026-11-26: twice in a row in one full suite run), so an abort the
    test's own code causes every time still fails. An exception in ``fn`` fails at once.
    """
    for attempt in range(START_ATTEMPTS):
        try:
            return _run_ranks_once(fn, world_size, *args)
        except mp.ProcessExitedException as exc:
            last = attempt == START_ATTEMPTS - 1
            if exc.signal_name != "SIGABRT" or last:
                raise
    raise AssertionError("unreachable")


START_ATTEMPTS = 3


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
            # no draining here: join has just killed the other ranks, maybe in the middle of writing a result, and
            # reading a half-written message would wait for its rest forever
            if exc.signal_name == "SIGABRT" and len(results) == world_size:
                # every rank reported: the abort came in gloo's teardown (destroy_process_group), after the work
                return [results[r] for r in range(world_size)]
            raise
    while not queue.empty():
        rank, value = queue.get()
        results[rank] = value
    return [results[r] for r in range(world_size)]
