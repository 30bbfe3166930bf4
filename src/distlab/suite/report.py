"""Suite report: per-experiment mean ± 95% CI over seeds, tests against the baseline, efficiency, cost, plots.

Everything shown is also written to ``report.json`` so notebooks and tests read the exact numbers instead
of parsing Markdown.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from distlab.errors import DistlabError
from distlab.suite import plots
from distlab.suite.document import Block, Heading, Image, Para, Table, atomic_write_text, to_html, to_markdown
from distlab.suite.runs import RunData, SuiteRuns, load_suite_runs
from distlab.suite.stats import (DEFAULT_MILESTONES, Summary, compare, curve_band, flops_per_point, milestones,
                                 summarize)

ACCURACY_METRICS = ("exact_accuracy", "token_accuracy", "pass@1", "pass@2", "pass@10", "pass@100")
ALPHA = 0.05


def build_report(suite_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                 baseline: str | None = None, test: str = "welch",
                 thresholds: tuple[float, ...] = DEFAULT_MILESTONES) -> Path:
    """Write report.md, report.html, report.json and PNGs into ``out_dir`` (default ``<suite_dir>/report``).

    ``baseline`` defaults to the one recorded in ``<suite_dir>/suite.yaml`` (written by ``suite run``).
    ``test`` is ``welch``, ``paired`` or ``exact``; the paired ones need both experiments to share seeds and
    otherwise fall back to Welch (the report says which test ran). Returns the path of report.md.
    """
    suite_dir = Path(suite_dir)
    out = Path(out_dir) if out_dir is not None else suite_dir / "report"
    runs = load_suite_runs(suite_dir)
    if not runs.finished:
        raise DistlabError(f"no finished runs under {suite_dir} (a run is finished once it wrote summary.json "
                           f"without stopping early; {len(runs.unfinished)} unfinished run folders); "
                           f"run the suite first")
    meta = _suite_meta(suite_dir)
    order = _experiment_order(runs, meta)
    base = baseline if baseline is not None else meta.get("baseline")
    if base is not None and base not in runs.finished:
        known = ", ".join(order)
        raise DistlabError(f"baseline {base!r} has no finished runs under {suite_dir}; finished experiments: {known}")
    results = {name: experiment_stats(runs.finished[name], thresholds) for name in order}
    if base is not None:
        for name in order:
            results[name]["tests"] = _tests(runs.finished[name], runs.finished[base], test) if name != base else {}
    out.mkdir(parents=True, exist_ok=True)
    figures = _make_figures(runs, order, results, base, out)
    data = {"suite_dir": str(suite_dir), "suite": meta.get("name", suite_dir.name), "baseline": base,
            "test": test, "alpha": ALPHA, "thresholds": list(thresholds), "experiments": results,
            "unfinished": [str(p) for p in runs.unfinished]}
    blocks = _document(data, order, figures, meta.get("description", ""))
    atomic_write_text(out / "report.json", json.dumps(_jsonable(data), indent=2))
    atomic_write_text(out / "report.html", to_html(blocks, f"distlab suite report: {data['suite']}"))
    atomic_write_text(out / "report.md", to_markdown(blocks))
    return out / "report.md"


def experiment_stats(seeds: dict[int, RunData], thresholds: tuple[float, ...]) -> dict[str, Any]:
    """All numbers of one experiment across its seeds (summaries are plain dicts, nan where undefined)."""
    runs = [seeds[s] for s in sorted(seeds)]
    metrics = {m: asdict(summarize(r.final(m) for r in runs)) for m in ACCURACY_METRICS
               if any(math.isfinite(r.final(m)) for r in runs)}
    return {"seeds": sorted(seeds), "metrics": metrics, "efficiency": _efficiency(runs, thresholds),
            "cost": _cost(runs), "difficulty": _difficulty(runs), "tests": {}}


def _tests(exp: dict[int, RunData], base: dict[int, RunData], method: str) -> dict[str, Any]:
    out = {}
    for metric in ACCURACY_METRICS:
        a = {s: r.final(metric) for s, r in exp.items() if math.isfinite(r.final(metric))}
        b = {s: r.final(metric) for s, r in base.items() if math.isfinite(r.final(metric))}
        if a and b:
            res = compare(a, b, method)
            out[metric] = {**asdict(res), "significant": res.significant(ALPHA)}
    return out


def _efficiency(runs: list[RunData], thresholds: tuple[float, ...]) -> dict[str, Any]:
    """Steps / GPU-seconds to each milestone, averaged over the seeds that reached it."""
    per_seed = [milestones(r.evals, thresholds) for r in runs]
    out = {}
    for thr in thresholds:
        hits = [m[thr] for m in per_seed if m[thr] is not None]
        out[str(thr)] = {"reached": len(hits), "of": len(runs),
                         "step": asdict(summarize(h["step"] for h in hits)),
                         "gpu_seconds": asdict(summarize(h["gpu_seconds"] for h in hits))}
    return out


def _cost(runs: list[RunData]) -> dict[str, Any]:
    flops = [r.final("flops") for r in runs]
    per_point = [flops_per_point(f, r.final("exact_accuracy")) for f, r in zip(flops, runs)]
    return {"flops": asdict(summarize(flops)), "gpu_seconds": asdict(summarize(r.final("gpu_seconds") for r in runs)),
            "flops_per_point": asdict(summarize(per_point)),
            "zero_accuracy_seeds": sum(1 for p in per_point if p == math.inf)}


def _difficulty(runs: list[RunData]) -> dict[str, Any]:
    buckets: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        nested = r.summary.get("eval") if isinstance(r.summary.get("eval"), dict) else {}
        for row in r.summary.get("by_difficulty") or nested.get("by_difficulty") or []:
            b = buckets.setdefault(str(row.get("bucket")), {"acc": [], "count": []})
            b["acc"].append(float(row.get("exact_accuracy", math.nan)))
            b["count"].append(float(row.get("count", math.nan)))
    return {name: {"count": summarize(v["count"]).mean, "exact_accuracy": asdict(summarize(v["acc"]))}
            for name, v in buckets.items()}


def _suite_meta(suite_dir: Path) -> dict[str, Any]:
    path = suite_dir / "suite.yaml"
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise DistlabError(f"{path} is not valid YAML; delete it or pass baseline= explicitly") from None
    return data if isinstance(data, dict) else {}


def _experiment_order(runs: SuiteRuns, meta: dict[str, Any]) -> list[str]:
    """The suite's own order (baseline first), then anything else found on disk alphabetically."""
    declared = [e for e in (meta.get("experiments") or {}) if e in runs.finished]
    base = meta.get("baseline")
    if base in declared:
        declared.remove(base)
        declared.insert(0, base)
    return declared + sorted(e for e in runs.finished if e not in declared)


def _make_figures(runs: SuiteRuns, order: list[str], results: dict[str, Any], base: str | None,
                  out: Path) -> dict[str, str]:
    figs: dict[str, str] = {}
    # token accuracy too: early in training, or on hard puzzles, exact accuracy sits at 0 for every
    # experiment while the token curves already tell them apart
    for key, metric, file in (("curves", "exact_accuracy", "learning_curves.png"),
                              ("curves_token", "token_accuracy", "learning_curves_token.png")):
        bands = {}
        for name in order:
            curves = [[(row["step"], row[metric]) for row in r.evals if metric in row]
                      for r in runs.finished[name].values()]
            if any(curves):
                bands[name] = curve_band(curves)
        if bands:
            figs[key] = plots.learning_curves(bands, out / file, ylabel=f"eval {metric.replace('_', ' ')}").name
    for metric in ("exact_accuracy", "token_accuracy"):
        have = [n for n in order if metric in results[n]["metrics"]]
        if have:
            s = [results[n]["metrics"][metric] for n in have]
            figs[metric] = plots.bar_chart(have, [x["mean"] for x in s], [x["half_width"] for x in s],
                                           out / f"bars_{metric}.png", metric.replace("_", " "), base).name
    buckets = _bucket_order(results, order)
    if buckets:
        series = {}
        for n in order:
            d = results[n]["difficulty"]
            if d:
                series[n] = ([d[b]["exact_accuracy"]["mean"] if b in d else math.nan for b in buckets],
                             [d[b]["exact_accuracy"]["half_width"] if b in d else math.nan for b in buckets])
        figs["difficulty"] = plots.grouped_bars(buckets, series, out / "difficulty.png", "difficulty bucket",
                                                "exact accuracy").name
    return figs


def _bucket_order(results: dict[str, Any], order: list[str]) -> list[str]:
    seen: list[str] = []
    for n in order:
        seen += [b for b in results[n]["difficulty"] if b not in seen]
    return seen


def _document(data: dict[str, Any], order: list[str], figs: dict[str, str], description: str) -> list[Block]:
    res, base = data["experiments"], data["baseline"]
    blocks: list[Block] = [Heading(f"Suite report: {data['suite']}", 1)]
    if description:
        blocks.append(Para(description))
    blocks.append(Para(f"Results folder: {data['suite_dir']}. Values are mean ± half-width of the 95% Student-t "
                       f"confidence interval over seeds (n/a with a single seed). "
                       + (f"Baseline: {base}; test: {data['test']} at alpha={ALPHA}, no correction for "
                          f"multiple comparisons." if base else "No baseline known: significance tests skipped "
                          "(pass baseline= or write suite.yaml).")))
    blocks += _accuracy_section(res, order, base)
    if base:
        blocks += _tests_section(res, order, base)
    blocks += _efficiency_section(res, order, data["thresholds"])
    blocks += _cost_section(res, order)
    blocks += _difficulty_section(res, order, figs)
    for key, alt in (("curves", "Eval exact accuracy vs training step (mean, 95% CI band)"),
                     ("curves_token", "Eval token accuracy vs training step (mean, 95% CI band)"),
                     ("exact_accuracy", "Final exact accuracy (95% CI error bars)"),
                     ("token_accuracy", "Final token accuracy (95% CI error bars)")):
        if key in figs:
            blocks.append(Image(figs[key], alt))
    if data["unfinished"]:
        blocks += [Heading("Unfinished runs"), Para("Not included (no summary.json, or stopped early): "
                                                    + ", ".join(data["unfinished"]))]
    return blocks


def _accuracy_section(res: dict[str, Any], order: list[str], base: str | None) -> list[Block]:
    metrics = [m for m in ACCURACY_METRICS if any(m in res[n]["metrics"] for n in order)]
    headers = ["experiment", "seeds", *[f"{m} (%)" for m in metrics]]
    if base:
        headers += ["Δ exact vs baseline (pp)", "p (exact)", "significant"]
    rows = []
    for n in order:
        row = [n + (" (baseline)" if n == base else ""), str(len(res[n]["seeds"]))]
        row += [fmt_ci(res[n]["metrics"].get(m), scale=100) for m in metrics]
        if base:
            t = res[n]["tests"].get("exact_accuracy")
            delta = _delta(res[n], res[base], "exact_accuracy")
            row += ["–", "–", "–"] if n == base else [fmt_num(delta, "+.2f"), fmt_p(t), _flag(t)]
        rows.append(row)
    return [Heading("Accuracy"), Table(headers, rows)]


def _tests_section(res: dict[str, Any], order: list[str], base: str) -> list[Block]:
    metrics = [m for m in ACCURACY_METRICS if any(m in res[n]["tests"] for n in order)]
    rows = []
    for n in order:
        if n == base:
            continue
        tests = res[n]["tests"]
        method = next((t["method"] for t in tests.values()), "–")
        rows.append([n, method] + [_p_and_flag(tests.get(m)) for m in metrics])
    if not rows:
        return []
    return [Heading(f"Tests against {base}"), Table(["experiment", "test", *[f"p ({m})" for m in metrics]], rows)]


def _efficiency_section(res: dict[str, Any], order: list[str], thresholds: list[float]) -> list[Block]:
    headers = ["experiment", *[f"steps to {t:g}" for t in thresholds], *[f"GPU-s to {t:g}" for t in thresholds]]
    rows = []
    for n in order:
        eff = res[n]["efficiency"]
        steps = [_reach(eff[str(t)], "step") for t in thresholds]
        gpu = [_reach(eff[str(t)], "gpu_seconds") for t in thresholds]
        rows.append([n, *steps, *gpu])
    return [Heading("Training efficiency"),
            Para("First evaluation at which exact accuracy reaches each milestone, averaged over the seeds that "
                 "reached it (k/n seeds in brackets; '–' when none did)."), Table(headers, rows)]


def _cost_section(res: dict[str, Any], order: list[str]) -> list[Block]:
    rows = []
    for n in order:
        c = res[n]["cost"]
        zero = f" ({c['zero_accuracy_seeds']} seeds at 0% excluded)" if c["zero_accuracy_seeds"] else ""
        rows.append([n, fmt_ci(c["flops"], fmt=".3g"), fmt_ci(c["gpu_seconds"], fmt=".4g"),
                     fmt_ci(c["flops_per_point"], fmt=".3g") + zero])
    return [Heading("Computational cost"),
            Para("Training FLOPs and GPU-seconds at the end of training; cost = FLOPs per percentage point of "
                 "final exact accuracy."),
            Table(["experiment", "training FLOPs", "GPU-seconds", "FLOPs per accuracy point"], rows)]


def _difficulty_section(res: dict[str, Any], order: list[str], figs: dict[str, str]) -> list[Block]:
    buckets = _bucket_order(res, order)
    if not buckets:
        return []
    have = [n for n in order if res[n]["difficulty"]]
    rows = []
    for b in buckets:
        count = next((res[n]["difficulty"][b]["count"] for n in have if b in res[n]["difficulty"]), math.nan)
        rows.append([b, fmt_num(count, ".0f")] + [fmt_ci(res[n]["difficulty"].get(b, {}).get("exact_accuracy"),
                                                          scale=100) for n in have])
    return [Heading("Accuracy by difficulty"), Table(["bucket", "puzzles", *[f"{n} (%)" for n in have]], rows),
            Image(figs["difficulty"], "Exact accuracy by difficulty bucket (95% CI error bars)")]


def fmt_ci(s: dict[str, float] | Summary | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    """``mean ± half`` (scaled), ``mean ± n/a`` for one seed, ``–`` when there is no value."""
    if s is None:
        return "–"
    d = asdict(s) if isinstance(s, Summary) else s
    if d["n"] == 0 or not math.isfinite(d["mean"]):
        return "–"
    mean = format(d["mean"] * scale, fmt)
    half = d["half_width"]
    return f"{mean} ± {format(half * scale, fmt)}" if math.isfinite(half) else f"{mean} ± n/a"


def fmt_p(test: dict[str, Any] | None) -> str:
    if not test or not math.isfinite(test["p_value"]):
        return "n/a"
    return f"{test['p_value']:.3g}"


def fmt_num(value: float, fmt: str) -> str:
    return format(value, fmt) if math.isfinite(value) else "–"


def _p_and_flag(test: dict[str, Any] | None) -> str:
    p = fmt_p(test)
    return p if p == "n/a" else f"{p} ({'significant' if test['significant'] else 'not significant'})"


def _flag(test: dict[str, Any] | None) -> str:
    if not test or not math.isfinite(test["p_value"]):
        return "n/a"
    return "yes" if test["significant"] else "no"


def _delta(exp: dict[str, Any], base: dict[str, Any], metric: str) -> float:
    a, b = exp["metrics"].get(metric), base["metrics"].get(metric)
    return 100 * (a["mean"] - b["mean"]) if a and b else math.nan


def _reach(entry: dict[str, Any], key: str) -> str:
    if entry["reached"] == 0:
        return "–"
    return f"{fmt_ci(entry[key], fmt='.4g')} ({entry['reached']}/{entry['of']})"


def _jsonable(obj: Any) -> Any:
    """JSON has no nan/inf: write them as null / "inf" so any JSON reader can load the file."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
    return obj
