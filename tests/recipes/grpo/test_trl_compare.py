"""benchmarks/trl_compare.py: bad flags are one line and exit 2 without TRL installed; the step arithmetic and the
reward TRL is handed are distlab's; with TRL importable, a 2-step run on the tiny model gives both rows."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "trl_compare.py"
_spec = importlib.util.spec_from_file_location("trl_compare", SCRIPT)
tc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tc)


def _script(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("args, says", [
    (["--steps", "0"], "--steps 0 must be 1 or more"),
    (["--steps", "two"], "invalid int value"),
    (["--warmup-steps", "0"], "--warmup-steps 0 must be 1 or more"),
    (["--steps", "2", "--warmup-steps", "2"], "leaves no measured step"),
    (["--prompts", "3", "--num-generations", "4", "--micro-batch", "5"], "does not divide"),
    (["--num-generations", "1"], "must be 2 or more"),
    (["--lr", "nan"], "--lr nan must be a finite number above 0"),
    (["--beta", "-1"], "--beta -1.0 must be 0 or more"),
    (["--frameworks", "distlab,vllm"], "name distlab, trl or trl:PATH with PATH one of plain, static, bf16, paged"),
    (["--frameworks", "trl:vllm"], "name distlab, trl or trl:PATH"),
    (["--trl-arg", "beta"], "is not KEY=VALUE"),
    (["--loss-type", "cispo"], "invalid choice"),
    (["--json", "/no/such/dir/out.json"], "does not exist"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_a_bad_flag_is_one_line_and_exit_2(tmp_path, args, says):
    proc = _script(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trl_compare: error:") and says in lines[0], proc.stderr
    assert proc.stdout == ""


def test_an_unknown_model_source_is_one_line_and_exit_2(tmp_path):
    proc = _script(["--model", "tiny:no-such-preset", "--device", "cpu", "--frameworks", "distlab"], tmp_path)
    assert proc.returncode == 2 and "unknown tiny preset" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(importlib.util.find_spec("trl") is not None, reason="trl is installed here")
def test_without_trl_the_trl_side_is_refused_in_one_line(tmp_path):
    proc = _script(["--model", "tiny:llama-2l", "--device", "cpu"], tmp_path)
    assert proc.returncode == 2 and "trl is not importable" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_step_times_are_gaps_between_rows_and_the_rest_is_other():
    rows = [{"step": k, "time": t, "completion_length": 10.0, "generate_s": 0.5, "reward_wait_s": 0.1,
             "ref_logprobs_s": 0.2, "update_s": 0.3, "skipped_steps": skipped}
            for k, t, skipped in ((1, 100.0, 0), (2, 101.5, 1), (3, 102.5, 1))]
    steps = tc.distlab_steps(rows, completions=8)
    assert [s["step_s"] for s in steps[1:]] == [1.5, 1.0] and steps[0]["step_s"] != steps[0]["step_s"]  # NaN
    summary = tc.summarise(steps, warmup=1)
    assert summary["measured_steps"] == [2, 3] and summary["step_s"] == pytest.approx(1.25)
    assert summary["other_s"] == pytest.approx(0.15) and summary["gen_tokens_per_step"] == 80
    assert summary["gen_tokens_per_s"] == pytest.approx(160.0)
    assert summary["skipped_steps"] == 1  # distlab's running count, warm-up steps included


def test_both_sides_get_the_same_settings_by_their_own_names(tmp_path):
    args = tc.parse_args(["--prompts", "4", "--num-generations", "4", "--micro-batch", "8", "--beta", "0.02",
                          "--loss-type", "dapo", "--max-completion-length", "64", "--trl-arg", "top_k=5"])
    args.device, args.dtype = "cuda", "bf16"
    keys = dict(k.split("=", 1) for k in tc.distlab_overrides(args, tmp_path / "m", tmp_path / "runs" / "d"))
    fields, dropped = tc.trl_fields(args, tmp_path, known=set(tc.trl_config(args, tmp_path)) | {"top_k"})
    assert keys["prompts_per_step"] == "4" and fields["gradient_accumulation_steps"] * 8 == 4 * 4
    assert keys["micro_batch_size"] == str(fields["per_device_train_batch_size"]) == "8"
    assert keys["beta"] == str(fields["beta"]) and keys["loss_type"] == fields["loss_type"] == "dapo"
    assert keys["sampling.max_completion_length"] == str(fields["max_completion_length"]) == "64"
    assert keys["dist.precision"] == "bf16" and fields["bf16"] and fields["top_k"] == 5 and dropped == []
    with pytest.raises(tc.UsageError, match="no field 'top_kk'"):
        tc.trl_fields(tc.parse_args(["--trl-arg", "top_kk=5"]), tmp_path, known={"top_k"})


def test_each_trl_path_changes_only_its_generation_fields(tmp_path):
    args = tc.parse_args(["--frameworks", "distlab,trl,trl:static,trl:bf16,trl:paged"])
    assert args.frameworks == ["distlab", "trl:plain", "trl:static", "trl:bf16", "trl:paged"]
    args.device, args.dtype = "cuda", "bf16"
    base = tc.trl_config(args, tmp_path)
    known = set(base) | {"cache_implementation", "pad_to_multiple_of", "use_transformers_continuous_batching"}
    fields = {path: tc.trl_fields(args, tmp_path, known, path)[0] for path in tc.TRL_PATHS}
    assert fields["plain"] == base and base["model_init_kwargs"]["dtype"] == "float32"
    assert fields["static"]["cache_implementation"] == "static" and fields["static"]["pad_to_multiple_of"] == 64
    assert fields["static"]["model_init_kwargs"] == {"dtype": "float32", "attn_implementation": "grouped_sdpa"}
    assert fields["bf16"]["model_init_kwargs"]["dtype"] == "bfloat16"
    assert fields["paged"]["use_transformers_continuous_batching"] is True
    for path, f in fields.items():  # the training settings stay the same on every path
        assert {k: v for k, v in f.items() if k in ("beta", "learning_rate", "loss_type", "max_completion_length",
                                                    "gradient_accumulation_steps")} == \
            {k: base[k] for k in ("beta", "learning_rate", "loss_type", "max_completion_length",
                                  "gradient_accumulation_steps")}, path


def test_trl_static_under_bf16_autocast_is_refused_before_anything_loads(tmp_path):
    # measured 2026-11-28: transformers 5.17's static cache is made in fp32 and autocast hands it bf16 keys
    args = tc.parse_args(["--model", "tiny:llama-2l", "--device", "cpu", "--dtype", "bf16",
                          "--frameworks", "distlab,trl:static"])
    with pytest.raises(tc.UsageError, match="trl:static with --dtype bf16 cannot run.*use trl:bf16"):
        tc.check_environment(args)


def test_a_side_that_fails_is_named_and_the_others_still_run(tmp_path, monkeypatch):
    steps = [{"step": k, "step_s": 1.0, "gen_tokens": 10.0, "generate_s": 0.5, "reward_s": 0.1, "logprobs_s": 0.1,
              "update_s": 0.2, "data_digest": "d"} for k in (1, 2)]
    monkeypatch.setattr(tc, "check_environment", lambda args: None)
    monkeypatch.setattr(tc, "save_model", lambda source, out: None)
    monkeypatch.setattr(tc, "load_tasks", lambda args: [])
    monkeypatch.setattr(tc, "run_distlab", lambda *a: {"steps": steps})

    def trl_side(args, model_dir, tasks, workdir, path):
        if path == "bf16":
            raise RuntimeError("CUDA error: device-side assert triggered\nmore detail")
        return {"steps": steps}

    monkeypatch.setattr(tc, "run_trl", trl_side)
    args = tc.parse_args(["--frameworks", "distlab,trl:bf16,trl:plain", "--steps", "2", "--warmup-steps", "1",
                          "--json", str(tmp_path / "out.json")])
    args.workdir = tmp_path / "work"
    res = tc.run(args)
    assert set(res["results"]) == {"distlab", "trl:plain"}
    assert res["failed"] == {"trl:bf16": "RuntimeError: CUDA error: device-side assert triggered"}
    assert json.loads((tmp_path / "out.json").read_text())["failed"] == res["failed"]


def test_trl_is_handed_distlabs_prompt_order_and_the_digests_agree():
    from distlab.runtime.sampler import GlobalBatchSampler

    args = argparse.Namespace(prompts=3, steps=5, seed=7)
    order = tc.prompt_order(args, num_tasks=8)  # 15 prompts over 8 tasks: crosses an epoch
    sampler = GlobalBatchSampler(8, 3, 0, 1, 7)
    digests = []
    for _ in range(5):
        assert list(sampler.next()) == order[len(digests) * 3:len(digests) * 3 + 3]
        digests.append(sampler.last_batch_digest())
    assert tc.batch_digests(order, 3) == digests and len(set(digests)) == 5
    results = {"distlab": {"steps": [{"data_digest": d} for d in digests]},
               "trl:plain": {"steps": [{"data_digest": d} for d in digests[:4]] + [{"data_digest": "x"}]}}
    assert tc.same_prompts(results) == {"trl:plain": {"steps_compared": 5, "steps_same": 4}}


def test_the_headline_is_medians_and_per_token_ratios():
    def steps(times, tokens):
        return [{"step": k + 1, "step_s": t, "gen_tokens": n, "generate_s": t / 2, "reward_s": 0.0,
                 "logprobs_s": 0.1, "update_s": 0.2} for k, (t, n) in enumerate(zip(times, tokens))]

    # TRL: one slow step lifts its mean, not its median; it samples twice the tokens per step
    ours = tc.summarise(steps([9, 1.0, 1.0, 1.2, 1.0], [100] * 5), warmup=1)
    theirs = tc.summarise(steps([9, 3.0, 3.0, 9.0, 3.0], [200] * 5), warmup=1)
    ratio = tc.headline({"distlab": {"summary": ours}, "trl:plain": {"summary": theirs}})["trl:plain"]
    assert ratio["median_step_ratio"] == pytest.approx(3.0) and ratio["per_token_ratio"] == pytest.approx(1.5)
    assert theirs["step_s"] == pytest.approx(4.5) and theirs["step_s_median"] == 3.0


def test_the_reward_trl_is_handed_is_the_sandbox_test_pass_reward():
    pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")
    from distlab.recipes.lm.rewards.scorer import RewardScorer
    from distlab.sandbox.config import SandboxConfig

    tasks = tc.load_tasks(argparse.Namespace(train_size=4, families="add_const", seed=0))
    scorer = RewardScorer(SandboxConfig(workers=1, timeout_s=5.0), "chat")
    try:
        seen = []
        reward = tc.tests_reward(tasks, scorer, seen, group=1)
        solved = [{"role": "assistant", "content": f"```python\n{tasks[1].solution}```"}]
        assert reward(prompts=["p"] * 3, completions=[solved, solved, "no code here"], task_index=[1, 0, 1]) \
            == [1.0, 0.0, 0.0]  # the right program for the wrong task fails its tests
        assert seen == [[1, 0, 1]]
    finally:
        scorer.close()


def test_two_steps_on_the_tiny_model_give_a_row_for_each_framework(tmp_path):
    pytest.importorskip("trl", reason="trl is not installed (CI does not install it)")
    pytest.importorskip("datasets")
    out = tmp_path / "cmp.json"
    proc = _script(["--model", "tiny:llama-2l", "--device", "cpu", "--steps", "2", "--warmup-steps", "1",
                    "--prompts", "2", "--num-generations", "2", "--micro-batch", "2", "--max-completion-length", "16",
                    "--train-size", "8", "--sandbox-workers", "1", "--json", str(out)], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"distlab", "trl:plain"} and res["trl"] and res["torch"] and res["device"]
    assert res["same_prompts"] == {"trl:plain": {"steps_compared": 2, "steps_same": 2}}
    assert res["headline"]["trl:plain"]["median_step_ratio"] > 0
    for name, side in res["results"].items():
        s = side["summary"]
        assert s["measured_steps"] == [2] and s["step_s"] > 0 and s["generate_s"] > 0 and s["update_s"] > 0, name
        assert s["gen_tokens_per_step"] > 0, name
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith(("distlab ", "trl:plain "))]
    assert [r[0] for r in rows if r[1][0].isdigit()] == ["distlab", "trl:plain"]  # the table's rows
    assert any(ln.startswith("trl:plain / distlab: median step") and "same prompts at 2 of 2 steps" in ln
               for ln in proc.stdout.splitlines())
    assert "distlab: 0 of 2 updates skipped for a non-finite gradient" in proc.stdout
