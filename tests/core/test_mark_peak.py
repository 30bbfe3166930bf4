"""The running GPU peak marked at the end of each step phase, and the shape benchmark carrying it per step."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from distlab.logs import mark_peak

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import lm_shapes  # noqa: E402


def test_mark_peak_reads_the_gpu_running_peak_and_nothing_on_a_cpu(monkeypatch):
    into: dict[str, float] = {}
    mark_peak(SimpleNamespace(device=torch.device("cpu"), devices=None), "generate", into)
    assert into == {}
    seen = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: seen.append(d) or 3 * 2**30)
    mark_peak(SimpleNamespace(device=torch.device("cuda", 1), devices=None), "update", into)
    assert into == {"peak_gib_after/update": 3.0} and seen == [torch.device("cuda", 1)]


def test_lm_shapes_keeps_each_steps_phase_marks(tmp_path):
    rows = [{"split": "train", "step": s, "time": 10.0 * s, "peak_mem_gib_cuda0": 7.0 + s,
             "peak_gib_after/generate": 2.0 + s, "peak_gib_after/update": 7.0 + s} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = lm_shapes.measure(tmp_path)
    assert out["peak_gib_after/generate"] == [3.0, 4.0] and out["peak_gib_after/update"] == [8.0, 9.0]
    assert out["peak_gib"] == {"cuda0": 9.0} and out["step_s"] == 10.0
