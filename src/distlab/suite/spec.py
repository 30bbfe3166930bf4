"""Experiment suites as data: load a YAML file, expand grids, resolve every experiment x seed to a run.

A suite is kept as YAML rather than Python so that a new ablation is a file a user can copy and edit, and
so the exact overrides of every run can be printed, diffed and re-run by hand.

Override precedence for one run (later wins):
``base < scale S (only with --scale S) < experiment < experiment's scale S (only with --scale S)``.
A scale is a named block that resizes the shared settings (steps, batch, width, time budget) for one kind of
machine: ``smoke`` (``--smoke``) for a 2-core CPU, others under ``scales:`` (e.g. one 10-minute GPU command).
The keys an experiment varies stay as the experiment says, so a rescaled run still compares the same things;
an experiment whose varied keys depend on the scale (a parameter-matched width) gives them per scale.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from distlab.errors import DistlabError, near_matches

SUITES_DIR = Path(__file__).resolve().parent / "suites"
TOP_KEYS = ("description", "recipe", "extends", "include", "base", "baseline", "smoke", "scales",
            "experiments", "grid", "grid_name")
SMOKE = "smoke"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class RunSpec:
    """One training run: what to pass to ``distlab train <recipe>`` and where it writes."""

    experiment: str
    seed: int
    overrides: list[str]
    out_dir: Path

    def argv(self, recipe: str) -> list[str]:
        """Arguments after the ``distlab`` program name, ready for subprocess or a shell script."""
        return ["train", recipe, *self.overrides]


@dataclass(frozen=True)
class Experiment:
    """One configuration of the suite; ``overrides`` and each of ``scaled`` are fully resolved (base included)."""

    name: str
    overrides: dict[str, Any]
    scaled: dict[str, dict[str, Any]] = field(default_factory=dict)  # scale name -> overrides at that scale


@dataclass
class Suite:
    """A named set of experiments sharing a recipe, compared against one baseline experiment."""

    name: str
    description: str
    recipe: str
    baseline: str
    experiments: dict[str, Experiment] = field(default_factory=dict)

    @property
    def scales(self) -> list[str]:
        return sorted({s for e in self.experiments.values() for s in e.scaled})

    def resolved(self, experiment: str, scale: str | None = None) -> dict[str, Any]:
        """The effective override mapping for one experiment, at the published size or at ``scale``."""
        if experiment not in self.experiments:
            hint = near_matches(experiment, self.experiments)
            raise DistlabError(f"suite {self.name!r} has no experiment {experiment!r}"
                               f"{_did_you_mean(hint)}; known: {', '.join(self.experiments)}")
        exp = self.experiments[experiment]
        if scale is None:
            return dict(exp.overrides)
        if scale not in exp.scaled:
            hint = _did_you_mean(near_matches(scale, self.scales))
            raise DistlabError(f"suite {self.name!r} has no scale {scale!r}{hint}; its scales: "
                               f"{', '.join(self.scales) or 'none'} (or leave --scale out for the published size)")
        return dict(exp.scaled[scale])

    def runs(self, seeds: int | Iterable[int] = 3, scale: str | None = None,
             root: str | os.PathLike = "experiment_results") -> list[RunSpec]:
        """Every experiment x seed, with ``run.seed``, ``run.dir`` and ``run.name`` appended to its overrides."""
        seed_list = normalize_seeds(seeds)
        specs = []
        for exp in self.experiments:
            base = [f"{k}={format_value(v)}" for k, v in self.resolved(exp, scale).items()]
            for seed in seed_list:
                parent = Path(root) / self.name / exp
                # the trainer writes to <run.dir>/<run.name>; a fixed name also makes a rerun resume
                extra = [f"run.seed={seed}", f"run.dir={parent}", f"run.name=seed{seed}"]
                out_dir = parent / f"seed{seed}"
                specs.append(RunSpec(exp, seed, base + extra, out_dir))
        return specs

    def only(self, names: Iterable[str]) -> Suite:
        """A copy with just the named experiments (``--only``), in the suite's order; an unknown name is refused
        with the known ones, never skipped. The baseline stays the suite's: the report compares with it where its
        results exist."""
        names = list(names)
        for name in names:
            self.resolved(name)  # the one-line refusal with did-you-mean
        keep = {n: e for n, e in self.experiments.items() if n in names}
        return Suite(self.name, self.description, self.recipe, self.baseline, keep)

    def layered(self, defaults: Mapping[str, Any] | None = None,
                forced: Mapping[str, Any] | None = None) -> Suite:
        """A copy whose every experiment (at every scale) sits on ``defaults`` and under ``forced``.

        ``suite run``/``suite slurm`` use it for launcher defaults the YAML may override (``scale.*``) and
        for ``key=value`` words from the command line, which win over the YAML, so that what ran is
        exactly what the snapshot and the printed commands say.
        """
        low, high = dict(defaults or {}), dict(forced or {})
        reserved = sorted(k for k in high if k in ("run.seed", "run.dir", "run.name"))
        if reserved:
            raise DistlabError(f"{', '.join(reserved)} is set per run by the suite; use --seeds / --root "
                               f"instead of overriding it")
        exps = {n: Experiment(n, {**low, **e.overrides, **high},
                              {s: {**low, **o, **high} for s, o in e.scaled.items()})
                for n, e in self.experiments.items()}
        return Suite(self.name, self.description, self.recipe, self.baseline, exps)

    def snapshot(self, scale: str | None = None, placement: Mapping[str, Any] | None = None,
                 planned: Sequence[str] = ()) -> dict[str, Any]:
        """Plain-data form: what the report reads back (baseline, experiment order, the runs planned, as
        ``EXP/seedK`` folders) and states (the scale the runs used, how many shared a device)."""
        out = {"name": self.name, "description": self.description, "recipe": self.recipe,
               "baseline": self.baseline, "scale": scale,
               "experiments": {n: self.resolved(n, scale) for n in self.experiments}}
        if placement:
            out["placement"] = dict(placement)
        if planned:
            out["planned"] = list(planned)
        return out

    def write_snapshot(self, suite_dir: str | os.PathLike, scale: str | None = None,
                       placement: Mapping[str, Any] | None = None, planned: Sequence[str] = ()) -> Path:
        """Write ``suite.yaml`` into the results folder so reports find the baseline without the source file."""
        from distlab.suite.document import atomic_write_text

        path = Path(suite_dir) / "suite.yaml"
        atomic_write_text(path, yaml.safe_dump(self.snapshot(scale, placement, planned), sort_keys=False))
        return path


def normalize_seeds(seeds: int | Iterable[int]) -> list[int]:
    """An int K means seeds 0..K-1; a list is used as given (must be distinct non-negative ints)."""
    if isinstance(seeds, bool):
        raise DistlabError("seeds must be a count or a list of integers, not a boolean")
    if isinstance(seeds, int):
        if seeds < 1:
            raise DistlabError(f"seeds={seeds}: need at least one seed, e.g. seeds=3")
        return list(range(seeds))
    out = [int(s) for s in seeds]
    if not out or len(set(out)) != len(out) or min(out) < 0:
        raise DistlabError(f"seeds={out}: give distinct non-negative integers, e.g. 0,1,2")
    return out


def shipped_suites() -> list[str]:
    """Names of the suites that come with distlab."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def load_suite(name_or_path: str | os.PathLike) -> Suite:
    """A shipped suite by name, or a user's YAML file by path."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or os.sep in text or path.exists():
        if not path.is_file():
            raise DistlabError(f"suite file {text} does not exist; give a shipped name "
                               f"({', '.join(shipped_suites())}) or a path to a YAML file")
        return _load_file(path, stack=())
    return _load_named(text, stack=())


def _load_named(name: str, stack: tuple[str, ...]) -> Suite:
    path = SUITES_DIR / f"{name}.yaml"
    if not path.is_file():
        names = shipped_suites()
        raise DistlabError(f"unknown suite {name!r}{_did_you_mean(near_matches(name, names))}; "
                           f"shipped suites: {', '.join(names)} (or pass a path to a YAML file)")
    return _load_file(path, stack)


def _load_file(path: Path, stack: tuple[str, ...]) -> Suite:
    key = str(path.resolve())
    if key in stack:
        raise DistlabError(f"suite {path} extends or includes itself; remove the cycle")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise DistlabError(f"suite file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise DistlabError(f"suite file {path} must hold a mapping with keys like description, recipe, "
                           f"baseline, experiments")
    return _build(path.stem, data, path, stack + (key,))


def _build(name: str, data: dict[str, Any], path: Path, stack: tuple[str, ...]) -> Suite:
    for k in data:
        if k not in TOP_KEYS:
            raise DistlabError(f"{path}: unknown key {k!r}{_did_you_mean(near_matches(str(k), TOP_KEYS))}; "
                               f"allowed: {', '.join(TOP_KEYS)}")
    parent_base, parent_scales, parent_recipe = _parent_layers(data, path, stack)
    base = {**parent_base, **parse_overrides(data.get("base"), f"{path}: base")}
    scales = _merge_scales(parent_scales, _scale_blocks(data, str(path)))
    recipe = data.get("recipe", parent_recipe)
    if not isinstance(recipe, str) or not recipe:
        raise DistlabError(f"{path}: set 'recipe' to the recipe every run trains, e.g. recipe: hrm")
    experiments: dict[str, Experiment] = {}
    for inc in _included(data, path, stack):
        if inc.recipe != recipe:
            raise DistlabError(f"{path}: included suite {inc.name!r} uses recipe {inc.recipe!r}, not {recipe!r}")
        for exp in inc.experiments.values():
            _add_included(experiments, inc.name, exp, base, scales)
    for exp_name, (ovr, exp_scales) in _declared(data, path).items():
        if exp_name in experiments:
            raise DistlabError(f"{path}: experiment {exp_name!r} is defined twice; rename one")
        scaled = {s: {**base, **scales.get(s, {}), **ovr, **exp_scales.get(s, {})}
                  for s in {*scales, *exp_scales}}
        experiments[exp_name] = Experiment(exp_name, {**base, **ovr}, scaled)
    if not experiments:
        raise DistlabError(f"{path}: no experiments; add an 'experiments' mapping, a 'grid' or 'include'")
    baseline = data.get("baseline")
    if baseline not in experiments:
        hint = _did_you_mean(near_matches(str(baseline), experiments))
        raise DistlabError(f"{path}: baseline {baseline!r} is not an experiment{hint}; "
                           f"set baseline to one of: {', '.join(experiments)}")
    return Suite(name, str(data.get("description", "")).strip(), recipe, baseline, experiments)


def _scale_blocks(data: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """``smoke:`` and ``scales: {name: overrides}`` of one suite file (or experiment) as scale -> overrides."""
    raw = data.get("scales") or {}
    if not isinstance(raw, dict):
        raise DistlabError(f"{where}: 'scales' must map a scale name to overrides, "
                           f"e.g. scales: {{h200: {{steps: 500}}}}")
    if SMOKE in raw:
        raise DistlabError(f"{where}: give the smoke scale as the 'smoke' key, not under 'scales'")
    out = {str(s): parse_overrides(o, f"{where}: scale {s}") for s, o in raw.items()}
    for s in out:
        _check_name(s, Path(where))
    return {SMOKE: parse_overrides(data.get(SMOKE), f"{where}: smoke"), **out}


def _merge_scales(low: dict[str, dict[str, Any]], high: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s: {**low.get(s, {}), **high.get(s, {})} for s in {*low, *high}}


def _parent_layers(data: dict[str, Any], path: Path, stack: tuple[str, ...]
                   ) -> tuple[dict, dict[str, dict], str | None]:
    """``extends: <suite>`` inherits that suite's base, scales and recipe (not its experiments)."""
    parent_name = data.get("extends")
    if parent_name is None:
        return {}, {}, None
    parent_path = _sibling_or_shipped(str(parent_name), path)
    key = str(parent_path.resolve())
    if key in stack:
        raise DistlabError(f"{path}: 'extends: {parent_name}' forms a cycle; remove it")
    raw = yaml.safe_load(parent_path.read_text()) or {}
    base, scales, recipe = _parent_layers(raw, parent_path, stack + (key,))
    base = {**base, **parse_overrides(raw.get("base"), f"{parent_path}: base")}
    return base, _merge_scales(scales, _scale_blocks(raw, str(parent_path))), raw.get("recipe", recipe)


def _sibling_or_shipped(ref: str, path: Path) -> Path:
    for cand in (path.parent / ref, path.parent / f"{ref}.yaml", SUITES_DIR / f"{ref}.yaml"):
        if cand.is_file():
            return cand
    names = shipped_suites()
    raise DistlabError(f"{path}: suite {ref!r} not found{_did_you_mean(near_matches(ref, names))}; "
                       f"shipped suites: {', '.join(names)}")


def _included(data: dict[str, Any], path: Path, stack: tuple[str, ...]) -> list[Suite]:
    refs = data.get("include") or []
    if not isinstance(refs, list):
        raise DistlabError(f"{path}: 'include' must be a list of suite names, e.g. [baseline, augmentation]")
    return [_load_file(_sibling_or_shipped(str(r), path), stack) for r in refs]


def _add_included(experiments: dict[str, Experiment], suite_name: str, exp: Experiment,
                  base: dict[str, Any], scales: dict[str, dict[str, Any]]) -> None:
    """Union semantics: an identical configuration already present (e.g. every suite's baseline) is kept once."""
    normal = {**base, **exp.overrides}
    scaled = {s: {**base, **scales.get(s, {}), **exp.scaled.get(s, exp.overrides)} for s in {*scales, *exp.scaled}}
    if any(e.overrides == normal and e.scaled == scaled for e in experiments.values()):
        return
    name = f"{suite_name}.{exp.name}"
    experiments[name] = Experiment(name, normal, scaled)


def _declared(data: dict[str, Any], path: Path) -> dict[str, tuple[dict, dict[str, dict]]]:
    """Explicit experiments plus grid expansions, each as (overrides, experiment-level scale blocks)."""
    out: dict[str, tuple[dict, dict[str, dict]]] = {}
    raw = data.get("experiments") or {}
    if not isinstance(raw, dict):
        raise DistlabError(f"{path}: 'experiments' must map a name to overrides, e.g. wide: {{arch.hidden_size: 1024}}")
    for exp_name, spec in raw.items():
        _check_name(str(exp_name), path)
        out[str(exp_name)] = _experiment_body(spec, f"{path}: experiment {exp_name}")
    for exp_name, ovr in expand_grid(data.get("grid"), data.get("grid_name"), f"{path}: grid").items():
        if exp_name in out:
            raise DistlabError(f"{path}: grid experiment {exp_name!r} clashes with an explicit experiment; "
                               f"set grid_name to a different pattern")
        out[exp_name] = (ovr, {})
    return out


def _experiment_body(spec: Any, where: str) -> tuple[dict, dict[str, dict]]:
    """An experiment is overrides, or ``{overrides: ..., smoke: ..., scales: ...}`` when a varied key depends
    on the scale (a width matched to the baseline's parameter count at that size)."""
    if isinstance(spec, dict) and spec and set(spec) <= {"overrides", SMOKE, "scales"}:
        return parse_overrides(spec.get("overrides"), where), _scale_blocks(spec, where)
    return parse_overrides(spec, where), {}


def expand_grid(grid: Any, name_pattern: str | None = None, where: str = "grid") -> dict[str, dict[str, Any]]:
    """Cartesian product of ``{dotted.key: [values]}``; a list of such blocks unions their products.

    Names come from ``name_pattern`` (``str.format`` with the dotted keys, e.g. ``"h{arch.H_cycles}"``) or,
    by default, from the last part of every key that takes more than one value in its block.
    """
    if grid is None:
        return {}
    blocks = grid if isinstance(grid, list) else [grid]
    out: dict[str, dict[str, Any]] = {}
    for block in blocks:
        if not isinstance(block, dict) or not block:
            raise DistlabError(f"{where}: each grid block maps a dotted key to a list, e.g. {{arch.H_cycles: [1, 2]}}")
        axes = {str(k): (v if isinstance(v, list) else [v]) for k, v in block.items()}
        if any(len(v) == 0 for v in axes.values()):
            raise DistlabError(f"{where}: a grid axis has no values; give at least one")
        for combo in itertools.product(*axes.values()):
            ovr = dict(zip(axes, combo))
            exp_name = _grid_name(ovr, axes, name_pattern, where)
            if exp_name in out and out[exp_name] != ovr:
                raise DistlabError(f"{where}: two grid points are both named {exp_name!r}; set grid_name")
            out[exp_name] = ovr
    return out


def _grid_name(ovr: dict[str, Any], axes: dict[str, list], pattern: str | None, where: str) -> str:
    if pattern:
        def value_of(match: re.Match) -> str:
            key = match.group(1).strip()
            if key not in ovr:
                raise DistlabError(f"{where}: grid_name uses {{{key}}} which is not a grid key; use one of "
                                   f"{', '.join(ovr)}")
            return format_value(ovr[key])

        name = re.sub(r"\{([^{}]+)\}", value_of, pattern)
    else:
        varied = [k for k, v in axes.items() if len(v) > 1] or list(axes)
        name = "_".join(f"{k.rsplit('.', 1)[-1]}{format_value(ovr[k])}" for k in varied)
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", name)


def parse_overrides(spec: Any, where: str = "overrides") -> dict[str, Any]:
    """Accept ``["a.b=1", ...]`` or ``{"a.b": 1}`` (nested mappings are flattened to dotted keys)."""
    if spec is None:
        return {}
    if isinstance(spec, dict):
        return _flatten(spec)
    if isinstance(spec, list):
        out: dict[str, Any] = {}
        for item in spec:
            if not isinstance(item, str) or "=" not in item or item.startswith("="):
                raise DistlabError(f"{where}: override {item!r} must look like key=value, e.g. lr=1e-4")
            key, value = item.split("=", 1)
            out[key.strip()] = value.strip()
        return out
    raise DistlabError(f"{where}: give overrides as a list of key=value strings or a mapping of dotted keys")


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, full + "."))
        else:
            out[full] = value
    return out


def format_value(value: Any) -> str:
    """Render a YAML value as the command-line override text the trainer's config parser reads back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


def _check_name(name: str, path: Path) -> None:
    if not _NAME_RE.match(name):
        raise DistlabError(f"{path}: experiment name {name!r} must be letters, digits, '_', '-', '.' or '+' "
                           f"(it becomes a folder name)")


def _did_you_mean(hint: list[str]) -> str:
    return f" (did you mean {', '.join(repr(h) for h in hint)}?)" if hint else ""
