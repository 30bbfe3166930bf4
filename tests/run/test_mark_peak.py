"""The running GPU peak marked at the end of each step phase, and the shape benchmark carrying it per step."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from distlab.run.logs import mark_peak

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


def test_the_update_marks_its_peak_before_the_first_optimizer_step(monkeypatch):
    """The mark that told the GRPO 1.5B backward (42.0 GiB) from fp32 AdamW's step (31.7 GiB with checkpointing)."""
    import contextlib

    from distlab.recipes.lm.pg.update import policy_update

    peak = [1 * 2**30]
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: peak[0])
    session = SimpleNamespace(rt=SimpleNamespace(device=torch.device("cuda", 0), devices=None),
                              autocast=contextlib.nullcontext)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    real_step = opt.step
    monkeypatch.setattr(opt, "step", lambda *a, **k: (peak.__setitem__(0, peak[0] + 4 * 2**30), real_step())[1])

    def micro_loss(m: int):
        peak[0] += 2**30  # the forward and backward raise the peak
        return model(torch.ones(1, 2)).sum(), {}

    marks: dict[str, float] = {}
    policy_update(session, model, opt, 2, micro_loss, iterations=2, max_grad_norm=1e9, marks=marks)
    assert marks == {"peak_gib_after/backward": 3.0}  # 1 + two micro-batches, before the step's +4; first iteration
    assert peak[0] == 13 * 2**30  # both iterations ran both micro-batches and stepped
