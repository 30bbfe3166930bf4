"""Print the one table of ``benchmarks/ten_minutes.sh``: every dataset a run was scored on, plain (K=1) and with the
run's test-time sampling, with 95% Wilson intervals and the evaluation time beside the accuracy.

    python3 benchmarks/ten_minutes_table.py RUN_DIR [EVAL_JSON ...] [--markdown OUT.md]

RUN_DIR's ``summary.json`` gives the training steps and its in-run evaluation (the run's own test split; its
``data.eval_limit`` may have cut it, which the puzzle count shows); each ``eval.json`` of ``distlab eval`` gives the
dataset it scored and, under ``also``, the others it scored in the same process.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from statsmodels.stats.proportion import proportion_confint


def _pct(rate: float | None, n: int) -> str:
    if rate is None:
        return "-"
    lo, hi = proportion_confint(round(rate * n), n, alpha=0.05, method="wilson")
    return f"{100 * rate:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def _row(source: str, m: dict) -> list[str]:
    """One table row from an evaluation's metrics (in-run or ``distlab eval``)."""
    n, k = int(m.get("count", 0)), m.get("samples", 1)
    name = m.get("holdout") or Path(str(m.get("dataset", "?"))).name
    blank = f"{100 * m['blank_accuracy']:.1f}%" + (f" / {100 * m['sampled_blank_accuracy']:.1f}%"
                                                    if "sampled_blank_accuracy" in m else "")
    seconds = m.get("sampled_eval_time_s", m.get("eval_time_s"))
    timing = (f"{seconds:.1f}" if seconds is not None else "-") + (f" / {m['eval_wall_s']:.1f}"
                                                                   if "eval_wall_s" in m else "")
    return [name, source, str(n), _pct(m.get("exact_accuracy"), n),
            _pct(m.get("sampled_exact_accuracy"), n) + (f" (K={k}, {m.get('sample_select')})" if k > 1 else ""),
            _pct(m.get("sampled_oracle_exact_accuracy"), n) if k > 1 else "-", blank, timing]


def rows(run_dir: Path, evals: list[Path]) -> tuple[list[list[str]], dict]:
    """The table's rows and the run's summary (empty when training left none)."""
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    out = []
    if "eval" in summary:
        out.append(_row("in-run", {"dataset": summary.get("data", "?"), **summary["eval"]}))
    for path in evals:
        if not path.exists():
            out.append([path.parent.name, "distlab eval", "-", "missing: see the log", "", "", "", ""])
            continue
        doc = json.loads(path.read_text())
        out.append(_row("distlab eval", doc))
        out.extend(_row("distlab eval", m) for m in doc.get("also", {}).values())
    return out, summary


HEADER = ["dataset", "scored by", "puzzles", "exact K=1", "exact, selected", "oracle (any right)",
          "blank cells K=1 / selected", "eval s (loop / wall)"]


def render(table: list[list[str]], summary: dict) -> str:
    lines = [f"run: {summary.get('status', 'no summary')}, {summary.get('step', '?')} steps on "
             f"{summary.get('world_size', '?')} device(s)", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("evals", type=Path, nargs="*")
    p.add_argument("--markdown", type=Path, help="also write the table to this file")
    a = p.parse_args(argv)
    text = render(*rows(a.run_dir, a.evals))
    print(text)
    if a.markdown:
        a.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
