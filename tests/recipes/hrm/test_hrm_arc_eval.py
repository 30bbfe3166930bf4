"""ARC voting pass@k: a hand-built dataset where each rule changes the score, and an end-to-end build."""

import json

import numpy as np
import pytest

from distlab.errors import DistlabError
from distlab.recipes.hrm import arc_eval
from distlab.recipes.hrm.data import arc
from distlab.recipes.hrm.data.format import PuzzleMetadata, SplitBuilder, load_split, save_json

TA = np.array([[1, 2, 3], [4, 5, 6]], np.uint8)          # task A, one test input
WA = np.array([[1, 2, 3], [4, 5, 7]], np.uint8)          # a wrong answer for A
TB = [np.array([[7, 8], [9, 1], [2, 3]], np.uint8),      # task B, two test inputs
      np.array([[5, 5, 1], [0, 2, 3]], np.uint8)]
XB = np.array([[7, 8], [9, 1], [2, 4]], np.uint8)
YB = np.array([[5, 5, 1], [0, 2, 4]], np.uint8)
ID = arc.identity_aug()
S1 = {"dihedral": 1, "colours": [0, 3, 1, 2, 5, 4, 6, 9, 7, 8]}
S2 = {"dihedral": 4, "colours": [0, 9, 8, 7, 6, 5, 4, 3, 2, 1]}
S3 = {"dihedral": 6, "colours": [0, 2, 3, 4, 5, 6, 7, 8, 9, 1]}
# pid: (task, spec); A has puzzles 1-4, B has 5-7
PUZZLES = {1: ("A", ID), 2: ("A", S1), 3: ("A", S2), 4: ("A", S3), 5: ("B", ID), 6: ("B", S1), 7: ("B", S2)}


def _enc(grid, spec):
    return arc.encode_grid(arc.apply_aug(grid, spec)).reshape(-1)


def _fake_dataset(root):
    """Test split in HRM layout + arc_meta.json, built by hand (no build_arc) so the truth is known."""
    builder, examples = SplitBuilder(900), []
    for task, targets in (("A", [TA]), ("B", TB)):
        group = []
        for pid, (t, spec) in PUZZLES.items():
            if t == task:
                group.append(([(np.zeros(900, np.uint8), _enc(g, spec)) for g in targets], pid))
                examples += [{"task": task, "test_index": k, "puzzle_identifier": pid} for k in range(len(targets))]
        builder.add_group(group)
    meta = PuzzleMetadata(0, 0, 0, 12, 900, 8, 0, 0.0)
    builder.write(root, "test", meta, with_difficulty=False)
    puzzles = [None] + [{"task": t, "source_split": "evaluation", "aug": s} for t, s in PUZZLES.values()]
    save_json(root / arc.META_FILE, {"puzzles": puzzles, "test_examples": examples})
    return examples


def _row(examples, pid, k):
    return next(i for i, e in enumerate(examples) if e["puzzle_identifier"] == pid and e["test_index"] == k)


def _predictions(examples, q_wrong_a=-2.0):
    """A: true grid 2 votes (conf 1.0 mean) vs wrong 2 votes (conf ``q_wrong_a``): tie broken by confidence.
    B/0: true grid 2 low-confidence votes beat a wrong one with 1 confident vote.
    B/1: true 1 vote (q 1) ties a wrong one (q 2) and loses; the third copy is malformed."""
    rows = [  # (pid, test index, grid in the ORIGINAL frame or None, q)
        (1, 0, WA, q_wrong_a), (2, 0, TA, 0.5), (3, 0, TA, 1.5), (4, 0, WA, q_wrong_a),
        (5, 0, TB[0], -3.0), (6, 0, TB[0], -3.0), (7, 0, XB, 9.0),
        (5, 1, TB[1], 1.0), (6, 1, YB, 2.0), (7, 1, None, 50.0),
    ]
    idx, preds, q = [], [], []
    for pid, k, grid, conf in rows:
        idx.append(_row(examples, pid, k))
        preds.append(np.zeros(900, np.uint8) if grid is None else _enc(grid, PUZZLES[pid][1]))
        q.append(conf)
    return np.array(idx), np.stack(preds), np.array(q)


@pytest.fixture
def fake(tmp_path):
    return tmp_path, _fake_dataset(tmp_path)


def test_hand_built_voting_tiebreak_inverse_and_all_inputs_rule(fake):
    root, examples = fake
    idx, preds, q = _predictions(examples)
    res = arc_eval.arc_pass_at_k(root, idx, preds, q)
    assert res["tasks"] == 2 and res["test_inputs"] == 3
    a, b = res["per_task"]["A"], res["per_task"]["B"]
    assert a["correct_rank"] == [1] and a["candidates"] == [2] and a["votes"] == [4]
    assert b["correct_rank"] == [1, 2] and b["candidates"] == [2, 2] and b["malformed"] == [0, 1]
    assert (a["solved_at"], b["solved_at"]) == (1, 2)
    # B's first input is right at k=1 but its second is not, so B does not count at pass@1
    assert res["pass@1"] == 0.5 and res["pass@2"] == 1.0 and res["pass@10"] == 1.0 and res["pass@100"] == 1.0
    top = arc_eval.top_candidates(arc_eval.collect_votes(root, idx, preds, q), k=2)
    assert top["B"] == [[TB[0].tolist(), XB.tolist()], [YB.tolist(), TB[1].tolist()]]
    assert top["A"] == [[TA.tolist(), WA.tolist()]]


def test_confidence_breaks_vote_ties(fake):
    root, examples = fake
    res = arc_eval.arc_pass_at_k(root, *_predictions(examples, q_wrong_a=3.0))
    assert res["per_task"]["A"]["correct_rank"] == [2]
    assert res["pass@1"] == 0.0 and res["pass@2"] == 1.0


def test_predictions_are_read_in_their_augmented_frame(fake):
    """A's true votes come from augmented copies (rows 2, 3), so pass@1 above already needs the
    inversion; here the original-frame answer given for augmented copies must NOT count."""
    root, examples = fake
    idx = np.array([_row(examples, pid, 0) for pid in (2, 3, 4)])
    preds = np.stack([arc.encode_grid(TA).reshape(-1)] * 3)
    res = arc_eval.arc_pass_at_k(root, idx, preds, np.zeros(3), ks=(1, 100))
    assert res["per_task"]["A"]["correct_rank"] == [None] and res["per_task"]["A"]["candidates"] == [3]
    assert res["pass@100"] == 0.0


def test_unpredicted_tasks_count_as_failed(fake):
    root, examples = fake
    idx, preds, q = _predictions(examples)
    only_a = np.array([examples[i]["task"] == "A" for i in idx])
    res = arc_eval.arc_pass_at_k(root, idx[only_a], preds[only_a], q[only_a], ks=(1, 2))
    assert res["pass@1"] == 0.5 and res["pass@2"] == 0.5 and res["tasks_without_predictions"] == 1
    assert res["per_task"]["B"]["solved_at"] is None


def test_bad_inputs_raise(fake):
    root, examples = fake
    idx, preds, q = _predictions(examples)
    with pytest.raises(DistlabError, match="900"):
        arc_eval.arc_pass_at_k(root, idx, preds[:, :800], q)
    with pytest.raises(DistlabError, match="example_indices"):
        arc_eval.arc_pass_at_k(root, idx + 100, preds, q)
    with pytest.raises(DistlabError, match="q_halt"):
        arc_eval.arc_pass_at_k(root, idx, preds, q[:3])
    with pytest.raises(DistlabError, match="not found"):
        arc_eval.arc_pass_at_k(root / "nope", idx, preds, q)


# ----------------------------------------------------------------------------- end to end with build_arc

def _write_eval_tasks(root, n_tasks=3):
    rng = np.random.default_rng(5)
    (root / "evaluation").mkdir(parents=True)
    for t in range(n_tasks):
        pairs = []
        for _ in range(3 + (t == 0)):  # task e0 has two test inputs
            g = rng.integers(0, 10, (3, 4))
            pairs.append({"input": g.tolist(), "output": np.rot90(g).tolist()})
        (root / "evaluation" / f"e{t}.json").write_text(json.dumps({"train": pairs[:2], "test": pairs[2:]}))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("arc")
    _write_eval_tasks(tmp / "raw")
    arc.build_arc(tmp / "ds", source=str(tmp / "raw"), num_aug=3, seed=1, verbose=False)
    _, labels, _ = load_split(tmp / "ds", "test").example_arrays()
    return tmp / "ds", np.asarray(labels), arc.load_arc_meta(tmp / "ds")["test_examples"]


def test_end_to_end_labels_score_perfectly(built):
    ds, labels, examples = built
    rng = np.random.default_rng(0)
    res = arc_eval.arc_pass_at_k(ds, np.arange(len(labels)), labels, rng.normal(size=len(labels)))
    assert res["tasks"] == 3 and res["test_inputs"] == 4 and res["pass@1"] == 1.0
    assert res["per_task"]["e0"]["votes"] == [4, 4]  # identity + 3 augmentations agree after inversion
    order = rng.permutation(len(labels))  # order of arrival does not matter
    assert arc_eval.arc_pass_at_k(ds, order, labels[order], np.zeros(len(labels)))["pass@1"] == 1.0


def test_end_to_end_wrong_predictions_score_zero(built):
    ds, labels, examples = built
    tasks = [e["task"] for e in examples]
    # every example gets the label of an example from another task
    other = np.array([next(j for j in range(len(tasks)) if tasks[j] != tasks[i]) for i in range(len(tasks))])
    res = arc_eval.arc_pass_at_k(ds, np.arange(len(labels)), labels[other], np.zeros(len(labels)))
    assert res["pass@1"] == 0.0 and res["pass@100"] == 0.0
    off_by_one = labels.copy()
    off_by_one[:, 0] = 2 + (off_by_one[:, 0] - 2 + 1) % 10  # recolour the top-left cell
    res = arc_eval.arc_pass_at_k(ds, np.arange(len(labels)), off_by_one, np.zeros(len(labels)))
    assert res["pass@100"] == 0.0 and all(p["correct_rank"] == [None] * len(p["votes"])
                                          for p in res["per_task"].values())


def test_batch_decode_matches_single_decode():
    rng = np.random.default_rng(3)
    preds = []
    for _ in range(300):
        g = rng.integers(0, 10, (rng.integers(1, 31), rng.integers(1, 31)))
        t = arc.encode_grid(g).astype(np.int64)
        kind = rng.integers(4)
        if kind == 1:  # a hole inside the grid
            t[rng.integers(g.shape[0]), rng.integers(g.shape[1])] = rng.choice([0, 1, 12])
        elif kind == 2:  # random tokens
            t = rng.integers(0, 12, (30, 30))
        elif kind == 3:
            t[0, 0] = 0
        preds.append(t.reshape(-1))
    preds.append(np.full(900, 5))
    got = arc_eval.decode_predictions(np.stack(preds))
    for p, g in zip(preds, got, strict=True):
        want = arc.decode_prediction(p)
        assert (g is None) == (want is None) and (g is None or np.array_equal(g, want))
    assert sum(g is None for g in got) > 50 and sum(g is not None for g in got) > 50
