"""benchmarks/step_rates.py: the one table of seconds per step every device call's arms are compared with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import step_rates  # noqa: E402


def _write(path: Path, times: list[float], steps: list[int], **per_row) -> Path:
    rows = [{"split": "train", "step": s, "time": t, **{k: v[i] for k, v in per_row.items()}}
            for i, (s, t) in enumerate(zip(steps, times))]
    rows.append({"split": "eval", "step": steps[-1], "time": times[-1] + 100.0})  # never a step
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_the_median_gap_leaves_out_start_up_and_the_evaluation(tmp_path, capsys):
    # step 1 ends 30 s after start-up began; then steps of 2, 2, 5, 2 s: median 2 s, not the mean 2.75
    sync = _write(tmp_path / "sync.jsonl", [30, 32, 34, 39, 41], [1, 2, 3, 4, 5],
                  update_s=[9.0, 1.0, 1.0, 1.0, 3.0], peak_mem_gib_cuda0=[4.0, 5.5, 5.0, 5.0, 5.0],
                  skipped_steps=[0, 0, 1, 1, 1])
    # logged every 2 steps: gaps are per step (8 s over 2 steps is 4 s a step)
    fast = _write(tmp_path / "fast.jsonl", [10, 18, 26], [2, 4, 6])
    assert step_rates.main([str(sync), str(fast), "--vs", "sync"]) == 0
    a, b = (json.loads(x) for x in capsys.readouterr().out.splitlines())
    assert (a["run"], a["steps"], a["median_step_s"], a["steps_per_hour"], a["gaps"]) == ("sync", 5, 2.0, 1800.0, 4)
    assert a["update_s"] == 1.0 and a["peak_mem_gib_cuda0"] == 5.5 and a["skipped_steps"] == 1  # phases skip step 1
    assert (b["median_step_s"], b["speed_vs_sync"]) == (4.0, 0.5)


def test_a_run_without_metrics_is_a_row_that_says_so(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert step_rates.main([str(tmp_path / "empty")]) == 1
    assert json.loads(capsys.readouterr().out) == {"run": "empty", "error": "no metrics.jsonl"}
