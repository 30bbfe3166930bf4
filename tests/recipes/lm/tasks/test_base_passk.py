"""benchmarks/base_passk.py: a base model's greedy pass@1 with the recipes' own prompts, sampler and sandbox."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[4] / "benchmarks" / "base_passk.py"


def test_scores_a_model_and_writes_its_interval_and_problems(tmp_path):
    out = tmp_path / "base.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "tiny:llama-2l", "--task", "synthetic", "--split", "eval",
                           "--n", "6", "--prompt-mode", "text", "--max-new-tokens", "8", "--chunk", "4",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert res["n_problems"] == 6 and len(res["per_problem"]) == 6
    assert 0.0 <= res["pass@1_low"] <= res["pass@1"] <= res["pass@1_high"] <= 1.0
    assert res["task"] == "synthetic/eval" and res["commit"]
    # distlab's progress per generate call: count, rate, ETA
    assert "greedy: problem 4/6" in proc.stderr and "greedy: problem 6/6" in proc.stderr
    assert "problem/s  eta" in proc.stderr
    assert "pass@1" in proc.stdout


def test_a_bad_split_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "tiny:llama-2l", "--task", "synthetic", "--split", "test"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("base_passk: error: synthetic split 'test'")


def test_the_evalplus_harness_scores_the_sanitized_mbpp_set(tmp_path, mbpp_dir):
    out = tmp_path / "base.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "tiny:llama-2l", "--task", "mbpp", "--split", "sanitized",
                           "--mbpp-dir", str(mbpp_dir), "--n", "3", "--prompt-mode", "text", "--harness", "evalplus",
                           "--max-new-tokens", "8", "--chunk", "3", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert res["harness"] == "evalplus" and res["task"] == "mbpp/sanitized" and res["n_problems"] == 3
    assert [r["task_id"] for r in res["per_problem"]] == ["mbpp-sanitized/2", "mbpp-sanitized/3", "mbpp-sanitized/4"]
    assert "evalplus harness" in proc.stdout
