"""Test-time sampling with selection (eval.samples, eval.select): K=1 is today's evaluation, q picks the
trajectory the halting head rates best, vote the majority answer."""

import contextlib
import dataclasses

import pytest
import torch

from distlab.recipes.hrm import evaluation
from distlab.recipes.hrm.config import EvalConfig, HRMConfig
from distlab.recipes.hrm.data import sudoku as sd
from distlab.recipes.hrm.data.format import load_split
from distlab.recipes.hrm.evaluation import evaluate, select_trajectories
from distlab.recipes.hrm.models import build_model
from distlab.recipes.hrm.models.config import ArchConfig
from distlab.recipes.hrm.train import metadata_dict
from distlab.training.wrap import unwrap

ARCH = dict(hidden_size=32, num_heads=2, H_layers=1, L_layers=1, num_layers=2, H_cycles=2, L_cycles=2,
            halt_max_steps=2, puzzle_emb_ndim=32, forward_dtype="float32")


class _RT:
    rank, world_size, is_main, device = 0, 1, True, torch.device("cpu")

    def reduce_sums(self, sums):
        return {k: float(v) for k, v in sums.items()}

    def all_gather_object(self, obj):
        return [obj]


class _Session:
    def __init__(self, cfg):
        self.rt, self.cfg = _RT(), cfg

    def autocast(self):
        return contextlib.nullcontext()

    def phase(self, label, total, unit):
        from distlab.run.logs import Progress

        return Progress(total, enabled=False)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    path = tmp_path_factory.mktemp("samp") / "sudoku"
    sd.build_sudoku(path, train_size=4, test_size=10, blanks=20, seed=3, workers=1, verbose=False)
    return load_split(path, "test")


def _cfg(name="hrm", **ev):
    extra = {"act": "halt_only", "mlp_t": True, "pos_encodings": "none", "puzzle_emb_len": 2} if name == "trm" else {}
    return HRMConfig(arch=ArchConfig(name=name, **ARCH, **extra), global_batch_size=4, eval=EvalConfig(**ev))


def _model(cfg, split, seed=0):
    torch.manual_seed(seed)
    model = build_model(cfg.arch, metadata_dict(split))
    with torch.no_grad():  # a Q head that says something (it starts at a constant)
        inner = model.model.inner
        inner.q_head.weight.normal_(0, 0.5)
        inner.q_head.bias.zero_()
    return model


@torch.no_grad()
def _reference(cfg, model, split):
    """The evaluation loop as it was before sampling existed (one trajectory, the loss head's metric sums)."""
    sums = dict.fromkeys(("count", "accuracy", "exact_accuracy", "steps", "q_halt_accuracy"), 0.0)
    model.eval()
    n, bs = split.num_examples, cfg.global_batch_size
    import numpy as np

    from distlab.recipes.hrm.batch import make_batch
    for lo in range(0, n, bs):
        real = np.arange(lo, min(n, lo + bs))
        idx = np.concatenate([real, np.full(bs - len(real), real[-1])])
        batch = make_batch(split, idx, torch.device("cpu"))
        batch["labels"][len(real):] = -100
        carry = unwrap(model).initial_carry(batch)
        while True:
            carry, _, metrics, _, halted = model(carry, batch)
            if bool(halted):
                break
        for k in sums:
            sums[k] += float(metrics[k])
    c = sums["count"]
    return {"exact_accuracy": sums["exact_accuracy"] / c, "token_accuracy": sums["accuracy"] / c,
            "mean_steps": sums["steps"] / c, "q_halt_accuracy": sums["q_halt_accuracy"] / c, "count": int(c)}


@pytest.mark.parametrize("name", ["hrm", "trm"])
def test_one_sample_is_todays_evaluation_and_more_samples_keep_it(split, name):
    cfg = _cfg(name)
    model = _model(cfg, split)
    ref = _reference(cfg, model, split)
    one = evaluate(cfg, _Session(cfg), model, split)
    assert {k: one[k] for k in ref} == ref and one["count"] == 10
    assert not any(k.startswith("sampled") or k == "samples" for k in one)  # K=1: no extra keys, no extra cost
    assert one == evaluate(cfg, _Session(cfg), model, split)  # deterministic
    for noise in ("init", "latent"):
        cfg_k = _cfg(name, samples=3, noise=noise, noise_scale=0.5)
        many = evaluate(cfg_k, _Session(cfg_k), model, split)
        assert {k: many[k] for k in one} == one  # the K=1 numbers are still reported, unchanged
        assert many["samples"] == 3 and many["sampled_eval_time_s"] >= many["eval_time_s"] > 0
        assert many["sampled_eval_cost"] > 1.0
        assert many["sampled_oracle_exact_accuracy"] >= max(many["sampled_exact_accuracy"], one["exact_accuracy"])
        again = evaluate(cfg_k, _Session(cfg_k), model, split)  # the noise is seeded
        assert {k: v for k, v in again.items() if "time" not in k and "cost" not in k} == \
               {k: v for k, v in many.items() if "time" not in k and "cost" not in k}


def test_noise_changes_trajectories_and_is_removed_afterwards(split):
    cfg = _cfg("hrm", samples=2, noise="latent", noise_scale=5.0)
    model = _model(cfg, split)
    seen = []
    real = evaluation._trajectory

    def spy(session, m, batch):
        out = real(session, m, batch)
        seen.append(out[1]["logits"].clone())
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluation, "_trajectory", spy)
        evaluate(cfg, _Session(cfg), model, split)
    assert not torch.equal(seen[0], seen[1])  # trajectory 1 of batch 0 is perturbed
    assert model.model.inner.eval_noise is None and model.model.inner.active_H_cycles is None


def test_select_q_picks_highest_and_vote_majority():
    right, wrong, other = torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]), torch.tensor([9, 9, 9])
    # puzzle 0: answers wrong, right, wrong; puzzle 1: right, other, other
    preds = torch.stack([torch.stack([wrong, right]), torch.stack([right, other]), torch.stack([wrong, other])])
    q = torch.tensor([[0.0, 2.0], [3.0, -1.0], [1.0, -2.0]])
    # q[k, puzzle]: puzzle 0 has Q 0, 3, 1 -> trajectory 1; puzzle 1 has Q 2, -1, -2 -> trajectory 0
    assert select_trajectories(preds, q, "q").tolist() == [1, 0]
    # vote: puzzle 0 -> "wrong" (2 votes), the higher-Q of trajectories 0, 2 = 2; puzzle 1 -> "other" (trajectories
    # 1, 2) although trajectory 0 has the top Q, the higher-Q of 1, 2 = 1
    assert select_trajectories(preds, q, "vote").tolist() == [2, 1]
    # exact ties fall to the lowest trajectory (0 = noise-free)
    assert select_trajectories(preds, torch.zeros(3, 2), "q").tolist() == [0, 0]
    same = torch.stack([torch.stack([right, right])] * 3)
    assert select_trajectories(same, torch.zeros(3, 2), "vote").tolist() == [0, 0]
    with pytest.raises(ValueError):
        select_trajectories(preds, q, "best")


@pytest.mark.parametrize("select", ["q", "vote"])
def test_evaluate_scores_the_selected_trajectory(split, select):
    """A stub trajectory with known answers and Q values: even rows have one right answer with the top Q,
    odd rows a right answer that two wrong ones outvote."""
    cfg = _cfg("hrm", samples=3, select=select)
    model = _model(cfg, split)
    calls = {"n": 0}

    def stub(session, m, batch):
        k = calls["n"] % 3
        calls["n"] += 1
        labels = batch["labels"]
        b = labels.shape[0]
        right = torch.where(labels == -100, 1, labels)
        wrong = right.clone()
        wrong[:, -1] = right[:, -1] % 9 + 2  # never the label
        even = torch.zeros(b, dtype=torch.bool)
        even[::2] = True  # rows of a batch of 4: 0, 2 (batch starts are even: global index parity)
        if k == 0:
            preds, q = wrong, torch.zeros(b)
        elif k == 1:
            preds, q = right, torch.where(even, 3.0, -3.0)
        else:
            preds, q = wrong, torch.ones(b)
        counted = labels.ne(-100).any(-1)
        metrics = {"count": counted.sum(), "accuracy": torch.tensor(0.0), "exact_accuracy": torch.tensor(0.0),
                   "steps": counted.sum() * 2, "q_halt_accuracy": torch.tensor(0.0)}
        return metrics, {"preds": preds, "q_halt_logits": q, "logits": None}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluation, "_trajectory", stub)
        out = evaluate(cfg, _Session(cfg), model, split)
    assert calls["n"] == 3 * 3  # 10 examples in 3 batches of 4, 3 trajectories each
    assert out["count"] == 10 and out["exact_accuracy"] == 0.0
    assert out["sampled_oracle_exact_accuracy"] == 1.0
    # q: the right answer wins on the 5 even rows (Q 3 > 1 > 0), the wrong one (Q 1) on the odd rows
    # vote: "wrong" has 2 of 3 votes everywhere
    assert out["sampled_exact_accuracy"] == (0.5 if select == "q" else 0.0)
    assert out["sample_select"] == select
    if select == "vote":
        # one cell of 81 wrong in every answer: a known token accuracy
        assert out["sampled_token_accuracy"] == pytest.approx(80 / 81)


def test_bad_eval_settings_are_one_line_errors(tmp_path):
    from distlab.errors import DistlabError
    from distlab.recipes.hrm.recipe import _validate_eval

    for ev in ({"samples": 0}, {"select": "best"}, {"noise": "input"}, {"noise_scale": -1.0}):
        with pytest.raises(DistlabError, match="eval\\."):
            _validate_eval(dataclasses.replace(_cfg(), eval=EvalConfig(**ev)))


def test_eval_samples_is_bounded_above_at_the_stated_maximum():
    """eval.samples=100000 once ran silently for 15 minutes: the bound is refused just above it, accepted at it."""
    from distlab.errors import DistlabError
    from distlab.recipes.hrm.recipe import MAX_EVAL_SAMPLES, _validate_eval

    _validate_eval(dataclasses.replace(_cfg(), eval=EvalConfig(samples=MAX_EVAL_SAMPLES)))
    with pytest.raises(DistlabError, match=f"at most {MAX_EVAL_SAMPLES}"):
        _validate_eval(dataclasses.replace(_cfg(), eval=EvalConfig(samples=MAX_EVAL_SAMPLES + 1)))
