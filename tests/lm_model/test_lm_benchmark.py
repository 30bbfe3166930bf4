"""The generation benchmark script runs end to end on CPU at tiny shapes and writes its JSON."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "lm_generate.py"


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
