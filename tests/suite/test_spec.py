"""Suite YAML loading: shipped suites, grids, smoke precedence, user files and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from distlab.errors import DistlabError
from distlab.suite.spec import expand_grid, load_suite, parse_overrides, shipped_suites


def _write(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_shipped_suites_load_with_expected_experiments():
    assert set(shipped_suites()) >= {"baseline", "augmentation", "hierarchical", "deep_transformer",
                                     "act_alternatives", "puzzle_embeddings", "all"}
    hier = load_suite("hierarchical")
    cycles = {(e.overrides["arch.H_cycles"], e.overrides["arch.L_cycles"]) for e in hier.experiments.values()}
    assert cycles == {(1, 1), (2, 2), (4, 4), (2, 4), (4, 2)}
    assert hier.resolved(hier.baseline) == load_suite("baseline").resolved("published")
    aug = load_suite("augmentation")
    assert sorted(e.overrides["data.num_aug"] for e in aug.experiments.values()) == [0, 300, 1000]
    act = load_suite("act_alternatives")
    fixed = sorted(e.overrides["arch.halt_max_steps"] for e in act.experiments.values()
                   if e.overrides["arch.act"] == "fixed")
    assert fixed == [4, 8, 16]  # fixed 1 is 'none': the same single segment
    assert {e.overrides["arch.act"] for e in act.experiments.values()} == {"q_learning", "halt_only", "fixed", "none"}
    emb = load_suite("puzzle_embeddings")
    assert {e.overrides["arch.puzzle_emb_ndim"] for e in emb.experiments.values()} >= {0, 8, 16, 32}
    deep = load_suite("deep_transformer")
    tr = [e.overrides for e in deep.experiments.values() if e.overrides["arch.name"] == "transformer"]
    assert len({o["arch.num_layers"] for o in tr}) == 2


def test_deep_transformer_is_parameter_matched_within_10_percent():
    """Blocks hold ~12 d^2 parameters each; HRM's H+L blocks are the reference."""
    suite = load_suite("deep_transformer")
    for scale in (None, "h200"):
        hrm = suite.resolved(suite.baseline, scale)
        ref = (hrm["arch.H_layers"] + hrm["arch.L_layers"]) * hrm["arch.hidden_size"] ** 2
        for name in suite.experiments:
            o = suite.resolved(name, scale)
            if o["arch.name"] == "transformer":
                assert abs(o["arch.num_layers"] * o["arch.hidden_size"] ** 2 / ref - 1) < 0.10, (name, scale)


def test_all_is_the_union_with_one_shared_baseline():
    union = load_suite("all")
    parts = [load_suite(n) for n in ("baseline", "augmentation", "hierarchical", "deep_transformer",
                                     "act_alternatives", "puzzle_embeddings")]
    configs = {tuple(sorted((k, str(v)) for k, v in e.overrides.items())) for p in parts
               for e in p.experiments.values()}
    assert len(union.experiments) == len(configs)
    assert union.baseline == "baseline.published"
    assert sum(1 for e in union.experiments.values() if e.overrides == union.resolved(union.baseline)) == 1


def test_grid_expands_cartesian_products_and_unions_blocks():
    grid = [{"a.x": [1, 2], "b": ["p", "q"]}, {"a.x": [9], "b": ["p"]}]
    out = expand_grid(grid)
    assert len(out) == 5
    assert out["x2_bq"] == {"a.x": 2, "b": "q"}
    named = expand_grid({"a.x": [1, 2], "c": [True]}, "run{a.x}-{c}")
    assert named == {"run1-true": {"a.x": 1, "c": True}, "run2-true": {"a.x": 2, "c": True}}
    with pytest.raises(DistlabError, match="not a grid key"):
        expand_grid({"a.x": [1]}, "{nope}")


def test_smoke_precedence_base_smoke_experiment_experiment_smoke(tmp_path):
    path = _write(tmp_path, "mine", {
        "description": "d", "recipe": "hrm", "base": ["steps=1000", "lr=1e-4", "arch.hidden_size=512"],
        "smoke": {"steps": 5, "arch": {"hidden_size": 32}}, "baseline": "a",
        "experiments": {"a": {}, "wide": {"arch.hidden_size": 1024},
                        "big": {"overrides": {"data.num_aug": 1000}, "smoke": {"data.num_aug": 2}}}})
    suite = load_suite(path)
    assert suite.name == "mine"
    assert suite.resolved("a") == {"steps": "1000", "lr": "1e-4", "arch.hidden_size": "512"}
    assert suite.resolved("a", "smoke") == {"steps": 5, "lr": "1e-4", "arch.hidden_size": 32}
    assert suite.resolved("wide", "smoke")["arch.hidden_size"] == 1024  # the varied key survives smoke
    assert suite.resolved("big")["data.num_aug"] == 1000
    assert suite.resolved("big", "smoke")["data.num_aug"] == 2
    runs = suite.runs([3, 7], scale="smoke", root=tmp_path / "res")
    assert [(r.experiment, r.seed) for r in runs] == [("a", 3), ("a", 7), ("wide", 3), ("wide", 7),
                                                      ("big", 3), ("big", 7)]
    r = runs[3]
    assert r.out_dir == tmp_path / "res" / "mine" / "wide" / "seed7"
    assert "steps=5" in r.overrides and "arch.hidden_size=1024" in r.overrides
    assert r.overrides[-3:] == ["run.seed=7", f"run.dir={r.out_dir.parent}", "run.name=seed7"]
    assert r.argv("hrm")[:2] == ["train", "hrm"]
    assert len(suite.runs(4)) == 12


def test_extends_inherits_base_and_smoke(tmp_path):
    path = _write(tmp_path, "child", {"extends": "baseline", "baseline": "x",
                                      "experiments": {"x": {"lr": 1.0e-3}}})
    suite = load_suite(path)
    assert suite.recipe == "hrm"
    base = load_suite("baseline").resolved("published", "smoke")
    assert suite.resolved("x", "smoke") == {**base, "lr": 1.0e-3}


def test_unknown_suite_lists_near_matches():
    with pytest.raises(DistlabError, match="augmentation") as err:
        load_suite("augmentaton")
    assert "did you mean" in str(err.value)


@pytest.mark.parametrize("data, message", [
    ({"recipe": "hrm", "baseline": "a", "experiments": {"a": {}}, "experimnts": {}}, "did you mean 'experiments'"),
    ({"recipe": "hrm", "baseline": "b", "experiments": {"a": {}}}, "baseline 'b' is not an experiment"),
    ({"recipe": "hrm", "baseline": "a", "experiments": {"a": ["lr1e-4"]}}, "must look like key=value"),
    ({"baseline": "a", "experiments": {"a": {}}}, "set 'recipe'"),
    ({"recipe": "hrm", "baseline": "a", "experiments": {"a/b": {}}}, "folder name"),
    ({"recipe": "hrm", "baseline": "a"}, "no experiments"),
])
def test_bad_suite_files_raise_one_line_errors(tmp_path, data, message):
    with pytest.raises(DistlabError, match=message):
        load_suite(_write(tmp_path, "bad", data))


def test_missing_file_and_bad_seeds(tmp_path):
    with pytest.raises(DistlabError, match="does not exist"):
        load_suite(tmp_path / "nope.yaml")
    suite = load_suite("baseline")
    for bad in (0, [1, 1], [-1]):
        with pytest.raises(DistlabError, match="seeds"):
            suite.runs(bad)


def test_parse_overrides_forms():
    assert parse_overrides(["a.b=1", "c= x=y "]) == {"a.b": "1", "c": "x=y"}
    assert parse_overrides({"a": {"b": 1, "c": {"d": [1, 2]}}}) == {"a.b": 1, "a.c.d": [1, 2]}
    with pytest.raises(DistlabError):
        parse_overrides("a=1")


def test_named_scales_layer_like_smoke_and_an_experiment_can_resize_its_varied_key(tmp_path):
    f = _write(tmp_path, "s", {
        "recipe": "hrm", "base": {"steps": 100, "arch.hidden_size": 512}, "baseline": "a",
        "scales": {"gpu": {"steps": 7, "arch.hidden_size": 128}},
        "experiments": {"a": {},
                        "tf": {"overrides": {"arch.hidden_size": 288}, "scales": {"gpu": {"arch.hidden_size": 72}}},
                        "deep": {"arch.num_layers": 24}}})
    suite = load_suite(f)
    assert suite.scales == ["gpu", "smoke"]
    assert suite.resolved("a", "gpu") == {"steps": 7, "arch.hidden_size": 128}
    assert suite.resolved("tf", "gpu")["arch.hidden_size"] == 72 and suite.resolved("tf")["arch.hidden_size"] == 288
    assert suite.resolved("deep", "gpu") == {"steps": 7, "arch.hidden_size": 128, "arch.num_layers": 24}
    assert suite.resolved("a", "smoke") == {"steps": 100, "arch.hidden_size": 512}  # no smoke block: base
    with pytest.raises(DistlabError, match="no scale 'gpus' .*did you mean 'gpu'"):
        suite.resolved("a", "gpus")
    snap = suite.snapshot("gpu", {"runs_at_once": 3, "runs_per_gpu": 3})
    assert snap["scale"] == "gpu" and snap["experiments"]["tf"]["arch.hidden_size"] == 72
    assert snap["placement"]["runs_per_gpu"] == 3


def test_a_child_suite_inherits_and_overrides_its_parents_scales(tmp_path):
    _write(tmp_path, "parent", {"recipe": "hrm", "base": {"steps": 100}, "baseline": "a",
                                     "scales": {"gpu": {"steps": 7, "lr": 1.0e-3}}, "experiments": {"a": {}}})
    f = _write(tmp_path, "child", {"extends": "parent", "baseline": "b", "scales": {"gpu": {"lr": 3.0e-4}},
                                        "experiments": {"b": {"arch.H_cycles": 1}}})
    assert load_suite(f).resolved("b", "gpu") == {"steps": 7, "lr": 3.0e-4, "arch.H_cycles": 1}
    bad = _write(tmp_path, "bad", {"recipe": "hrm", "baseline": "a", "experiments": {"a": {}},
                                        "scales": {"smoke": {"steps": 1}}})
    with pytest.raises(DistlabError, match="give the smoke scale as the 'smoke' key"):
        load_suite(bad)
