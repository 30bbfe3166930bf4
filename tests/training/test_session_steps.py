"""``Session.end_step``, the tail every recipe's step shares: stop agreement, time limit, checkpoint cadence."""

from __future__ import annotations

import signal
import time

import torch

import distlab.training.session as session_mod
from distlab.config import BaseConfig
from distlab.runtime.dist import Runtime, init_runtime
from distlab.training.session import Session
from mp import run_ranks


def _session(run_dir, rt: Runtime | None = None, every: int = 0, stop_at: int = 0,
             time_limit_s: float = 0.0) -> Session:
    cfg = BaseConfig()
    cfg.run.name, cfg.ckpt.every, cfg.run.stop_at, cfg.run.time_limit_s = "t", every, stop_at, time_limit_s
    cfg.log.progress = False
    s = Session(cfg, rt or Runtime(), "test", run_dir)
    model = torch.nn.Linear(2, 2)
    s.track_model("model", model, [torch.optim.SGD(model.parameters(), lr=0.1)])
    return s


def _saved(s: Session) -> list[int]:
    return [int(p.name[4:]) for p in s.ckpt.steps()]


def test_checkpoints_every_n_steps_and_at_the_last(tmp_path):
    s = _session(tmp_path, every=3)
    s.ckpt.keep_last = 10
    results = [s.end_step(step, 7) for step in range(1, 8)]
    assert results == [(False, 7)] * 7
    assert _saved(s) == [3, 6, 7]


def test_without_a_cadence_only_the_last_step_is_saved(tmp_path):
    s = _session(tmp_path)
    assert [s.end_step(step, 4) for step in range(1, 5)] == [(False, 4)] * 4
    assert _saved(s) == [4]


def test_at_end_false_skips_only_the_natural_end(tmp_path):
    s = _session(tmp_path, every=2)
    s.cfg.ckpt.at_end = False
    assert [s.end_step(step, 5) for step in range(1, 6)] == [(False, 5)] * 5
    assert _saved(s) == [2, 4]  # the cadence still saves; step 5, the end, does not
    s2 = _session(tmp_path / "stopped", stop_at=3)
    s2.cfg.ckpt.at_end = False
    assert s2.end_step(3, 10) == (True, 10)
    assert _saved(s2) == [3]  # a stop saves, so the run can resume


def test_time_limit_lowers_steps_and_ends_normally(tmp_path):
    s = _session(tmp_path, time_limit_s=0.05)
    assert s.end_step(1, 10) == (False, 10)  # within the limit: nothing changes
    time.sleep(0.1)
    assert s.end_step(2, 10) == (False, 2)  # spent: train to step 2, not a stop (so the recipe evaluates)
    assert _saved(s) == [2]  # the lowered last step is checkpointed
    assert s.cfg.run.time_limit_s == 0.05 and s.cfg.ckpt.every == 0  # the config is not rewritten


def test_stop_at_stops_with_a_checkpoint(tmp_path):
    s = _session(tmp_path, stop_at=3)
    assert s.end_step(2, 10) == (False, 10)
    assert s.end_step(3, 10) == (True, 10)
    assert _saved(s) == [3]


def test_stop_signal_stops_but_not_on_the_final_step(tmp_path):
    s = _session(tmp_path)
    session_mod._on_stop_signal(signal.SIGUSR1, None)
    try:
        assert s.end_step(2, 5) == (True, 5)
        assert _saved(s) == [2]
        assert s.end_step(5, 5) == (False, 5)  # the run is complete: finishing beats "preempted"
        assert _saved(s) == [2, 5]
    finally:
        session_mod._received.clear()


def _signal_on_rank1(rank, world_size, run_dir):
    rt = init_runtime("gloo", "cpu")
    s = _session(run_dir, rt, every=0)
    if rank == 1:
        session_mod._on_stop_signal(signal.SIGUSR1, None)  # only rank 1 is told, as SLURM may do
    first = s.end_step(1, 5)
    return first, _saved(s)


def test_a_signal_on_one_rank_stops_every_rank_after_one_checkpoint(tmp_path):
    results = run_ranks(_signal_on_rank1, 2, str(tmp_path))
    assert results == [((True, 5), [1]), ((True, 5), [1])]
