"""The generation benchmark script runs end to end on CPU at tiny shapes and writes its JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[4] / "benchmarks" / "lm_generate.py"


def test_benchmark_cpu_tiny(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("lm_generate_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    rows = bench.main(["--device", "cpu", "--tiny", "--backends", "hf,hf-static,static,static-noshare",
                       "--json", str(out)])
    printed = capsys.readouterr().out
    assert "torch" in printed and "tokens_per_s" in printed
    data = json.loads(out.read_text())
    assert [r["backend"] for r in data["results"]] == ["hf", "hf-static", "static", "static-noshare"] == \
        [r["backend"] for r in rows]
    assert all(r["tokens_per_s"] > 0 and r["generated_tokens"] > 0 for r in rows)
    assert data["meta"]["device"] == "cpu" and data["meta"]["torch"]


def test_benchmark_profile_names_where_the_time_goes(tmp_path):
    spec = importlib.util.spec_from_file_location("lm_generate_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--device", "cpu", "--tiny", "--backends", "static", "--profile", "5"])
    top = rows[0]["profile_top"]
    assert len(top) == 5 and rows[0]["profile_wall_s"] > 0
    assert all(r["self_ms"] >= 0 and r["calls"] >= 1 and r["op"] for r in top)
    assert [r["self_ms"] for r in top] == sorted((r["self_ms"] for r in top), reverse=True)
    assert "device_busy_frac" not in rows[0]  # measured on CUDA only


def test_benchmark_refuses_a_negative_profile(capsys):
    import pytest

    spec = importlib.util.spec_from_file_location("lm_generate_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as stop:
        bench.parse_args(["--tiny", "--device", "cpu", "--profile", "-2"])
    assert stop.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if "error" in x]
    assert len(err) == 1 and "--profile takes a number of ops, 0 or more" in err[0]


def test_benchmark_attention_per_backend(capsys):
    """ours decodes with grouped_sdpa, transformers' backends with their own sdpa, unless NAME@ATTN says
    otherwise; a name transformers lacks is refused before any model loads."""
    import pytest

    spec = importlib.util.spec_from_file_location("lm_generate_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--device", "cpu", "--tiny", "--backends", "static,static@sdpa,hf-static"])
    assert [(r["backend"], r["attention"]) for r in rows] == [
        ("static", "grouped_sdpa"), ("static@sdpa", "sdpa"), ("hf-static", "sdpa")]
    assert rows[0]["generated_tokens"] == rows[1]["generated_tokens"] > 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        bench.parse_args(["--tiny", "--device", "cpu", "--backends", "static,static@spda"])
    assert stop.value.code == 2
    err = [x for x in capsys.readouterr().err.splitlines() if "error" in x]
    assert len(err) == 1 and "'static@spda' names no attention" in err[0]
