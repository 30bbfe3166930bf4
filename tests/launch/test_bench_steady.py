"""The steady-state rate that bench scaling and suite reports both read from a run's train lines."""

import json

import pytest

from distlab.errors import DistlabError
from distlab.launch.bench import steady_median, steady_throughput


def test_warm_up_share_is_dropped_before_the_median():
    assert steady_median([1.0, 2.0, 100.0, 110.0, 120.0], 0.3) == 105.0  # int(5 * 0.3) = 1 dropped
    assert steady_median([10.0, 20.0, 100.0, 110.0, 120.0, 130.0], 1 / 3) == 115.0
    assert steady_median([7.0], 0.9) == 7.0  # a single line is kept


def test_steady_throughput_reads_train_rows_and_rl_env_steps(tmp_path):
    f = tmp_path / "metrics.jsonl"
    rows = [{"split": "train", "examples_per_s": r, "mfu": r / 1000} for r in (5.0, 90.0, 100.0, 110.0)]
    f.write_text("\n".join(json.dumps(r) for r in [*rows, {"split": "eval", "examples_per_s": 1.0}]))
    out = steady_throughput(f)
    assert out == {"throughput": 100.0, "mfu": pytest.approx(0.1)}  # int(4 * 0.3) = 1 warm-up row dropped
    f.write_text(json.dumps({"split": "train", "env_steps_per_s": 3.0}))
    assert steady_throughput(f)["throughput"] == 3.0
    f.write_text(json.dumps({"split": "eval", "exact_accuracy": 1.0}))
    with pytest.raises(DistlabError, match="no throughput rows"):
        steady_throughput(f)
