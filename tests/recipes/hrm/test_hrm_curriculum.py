"""arch.curriculum: the depth schedule, its effect on the model, exact resume; and test-time sampling on 2 ranks."""

import json
import sys
from pathlib import Path

import pytest
import torch

from distlab.errors import DistlabError
from distlab.recipes.hrm.models.config import ArchConfig, curriculum_cycles, parse_curriculum

sys.path.insert(0, str(Path(__file__).resolve().parent / "models"))
from clitools import run_cli, run_clis  # noqa: E402
from tiny import make_batch, tiny_model  # noqa: E402

TINY = ["data.build=sudoku", "data.train_size=64", "data.test_size=24", "data.workers=1", "data.blanks=10",
        "global_batch_size=8", "steps=6", "log.every=1", "arch.hidden_size=32", "arch.num_heads=2",
        "arch.L_layers=1", "arch.H_cycles=2", "arch.L_cycles=2", "arch.halt_max_steps=3", "arch.puzzle_emb_ndim=32",
        "arch.forward_dtype=float32", "optimizer=adamw", "lr=1e-3", "lr_warmup_steps=2", "arch.name=trm",
        "arch.act=halt_only", "arch.mlp_t=true", "arch.pos_encodings=none", "arch.puzzle_emb_len=2"]


def test_schedule_at_given_steps():
    assert [curriculum_cycles("0:1,0.3:2,0.6:3", 3, s, 10) for s in range(10)] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    assert [curriculum_cycles("linear", 3, s, 9) for s in range(9)] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [curriculum_cycles("linear", 2, s, 6) for s in range(6)] == [1, 1, 1, 2, 2, 2]
    assert [curriculum_cycles("", 3, s, 4) for s in range(4)] == [3, 3, 3, 3]  # off: the configured depth
    assert curriculum_cycles("0:2", 4, 999, 1000) == 2  # may stay below H_cycles (evaluation still runs H_cycles)
    assert parse_curriculum("0:1,0.5:3", 3) == [(0.0, 1), (0.5, 3)]
    assert ArchConfig().curriculum == ""  # off by default: presets train as published


@pytest.mark.parametrize("spec", ["0.1:1", "0:1,0.5:2,0.4:3", "0:1,1.0:2", "0:4", "0:0", "deep", "0:1,x"])
def test_bad_schedules_are_one_line_errors(spec):
    with pytest.raises(DistlabError, match="arch.curriculum"):
        ArchConfig(H_cycles=3, curriculum=spec)


def test_transformer_has_no_cycles_to_grow():
    with pytest.raises(DistlabError, match="transformer"):
        ArchConfig(name="transformer", curriculum="linear")


@pytest.mark.parametrize("name", ["hrm", "trm"])
def test_active_cycles_run_the_shallower_model(name):
    batch = make_batch()
    deep, shallow = tiny_model(name, H_cycles=3), tiny_model(name, H_cycles=1)
    shallow.load_state_dict(deep.state_dict())
    deep.model.inner.active_H_cycles = 1
    with torch.no_grad():
        a = deep(deep.initial_carry(batch), batch)[3]["logits"]
        b = shallow(shallow.initial_carry(batch), batch)[3]["logits"]
        deep.model.inner.active_H_cycles = None
        c = deep(deep.initial_carry(batch), batch)[3]["logits"]
    assert torch.equal(a, b) and not torch.equal(a, c)


def _summary(d):
    return json.loads((d / "summary.json").read_text())


def _losses(d):
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["split"] == "train"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("curr")


def test_curriculum_run_resumes_exactly_and_changes_training(workdir):
    args = ["train", "hrm", *TINY, "arch.curriculum=0:1,0.5:2"]
    # side by side; the cut's depth changes at step 3: the resumed step
    run_clis([[*args, "run.name=full"], [*args, "run.name=cut", "run.stop_at=3"]], workdir)
    cut = workdir / "runs" / "cut"
    assert _summary(cut)["status"] == "preempted"
    run_cli([*args, "run.name=cut"], workdir)
    full = workdir / "runs" / "full"
    a, b = _summary(full), _summary(cut)
    assert b["status"] == "completed" and b["param_checksum"] == a["param_checksum"]
    assert _losses(cut) == _losses(full)
    run_cli(["train", "hrm", *TINY, "run.name=plain"], workdir)
    plain = _losses(workdir / "runs" / "plain")
    assert plain[0] != _losses(full)[0]  # step 0 ran 1 cycle instead of 2


def test_sampled_eval_on_two_ranks_keeps_the_plain_numbers(workdir):
    run_dir = workdir / "runs" / "full"
    if not (run_dir / "summary.json").exists():
        run_cli(["train", "hrm", *TINY, "arch.curriculum=0:1,0.5:2", "run.name=full"], workdir)
    one, many = workdir / "one", workdir / "sampled"
    run_cli(["eval", str(run_dir), "--procs", "2", "-o", str(one)], workdir)
    run_cli(["eval", str(run_dir), "eval.samples=3", "eval.select=vote", "eval.noise=latent", "--procs", "2",
             "-o", str(many)], workdir)
    plain, ev = (json.loads((d / "eval.json").read_text()) for d in (one, many))
    assert ev["count"] == 24 and ev["samples"] == 3 and ev["sample_select"] == "vote"
    assert "samples" not in plain
    # the same checkpoint on the same ranks: every plain number is reported unchanged beside the sampled ones
    same = [k for k, v in plain.items() if isinstance(v, (int, float)) and "wall" not in k and "time" not in k]
    assert "exact_accuracy" in same and {k: ev[k] for k in same} == {k: plain[k] for k in same}
    assert ev["exact_accuracy"] == _summary(run_dir)["eval"]["exact_accuracy"]  # and as training's 1-rank eval
    assert ev["sampled_oracle_exact_accuracy"] >= ev["sampled_exact_accuracy"]
    assert ev["sampled_eval_time_s"] > ev["eval_time_s"] > 0


def test_a_time_limited_curriculum_run_warns_that_its_schedule_follows_steps(workdir):
    """A budget run plans far more steps than its time allows; its curriculum then never leaves the first stage
    (seen on an H100 on 2026-11-26): the run says so at its start."""
    args = ["train", "hrm", *TINY, "steps=2", "arch.curriculum=linear", "run.time_limit_s=600", "run.name=timed"]
    out = run_cli(args, workdir)
    said = out.stdout + out.stderr
    assert "arch.curriculum grows the depth over steps=2, not over run.time_limit_s=600s" in said
    quiet = run_cli(["train", "hrm", *TINY, "steps=2", "arch.curriculum=linear", "run.name=untimed"], workdir)
    assert "arch.curriculum grows the depth" not in quiet.stdout + quiet.stderr
    # one stage (train at a fixed depth, as trm-sudoku-380s does) has nothing to grow: no warning
    fixed = run_cli(["train", "hrm", *TINY, "steps=2", "arch.curriculum=0:1", "run.time_limit_s=600",
                     "run.name=fixed"], workdir)
    assert "arch.curriculum grows the depth" not in fixed.stdout + fixed.stderr
