"""Suite report: per-experiment mean ± 95% CI over seeds, tests against the baseline, efficiency, cost, plots.

Which metrics it shows is the recipe's call, not the report's: each run's ``manifest.json`` names its
recipe, and that recipe's ``report_metrics`` (primary first) and ``percent_metrics`` pick the columns,
tests, curves and bars. Runs whose recipe declares nothing (or cannot be loaded here) get every numeric
eval metric, sorted. Milestones and cost per point need a fraction-valued primary metric.

Everything shown is also written to ``report.json`` so notebooks and tests read the exact numbers instead
of parsing Markdown.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from distlab.errors import DistlabError
from distlab.suite import plots
from distlab.suite.document import Block, Heading, Image, Para, Table, atomic_write_text, to_html, to_markdown
from distlab.suite.runs import ALIASES, RunData, SuiteRuns, load_suite_runs
from distlab.suite.stats import (DEFAULT_MILESTONES, Summary, compare, curve_band, flops_per_point, holm_adjust,
                                 milestones, summarize)

ALPHA = 0.05
# logged beside eval metrics by the core or used by the report's own sections: never a headline metric
BOOKKEEPING = frozenset({"step", "time", "time_s", "flops", "gpu_seconds", "device_seconds", "wall_s"})


@dataclass(frozen=True)
class ReportMetrics:
    """The metrics a report shows, primary first, and which of them are fractions shown in percent."""

    names: tuple[str, ...]
    percent: frozenset[str]
    source: str  # said in the report, so a reader knows why these columns

    @property
    def primary(self) -> str | None:
        return self.names[0] if self.names else None

    @property
    def primary_is_fraction(self) -> bool:
        """Milestones (reach 0.5 ...) and cost per percentage point only mean something for fractions."""
        return self.primary is not None and self.primary in self.percent


def report_metrics(runs: SuiteRuns, suite_recipe: str | None = None) -> ReportMetrics:
    """The recipe's declared headline metrics that some finished run logged, else every numeric eval metric.

    The recipe comes from each run's manifest.json; ``suite_recipe`` (the suite.yaml snapshot's) covers
    runs written without one. Several recipes in one folder: their metrics in order of appearance.
    """
    every = [r for seeds in runs.finished.values() for r in seeds.values()]
    logged = set().union(*(_numeric_metrics(r) for r in every)) if every else set()
    names = list(dict.fromkeys(r.recipe for r in every if r.recipe)) or ([suite_recipe] if suite_recipe else [])
    declared: list[str] = []
    percent: set[str] = set()
    loaded = []
    for name in names:
        recipe = _load_recipe(name)
        if recipe is None or not recipe.report_metrics:
            continue
        loaded.append(name)
        declared += [m for m in recipe.report_metrics if m not in declared]
        percent |= set(recipe.report_metrics if recipe.percent_metrics is None else recipe.percent_metrics)
    shown = tuple(m for m in declared if m in logged)
    if shown:
        return ReportMetrics(shown, frozenset(percent & set(shown)), f"declared by recipe {', '.join(loaded)}")
    why = (f"recipe {', '.join(loaded)} declares none of them" if loaded else
           f"recipe {', '.join(names)} declares no report_metrics or is not installed" if names else
           "the runs do not name their recipe")
    return ReportMetrics(tuple(sorted(logged - BOOKKEEPING)), frozenset(), f"every numeric eval metric ({why})")


def _load_recipe(name: str):
    from distlab.recipe import load_recipe

    try:
        return load_recipe(name)
    except (DistlabError, ImportError):
        return None


def _numeric_metrics(run: RunData) -> set[str]:
    """Numeric keys of the run's eval lines and of its summary's ``eval`` section (aliases dropped)."""
    rows = [*run.evals, run.summary.get("eval") if isinstance(run.summary.get("eval"), dict) else {}]
    keys = {k for row in rows for k, v in row.items() if _is_number(v)}
    return keys - {a for a, canonical in ALIASES.items() if canonical in keys}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
    shown = report_metrics(runs, meta.get("recipe"))
    results = {name: experiment_stats(runs.finished[name], thresholds, shown) for name in order}
    if base is not None:
        for name in order:
            results[name]["tests"] = (_tests(runs.finished[name], runs.finished[base], test, shown.names)
                                      if name != base else {})
        _correct_for_multiple_comparisons(results, [n for n in order if n != base], shown.names)
    out.mkdir(parents=True, exist_ok=True)
    figures = _make_figures(runs, order, results, base, out, shown)
    data = {"suite_dir": str(suite_dir), "suite": meta.get("name", suite_dir.name), "baseline": base,
            "test": test, "alpha": ALPHA, "thresholds": list(thresholds),
            "report_metrics": {"names": list(shown.names), "percent": sorted(shown.percent),
                               "primary": shown.primary, "source": shown.source},
            "scale": meta.get("scale"), "placement": meta.get("placement"),
            "experiments": results, "unfinished": [str(p) for p in runs.unfinished],
            # planned by the last `suite run` (suite.yaml) but no folder at all: a run that never started
            "never_started": [p for p in meta.get("planned", []) if not (suite_dir / p).exists()]}
    blocks = _document(data, order, figures, meta.get("description", ""), shown)
    atomic_write_text(out / "report.json", json.dumps(_jsonable(data), indent=2))
    atomic_write_text(out / "report.html", to_html(blocks, f"distlab suite report: {data['suite']}"))
    atomic_write_text(out / "report.md", to_markdown(blocks))
    return out / "report.md"


def experiment_stats(seeds: dict[int, RunData], thresholds: tuple[float, ...], shown: ReportMetrics
                     ) -> dict[str, Any]:
    """All numbers of one experiment across its seeds (summaries are plain dicts, nan where undefined)."""
    runs = [seeds[s] for s in sorted(seeds)]
    metrics = {m: asdict(summarize(r.final(m) for r in runs)) for m in shown.names
               if any(math.isfinite(r.final(m)) for r in runs)}
    fraction = shown.primary if shown.primary_is_fraction else None
    return {"seeds": sorted(seeds), "metrics": metrics,
            "efficiency": _efficiency(runs, thresholds, fraction) if fraction else {},
            "cost": _cost(runs, fraction), "difficulty": _difficulty(runs, shown.names), "tests": {}}


def _tests(exp: dict[int, RunData], base: dict[int, RunData], method: str, names: tuple[str, ...]
           ) -> dict[str, Any]:
    out = {}
    for metric in names:
        a = {s: r.final(metric) for s, r in exp.items() if math.isfinite(r.final(metric))}
        b = {s: r.final(metric) for s, r in base.items() if math.isfinite(r.final(metric))}
        if a and b:
            out[metric] = asdict(compare(a, b, method))
    return out


def _correct_for_multiple_comparisons(results: dict[str, Any], others: list[str], names: tuple[str, ...]) -> None:
    """Holm over the experiments compared with the baseline, per metric; ``significant`` uses the adjusted p."""
    for metric in names:
        have = [n for n in others if metric in results[n]["tests"]]
        adjusted = holm_adjust([results[n]["tests"][metric]["p_value"] for n in have])
        for n, p in zip(have, adjusted):
            entry = results[n]["tests"][metric]
            entry.update(p_holm=p, significant=bool(math.isfinite(p) and p < ALPHA))


def _efficiency(runs: list[RunData], thresholds: tuple[float, ...], metric: str) -> dict[str, Any]:
    """Steps / GPU-seconds until ``metric`` reaches each milestone, averaged over the seeds that reached it."""
    per_seed = [milestones(r.evals, thresholds, metric=metric) for r in runs]
    out = {}
    for thr in thresholds:
        hits = [m[thr] for m in per_seed if m[thr] is not None]
        out[str(thr)] = {"reached": len(hits), "of": len(runs),
                         "step": asdict(summarize(h["step"] for h in hits)),
                         "gpu_seconds": asdict(summarize(h["gpu_seconds"] for h in hits))}
    return out


def _cost(runs: list[RunData], fraction: str | None) -> dict[str, Any]:
    """Training FLOPs and GPU-seconds; FLOPs per percentage point of ``fraction`` (the primary) when it is one."""
    flops = [r.final("flops") for r in runs]
    # CPU runs record device_seconds only (no GPU fields there): the same world_size x wall-time cost
    seconds = [r.final("gpu_seconds") if not math.isnan(r.final("gpu_seconds")) else r.final("device_seconds")
               for r in runs]
    out = {"flops": asdict(summarize(flops)), "gpu_seconds": asdict(summarize(seconds)),
           "on_gpus": all(not math.isnan(r.final("gpu_seconds")) for r in runs),
           "steps": asdict(summarize(r.final("step") if math.isfinite(r.final("step")) else r.final("steps")
                                     for r in runs)),
           "examples_per_s": asdict(summarize(r.examples_per_s for r in runs))}
    if fraction:
        per_point = [flops_per_point(f, r.final(fraction)) for f, r in zip(flops, runs)]
        out.update(flops_per_point=asdict(summarize(per_point)),
                   zero_accuracy_seeds=sum(1 for p in per_point if p == math.inf))
    return out


def _difficulty(runs: list[RunData], names: tuple[str, ...]) -> dict[str, Any]:
    """Per difficulty bucket (``by_difficulty`` rows of the summary, if the recipe writes them): each shown metric."""
    buckets: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        nested = r.summary.get("eval") if isinstance(r.summary.get("eval"), dict) else {}
        for row in r.summary.get("by_difficulty") or nested.get("by_difficulty") or []:
            b = buckets.setdefault(str(row.get("bucket")), {"count": []})
            b["count"].append(float(row.get("count", math.nan)))
            for m in names:
                if m in row:
                    b.setdefault(m, []).append(float(row[m]))
    return {name: {"count": summarize(v.pop("count")).mean, **{m: asdict(summarize(x)) for m, x in v.items()}}
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
                  out: Path, shown: ReportMetrics) -> dict[str, str]:
    """Learning curve and final-value bars of every shown metric, and the difficulty bars; key -> file name."""
    figs: dict[str, str] = {}
    # every metric, not just the primary: early in training, or on hard puzzles, exact accuracy sits at 0 for
    # every experiment while the token-accuracy curves already tell them apart
    for metric in shown.names:
        bands = {}
        for name in order:
            curves = [[(row["step"], row[metric]) for row in r.evals if metric in row]
                      for r in runs.finished[name].values()]
            if any(curves):
                bands[name] = curve_band(curves)
        if bands:
            file = "learning_curves.png" if metric == shown.primary else f"learning_curves_{_slug(metric)}.png"
            figs[f"curves:{metric}"] = plots.learning_curves(bands, out / file, ylabel=f"eval {_label(metric)}").name
    for metric in shown.names:
        have = [n for n in order if metric in results[n]["metrics"]]
        if have:
            s = [results[n]["metrics"][metric] for n in have]
            figs[f"bars:{metric}"] = plots.bar_chart(have, [x["mean"] for x in s], [x["half_width"] for x in s],
                                                     out / f"bars_{_slug(metric)}.png", _label(metric), base).name
    buckets = _bucket_order(results, order)
    for i, metric in enumerate(_difficulty_metrics(results, order, shown)):
        series = {}
        for n in order:
            d = results[n]["difficulty"]
            if d:
                series[n] = ([d[b][metric]["mean"] if metric in d.get(b, {}) else math.nan for b in buckets],
                             [d[b][metric]["half_width"] if metric in d.get(b, {}) else math.nan for b in buckets])
        file = "difficulty.png" if i == 0 else f"difficulty_{_slug(metric)}.png"
        figs[f"difficulty:{metric}"] = plots.grouped_bars(buckets, series, out / file, "difficulty bucket",
                                                          _label(metric)).name
    return figs


def _difficulty_metrics(results: dict[str, Any], order: list[str], shown: ReportMetrics) -> list[str]:
    """The shown metrics the difficulty buckets hold, primary first (exact accuracy, and blank-cell accuracy
    where the recipe writes it, which still separates models while none solves a whole puzzle)."""
    present = {m for n in order for b in results[n]["difficulty"].values() for m in b if m != "count"}
    return [m for m in shown.names if m in present]


def _slug(metric: str) -> str:
    """A file-name-safe form of a metric name (``pass@1`` -> ``pass_1``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", metric)


def _label(metric: str) -> str:
    return metric.replace("_", " ")


def _bucket_order(results: dict[str, Any], order: list[str]) -> list[str]:
    seen: list[str] = []
    for n in order:
        seen += [b for b in results[n]["difficulty"] if b not in seen]
    return seen


def _document(data: dict[str, Any], order: list[str], figs: dict[str, str], description: str,
              shown: ReportMetrics) -> list[Block]:
    res, base = data["experiments"], data["baseline"]
    blocks: list[Block] = [Heading(f"Suite report: {data['suite']}", 1)]
    if description:
        blocks.append(Para(description))
    blocks.append(Para(f"Results folder: {data['suite_dir']}. Values are mean ± half-width of the 95% Student-t "
                       f"confidence interval over seeds (n/a with a single seed). "
                       + (f"Baseline: {base}; test: {data['test']} at alpha={ALPHA}, p-values Holm-corrected "
                          f"over the {len(order) - 1} comparisons with the baseline (per metric); 'significant' "
                          f"uses the corrected p." if base else "No baseline known: significance tests skipped "
                          "(pass baseline= or write suite.yaml).")
                       + _placement_text(data.get("scale"), data.get("placement"))
                       + (f" Metrics: {shown.source}; primary: {shown.primary}." if shown.primary else
                          f" No numeric metrics found ({shown.source}).")))
    blocks += _results_section(res, order, base, shown)
    wide = _wide_intervals(res, order, shown)
    if wide:
        blocks.append(Para(f"Warning: intervals wider than their means in {', '.join(wide)} (too few seeds: with "
                           "2 seeds the 95% Student-t interval is 12.7 standard errors wide on each side); add "
                           "seeds (--seeds 5) before reading a difference."))
    if base:
        blocks += _tests_section(res, order, base, shown)
    if shown.primary_is_fraction:
        blocks += _efficiency_section(res, order, data["thresholds"], shown.primary)
    blocks += _cost_section(res, order, shown)
    blocks += _difficulty_section(res, order, figs, shown)
    for metric in shown.names:
        if f"curves:{metric}" in figs:
            blocks.append(Image(figs[f"curves:{metric}"], f"Eval {_label(metric)} vs training step (mean, 95% CI band)"))
    for metric in shown.names:
        if f"bars:{metric}" in figs:
            blocks.append(Image(figs[f"bars:{metric}"], f"Final {_label(metric)} (95% CI error bars)"))
    if data["unfinished"]:
        blocks += [Heading("Unfinished runs"), Para("Not included (no summary.json, or stopped early): "
                                                    + ", ".join(data["unfinished"]))]
    if data.get("never_started"):
        blocks += [Heading("Planned runs that never started"),
                   Para(f"{len(data['never_started'])} run(s) the last `suite run` planned have no folder (not "
                        "started: stopped before their turn, or their launch failed; see the suite's logs): "
                        + ", ".join(data["never_started"]))]
    return blocks


def _wide_intervals(res: dict[str, Any], order: list[str], shown: ReportMetrics) -> list[str]:
    """The experiments whose primary metric's interval half-width exceeds its mean's size (n >= 2)."""
    out = []
    for name in order:
        m = res[name]["metrics"].get(shown.primary) if shown.primary else None
        if m and m.get("n", 0) >= 2 and m.get("half_width") is not None and m["half_width"] > abs(m["mean"]):
            out.append(name)
    return out


def _placement_text(scale: str | None, placement: dict[str, Any] | None) -> str:
    """Where the runs ran, so a reader can judge the compute each configuration received."""
    text = f" Scale: {scale}." if scale else ""
    if placement:
        text += f" {placement.get('runs_at_once')} runs at once"
        if placement.get("runs_per_gpu"):
            text += f", {placement['runs_per_gpu']} per GPU on {placement.get('gpus')} GPU(s)"
        text += "."
    return text


def _results_section(res: dict[str, Any], order: list[str], base: str | None, shown: ReportMetrics) -> list[Block]:
    metrics = [m for m in shown.names if any(m in res[n]["metrics"] for n in order)]
    primary = shown.primary
    pct = primary in shown.percent
    headers = ["experiment", "seeds", *[metric_header(m, m in shown.percent) for m in metrics]]
    if base and primary:
        headers += [f"Δ {primary} vs baseline" + (" (pp)" if pct else ""), f"p ({primary})", "significant (Holm)"]
    rows = []
    for n in order:
        row = [n + (" (baseline)" if n == base else ""), str(len(res[n]["seeds"]))]
        row += [fmt_metric(res[n]["metrics"].get(m), m in shown.percent) for m in metrics]
        if base and primary:
            t = res[n]["tests"].get(primary)
            delta = _delta(res[n], res[base], primary) * (100 if pct else 1)
            row += ["–", "–", "–"] if n == base else [fmt_num(delta, "+.2f" if pct else "+.4g"), fmt_p(t), _flag(t)]
        rows.append(row)
    return [Heading("Final metrics"), Table(headers, rows)]


def _tests_section(res: dict[str, Any], order: list[str], base: str, shown: ReportMetrics) -> list[Block]:
    metrics = [m for m in shown.names if any(m in res[n]["tests"] for n in order)]
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


def _seconds_label(res: dict[str, Any], order: list[str], short: bool = False) -> str:
    """GPU-seconds only when every run trained on GPUs; otherwise device-seconds (processes x wall time)."""
    gpus = all(res[n]["cost"].get("on_gpus", False) for n in order)
    if short:
        return "GPU-s" if gpus else "device-s"
    return "GPU-seconds" if gpus else "device-seconds"


def _efficiency_section(res: dict[str, Any], order: list[str], thresholds: list[float], metric: str) -> list[Block]:
    unit = _seconds_label(res, order, short=True)
    headers = ["experiment", *[f"steps to {t:g}" for t in thresholds], *[f"{unit} to {t:g}" for t in thresholds]]
    rows = []
    for n in order:
        eff = res[n]["efficiency"]
        steps = [_reach(eff[str(t)], "step") for t in thresholds]
        gpu = [_reach(eff[str(t)], "gpu_seconds") for t in thresholds]
        rows.append([n, *steps, *gpu])
    return [Heading("Training efficiency"),
            Para(f"First evaluation at which {_label(metric)} reaches each milestone, averaged over the seeds that "
                 "reached it (k/n seeds in brackets; '–' when none did)."), Table(headers, rows)]


def _cost_section(res: dict[str, Any], order: list[str], shown: ReportMetrics) -> list[Block]:
    per_point = shown.primary_is_fraction
    rows = []
    for n in order:
        c = res[n]["cost"]
        row = [n, fmt_ci(c["steps"], fmt=".0f"), fmt_ci(c["examples_per_s"], fmt=".0f"), fmt_ci(c["flops"], fmt=".3g"),
               fmt_ci(c["gpu_seconds"], fmt=".4g")]
        if per_point:
            zero = f" ({c['zero_accuracy_seeds']} seeds at 0% excluded)" if c["zero_accuracy_seeds"] else ""
            row.append(fmt_ci(c["flops_per_point"], fmt=".3g") + zero)
        rows.append(row)
    unit = _seconds_label(res, order)
    text = ("Optimizer steps, training examples/s per run (median after the first third of training, so "
            f"compilation is left out), training FLOPs and {unit} at the end of training" + (
                " (processes x wall time: these runs did not all train on GPUs)" if unit != "GPU-seconds" else "") + (
                f"; cost = FLOPs per percentage point of final {_label(shown.primary)}." if per_point else "."))
    headers = ["experiment", "steps", "examples/s per run", "training FLOPs", unit] + (
        [f"FLOPs per {_label(shown.primary)} point"] if per_point else [])
    return [Heading("Computational cost"), Para(text), Table(headers, rows)]


def _difficulty_section(res: dict[str, Any], order: list[str], figs: dict[str, str], shown: ReportMetrics
                        ) -> list[Block]:
    buckets = _bucket_order(res, order)
    have = [n for n in order if res[n]["difficulty"]]
    blocks: list[Block] = []
    for metric in _difficulty_metrics(res, order, shown) if buckets else []:
        pct = metric in shown.percent
        rows = []
        for b in buckets:
            count = next((res[n]["difficulty"][b]["count"] for n in have if b in res[n]["difficulty"]), math.nan)
            rows.append([b, fmt_num(count, ".0f")] + [fmt_metric(res[n]["difficulty"].get(b, {}).get(metric), pct)
                                                      for n in have])
        title = f"{_label(metric).capitalize()} by difficulty"
        blocks += [Heading(title), Table(["bucket", "count", *[metric_header(n, pct) for n in have]], rows),
                   Image(figs[f"difficulty:{metric}"], f"{title} bucket (95% CI error bars)")]
    return blocks


def metric_header(metric: str, percent: bool) -> str:
    return f"{metric} (%)" if percent else metric


def fmt_metric(s: dict[str, float] | Summary | None, percent: bool) -> str:
    """A metric's ``mean ± half``: fractions in percent with 2 decimals, anything else with 4 significant digits."""
    return fmt_ci(s, scale=100) if percent else fmt_ci(s, fmt=".4g")


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
    """The raw p and, once corrected, Holm's: ``0.012 (Holm 0.048)``."""
    if not test or not math.isfinite(test["p_value"]):
        return "n/a"
    holm = test.get("p_holm")
    return f"{test['p_value']:.3g}" + (f" (Holm {holm:.3g})" if holm is not None and math.isfinite(holm) else "")


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
    return a["mean"] - b["mean"] if a and b else math.nan


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
