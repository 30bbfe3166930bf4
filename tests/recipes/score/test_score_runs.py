"""Whole runs through the real CLI: exact resume with CPU-placed models and interleaved stages, 2 ranks, eval."""

import json

import pytest

from clitools import run_clis
from score_cli import EVERYTHING, ON_CPU, TINY, rows, run_cli, summary

TRAINED = ("policy", "guidance", "critic", "value", "target_critic")


def _args(name, *extra, procs=1):
    return ["train", "score", *TINY, *EVERYTHING, *ON_CPU, f"run.name={name}", *extra, "--procs", str(procs)]


def _train(d, name, *extra, procs=1, check=True):
    return run_cli(_args(name, *extra, procs=procs), d, check=check)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """One uninterrupted 4-step run; one cut after step 2 (a stage boundary) and resumed."""
    d = tmp_path_factory.mktemp("score")
    run_clis([_args("full", "steps=4"), _args("cut", "steps=4", "run.stop_at=2")], d)  # independent: side by side
    cut = summary(d / "runs" / "cut")
    _train(d, "cut", "steps=4")
    return d, cut


def test_resume_is_bitwise_for_every_trained_model(resumed):
    d, cut = resumed
    assert cut["status"] == "preempted" and cut["step"] == 2 and cut["schedule"]["position"] == 2
    full, res = summary(d / "runs" / "full"), summary(d / "runs" / "cut")
    assert full["status"] == res["status"] == "completed" and res["step"] == 4
    assert set(full["param_checksums"]) == set(TRAINED)
    for name in TRAINED:
        assert res["param_checksums"][name] == full["param_checksums"][name], name
        assert cut["param_checksums"][name] != full["param_checksums"][name], f"{name} never changed"
    assert res["schedule"] == full["schedule"] == {"position": 4, "steps_I": 2, "steps_II": 2}
    assert rows(d / "runs" / "cut") == rows(d / "runs" / "full")  # same episodes, rewards, losses, stages
    assert [r["stage"] for r in rows(d / "runs" / "full")] == [1.0, 2.0, 1.0, 2.0]
    assert all(r["extrinsic"] == 1.0 and {"hint_tokens", "hint_leak_rate", "critic_q_loss", "guidance_reward"} <= set(r)
               for r in rows(d / "runs" / "full"))
    # turn 2 without the hint is an evaluation diagnostic: training rollouts never pay for it
    assert not any({"acc_t2_no_hint", "hint_gain"} & set(r) for r in rows(d / "runs" / "full"))
    final = rows(d / "runs" / "full", "eval")[-1]
    assert {"acc_t2_no_hint", "hint_gain", "hint_gain_p", "delta_t1_t2_p"} <= set(final)
    assert res["feedback"] == "extrinsic"


def test_checkpoint_holds_every_piece_of_state(resumed):
    d, _ = resumed
    ckpt = sorted((d / "runs" / "full" / "checkpoints").glob("step*"))[-1]
    meta = json.loads((ckpt / "extra.json").read_text())
    assert meta["models"] == sorted(["policy", "guidance", "critic", "value"])
    # the warmed-up reference is state too (it cannot be rebuilt from model.source)
    assert set(meta["objects"]) == {"target_critic", "reference", "schedule", "sampler", "start_eval"}


def test_config_errors_fail_before_any_process(tmp_path):
    proc = _train(tmp_path, "bad", "placement.guidance=offload", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "guidance=trained trains it" in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_two_ranks_train_and_evaluate(tmp_path):
    _train(tmp_path, "two", "steps=2", "no_hint_sample=false", procs=2)
    s = summary(tmp_path / "runs" / "two")
    assert s["status"] == "completed" and s["world_size"] == 2 and set(s["param_checksums"]) == set(TRAINED)
    got = rows(tmp_path / "runs" / "two")
    assert len(got) == 2 and all({"acc_t1", "acc_t2", "delta_t1_t2", "delta_i_to_c", "delta_c_to_i", "hint_tokens",
                                  "hint_leak_rate", "critic_q_loss", "kl_t1"} <= set(r) for r in got)
    assert {"acc_t1", "acc_t2", "delta_t1_t2", "acc_t1_low", "acc_t1_high"} <= set(s["eval"])
    run_cli(["eval", str(tmp_path / "runs" / "two"), "--procs", "1"], tmp_path)
    out = json.loads(next((tmp_path / "runs" / "two" / "eval").glob("step*/eval.json")).read_text())
    assert out["step"] == 2 and out["feedback"] == "extrinsic" and out["n_problems"] == 2
    assert {"acc_t1", "acc_t2", "delta_t1_t2", "base_acc_t1", "base_acc_t2", "base_delta_t1_t2",
            "delta_change", "acc_t1_change", "acc_t2_change_low", "acc_t2_change_significant"} <= set(out)
    assert out["acc_t2_change"] == pytest.approx(out["acc_t2"] - out["base_acc_t2"])
    # generating in chunks of one prompt (sampling.chunk_prompts) bounds memory and scores the same problems alike
    run_cli(["eval", str(tmp_path / "runs" / "two"), "sampling.chunk_prompts=1", "-o", str(tmp_path / "chunked"),
             "--procs", "1"], tmp_path)
    chunked = json.loads((tmp_path / "chunked" / "eval.json").read_text())
    for key in ("acc_t1", "acc_t2", "base_acc_t1", "base_acc_t2", "n_problems"):
        assert chunked[key] == out[key], key


def test_two_ranks_with_sharded_offloaded_models_train_every_model(tmp_path):
    """The 3B SCoRe row with ``dist.wrap=fsdp dist.cpu_offload=true`` crashed on an H100 (2026-11-26): the target
    critic's soft update mixed the sharded critic's DTensors with its own plain tensors. Two gloo ranks gather the
    critic's shards in the same order and every trained model takes its steps."""
    _train(tmp_path, "fsdp", "steps=2", "dist.wrap=fsdp", "dist.cpu_offload=true", procs=2)
    s = summary(tmp_path / "runs" / "fsdp")
    assert s["status"] == "completed" and s["world_size"] == 2 and set(s["param_checksums"]) == set(TRAINED)
    got = rows(tmp_path / "runs" / "fsdp")
    assert len(got) == 2 and all(r["critic_q_loss"] == r["critic_q_loss"] for r in got)  # not NaN
