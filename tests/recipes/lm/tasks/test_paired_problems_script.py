"""benchmarks/paired_problems.py: paired changes per arm, per family and per named group, and one arm against
another on the same problems; bad arguments refused in one line."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[4] / "benchmarks" / "paired_problems.py"


def _rows(families: dict[str, list[tuple[int, int]]]) -> dict:
    before, after = [], []
    for fam, pairs in families.items():
        for i, (b, a) in enumerate(pairs):
            tid = f"synthetic/{fam}/10007/{i}"
            before.append({"task_id": tid, "greedy": float(b)})
            after.append({"task_id": tid, "greedy": float(a)})
    return {"before": before, "after": after}


def _write(path: Path, families) -> Path:
    path.write_text(json.dumps(_rows(families)))
    return path


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_changes_by_family_group_and_arm(tmp_path):
    # grpo: weak family fixed 10 of 10, strong family 2 of 10 broken; control: nothing moves
    grpo = _write(tmp_path / "g.json", {"weak": [(0, 1)] * 10, "strong": [(1, 0)] * 2 + [(1, 1)] * 8})
    control = _write(tmp_path / "c.json", {"weak": [(0, 0)] * 10, "strong": [(1, 1)] * 10})
    out = tmp_path / "rows.json"
    proc = _run(f"grpo={grpo}", f"control={control}", "--group", "w=weak", "--json", out)
    assert proc.returncode == 0, proc.stderr
    rows = {(r["comparison"], r["subset"]): r for r in json.loads(out.read_text())}
    g_all = rows[("grpo: base -> trained", "all")]
    assert (g_all["n_problems"], g_all["candidate_only"], g_all["baseline_only"]) == (20, 10, 2)
    assert abs(g_all["diff"] - 0.4) < 1e-9
    g_weak = rows[("grpo: base -> trained", "group w")]
    assert g_weak["diff"] == 1.0 and g_weak["significant"] and g_weak["low"] > 0
    assert rows[("grpo: base -> trained", "strong")]["diff"] == -0.2
    vs = rows[("grpo vs control, trained", "weak")]  # grpo's trained policy against control's, same problems
    assert (vs["mean_baseline"], vs["mean_candidate"], vs["candidate_only"]) == (0.0, 1.0, 10)
    assert rows[("control: base -> trained", "all")]["diff"] == 0.0
    assert "| grpo: base -> trained | group w | 10 | 0.0% | 100.0% | +100.0 [" in proc.stdout


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    good = _write(tmp_path / "g.json", {"a": [(0, 1)], "b": [(1, 1)]})
    other = _write(tmp_path / "o.json", {"a": [(0, 1)] * 2})
    (tmp_path / "bad.json").write_text("{not json")
    for args, words in [(["g.json"], "NAME=FILE"), ([f"x={tmp_path / 'bad.json'}"], "not a distlab eval"),
                        ([f"x={good}", "--group", "w=zzz"], "no problem of family zzz"),
                        ([f"x={good}", "--group", "w="], "NAME=FAMILY"),
                        ([f"x={good}", f"y={other}"], "different problems")]:
        proc = _run(*args)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], (args, proc.stderr)


def test_a_runs_first_and_last_evaluation_files_make_an_arm(tmp_path):
    # a training run writes one list per evaluation: eval_start_step000000_problems.json, eval_step000040_problems.json
    fams = {"weak": [(0, 1)] * 3 + [(1, 1)]}
    rows = _rows(fams)
    start, end = tmp_path / "start.json", tmp_path / "end.json"
    start.write_text(json.dumps(rows["before"]))
    end.write_text(json.dumps(rows["after"]))
    both = _write(tmp_path / "both.json", fams)
    out_pair, out_both = tmp_path / "pair.json", tmp_path / "both_rows.json"
    assert _run(f"run={start},{end}", "--json", out_pair).returncode == 0
    assert _run(f"run={both}", "--json", out_both).returncode == 0
    assert json.loads(out_pair.read_text()) == json.loads(out_both.read_text())
    assert json.loads(out_pair.read_text())[0]["candidate_only"] == 3
    (tmp_path / "dict.json").write_text(json.dumps(rows))
    proc = _run(f"run={start},{tmp_path / 'dict.json'}")
    assert proc.returncode == 2 and "not a run's per-problem evaluation file" in proc.stderr
