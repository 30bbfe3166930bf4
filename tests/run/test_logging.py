import json

import pytest

from clitools import run_cli


def test_tensorboard_and_offline_wandb_sinks(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    run_cli(["train", "toy", "steps=4", "log.every=2", "num_examples=64", "global_batch_size=8", "d_model=16",
             "eval_examples=16", "log.tensorboard=true", "log.wandb=true", "run.name=sinks"], tmp_path,
            env={"WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)})
    run = tmp_path / "runs" / "sinks"
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert list(run.glob("wandb/offline-run-*")), "W&B offline run directory missing"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r["split"] == "train"]
    assert steps == [2, 4] and all("examples_per_s" in r for r in rows if r["split"] == "train")
    m = json.loads((run / "manifest.json").read_text())
    assert m["world_size"] == 1 and "torch" in m["packages"] and m["command"].startswith("distlab train toy")


def test_eta_reads_in_minutes_and_hours():
    from distlab.run.logs import human_duration

    assert [human_duration(x) for x in (0.4, 59, 60, 422, 3599, 13786)] == [
        "0 s", "59 s", "1 min 0 s", "7 min 2 s", "59 min 59 s", "3 h 49 min"]


def _pythonpath_prefix() -> str:
    import os
    import shlex

    return f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} " if os.environ.get("PYTHONPATH") else ""


def test_a_run_ends_with_a_closing_report(tmp_path):
    from clitools import run_clis

    args = ["train", "toy", "steps=4", "log.every=1", "num_examples=64", "global_batch_size=8", "d_model=16",
            "eval_examples=16", "log.progress=false"]
    p, cut = run_clis([[*args, "run.name=closing"], [*args, "run.name=cut", "run.stop_at=2"]], tmp_path)  # side by side
    text = p.stderr + p.stdout
    assert "run closing completed: step 4 of 4 in " in text
    assert "run directory: runs/closing (summary.json" in text.replace(str(tmp_path) + "/", "")
    assert "evaluate again: distlab eval" in text
    assert "run cut preempted: step 2 of " in cut.stderr + cut.stdout
    assert "resume: distlab train toy" in (cut.stderr + cut.stdout).replace(_pythonpath_prefix(), "")
    assert "resume:" not in text  # a completed run has nothing to resume


def test_a_completed_run_without_an_evaluation_command_offers_no_resume(tmp_path):
    """PPO judges a run with its own commands (``evaluate_with`` None): its closing block ends at the folder."""
    from distlab.run.report import closing_report

    done = closing_report({"status": "completed", "step": 2, "steps": 2, "step_unit": "update",
                           "evaluate_with": None}, tmp_path / "p", 2.0, "distlab train ppo run.name=p")
    assert "update 2 of 2" in done and "resume:" not in done and "evaluate again" not in done
    cut = closing_report({"status": "preempted", "step": 1, "steps": 2, "evaluate_with": None}, tmp_path / "p",
                         1.0, "distlab train ppo run.name=p")
    assert cut.splitlines()[-1] == "resume: distlab train ppo run.name=p"


def test_closing_table_folds_intervals_into_one_row_and_shortens_large_counts() -> None:
    from distlab.run.logs import metrics_table

    text = metrics_table("final evaluation", {"pass@1": 0.25, "pass@1_low": 0.1, "pass@1_high": 0.4,
                                              "n_problems": 64, "flops": 320_000_000_000_000, "lonely_low": 0.5,
                                              "acc": float("nan"), "nested": {"a": 1}})
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert any("pass@1" in r and "0.25 [0.1, 0.4]" in r for r in rows)
    assert not any("pass@1_low" in r or "pass@1_high" in r for r in rows)  # folded, not repeated
    assert any("flops" in r and "3.2e+14" in r for r in rows)
    assert any("n_problems" in r and r.rstrip("│ ").endswith("64") for r in rows)
    assert any("lonely_low" in r for r in rows)  # a bound without its metric stays a row of its own
    assert any("acc" in r and "n/a" in r for r in rows) and not any("nested" in r for r in rows)
    assert len(rows) == 5


def test_the_resume_line_keeps_the_pythonpath_a_users_reward_module_needs(tmp_path):
    from clitools import run_cli

    cut = run_cli(["train", "toy", "steps=4", "num_examples=64", "global_batch_size=8", "d_model=16",
                   "eval_examples=16", "log.progress=false", "run.name=pp", "run.stop_at=2"], tmp_path,
                  env={"PYTHONPATH": "my code"})
    line = next(ln for ln in (cut.stderr + cut.stdout).splitlines() if ln.startswith("resume:"))
    assert line.startswith("resume: PYTHONPATH='my code' distlab train toy ")
