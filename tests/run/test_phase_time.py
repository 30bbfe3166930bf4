"""``log.sync_phases``: the phase clock waits for the CUDA device at every read when asked, and never on the CPU."""

import torch

from distlab.run import profiling


def test_the_phase_clock_waits_for_the_device_only_when_asked(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    try:
        profiling.sync_phases(None)
        profiling.phase_time()
        assert waited == []
        profiling.sync_phases(torch.device("cpu"))  # nothing to wait for on the CPU
        profiling.phase_time()
        assert waited == []
        profiling.sync_phases(torch.device("cuda", 1))
        t0 = profiling.phase_time()
        t1 = profiling.phase_time()
        assert waited == [torch.device("cuda", 1)] * 2 and t1 >= t0
    finally:
        profiling.sync_phases(None)


def test_a_session_sets_the_clock_from_log_sync_phases(monkeypatch, tmp_path):
    from distlab.config import BaseConfig
    from distlab.runtime.dist import Runtime
    from distlab.training.session import Session

    seen = []
    monkeypatch.setattr("distlab.training.session.sync_phases", seen.append)
    rt = Runtime(device=torch.device("cuda", 0))  # a device to wait for; nothing here touches it
    for flag in (True, False):
        cfg = BaseConfig()
        cfg.log.sync_phases = flag
        Session(cfg, rt, "toy", tmp_path / f"run-{flag}")
    assert [d is not None for d in seen] == [True, False]
