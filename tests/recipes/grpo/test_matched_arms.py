"""Arms compared on the same updates (issue 47 item 6): ``steps=N`` with the time limit only a guard that a run says
it hit, a table of each arm's updates, and dynamic sampling's first round logged apart from the trained batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import arm_updates  # noqa: E402

CALLS: list[tuple[str, float]] = []  # (task id, reward) of every call of the reward below, in completion order


def parity_reward(prompt: str, completion: str, task) -> float:
    """A reward that is a coin flip per completion: some groups agree (zero variance), most do not."""
    reward = float(len(completion) % 2)
    CALLS.append((task.task_id, reward))
    return reward


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == "train"]


def test_dynamic_sampling_logs_the_first_round_apart_from_the_kept_batch(tmp_path, monkeypatch):
    from distlab.launch.worker import run

    CALLS.clear()
    monkeypatch.chdir(tmp_path)
    run("grpo", [], ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=4", "num_generations=2",
                     "micro_batch_size=4", "sampling.max_completion_length=16", "task.train_size=16",
                     "task.eval_size=2", "task.families=add_const", "task.eval_families=add_const",
                     "task.eval_split=train", "sft_steps=0", "lr=1e-3", "log.every=1", "log.progress=false", "steps=3",
                     "evaluation.before=false", "dynamic_sampling=true", "max_refill_rounds=2", "beta=0",
                     f"reward_funcs=[{__name__}:parity_reward]", "run.name=ds"])
    rows = _rows(tmp_path / "runs" / "ds")
    # each round's rewards are all in before the next round is drawn: a step's first round is its first 8 calls
    offset = 0
    for row in rows:
        groups: dict[str, list[float]] = {}
        for task_id, reward in CALLS[offset:offset + 8]:
            groups.setdefault(task_id, []).append(reward)
        assert len(groups) == 4 and all(len(g) == 2 for g in groups.values())
        assert row["reward_first_round"] == pytest.approx(sum(sum(g) for g in groups.values()) / 8)
        assert row["zero_std_fraction_first_round"] == pytest.approx(sum(g[0] == g[1] for g in groups.values()) / 4)
        offset += 8 * (1 + int(row["refill_rounds"]))
    assert offset == len(CALLS)
    # refilling only swaps agreeing groups for informative ones: the kept batch never has more zero-variance groups
    assert all(r["zero_std_fraction"] <= r["zero_std_fraction_first_round"] for r in rows)
    refilled = [r for r in rows if r["refill_rounds"] > 0]
    assert refilled and any(r["zero_std_fraction"] < r["zero_std_fraction_first_round"] for r in refilled), rows
    assert all(r["zero_std_fraction"] == r["zero_std_fraction_first_round"] and r["reward_mean"] ==
               pytest.approx(r["reward_first_round"]) for r in rows if r["refill_rounds"] == 0)


def _qwen_stage(tmp_path: Path, arm: str, **env: str) -> subprocess.CompletedProcess:
    """benchmarks/archive/gpu_grpo_qwen.sh with SMOKE=1: the device script's command line, on this CPU, tiny model."""
    full = dict(os.environ, SMOKE="1", OUT=str(tmp_path / "out"), RUNS=str(tmp_path / "runs"), OMP_NUM_THREADS="1",
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env)
    (tmp_path / "out").mkdir(exist_ok=True)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "archive" / "gpu_grpo_qwen.sh"), "train", arm], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def test_arms_train_to_the_same_steps_and_a_time_guard_cut_is_said_then_finished(tmp_path):
    cut = _qwen_stage(tmp_path, "control", STEPS="3", GUARD_S="0.001")  # the guard ends it after one step
    summary = json.loads((tmp_path / "runs" / "qwen-control" / "summary.json").read_text())
    assert (summary["step"], summary["steps"], summary["time_limited"]) == (1, 3, True)
    assert "control stopped before steps (the time guard): run the train stage again to finish" in cut.stdout
    for _ in range(2):  # the same stage again goes on from the checkpoint, one step per call under this guard
        _qwen_stage(tmp_path, "control", STEPS="3", GUARD_S="0.001")
    _qwen_stage(tmp_path, "grpo", STEPS="3")
    runs = tmp_path / "runs"
    for arm in ("grpo", "control"):
        s = json.loads((runs / f"qwen-{arm}" / "summary.json").read_text())
        assert (s["step"], s["steps"], s["time_limited"], s["train"]["skipped_steps"]) == (3, 3, False, 0)
    assert arm_updates.main(["--same", f"grpo={runs / 'qwen-grpo'}", f"control={runs / 'qwen-control'}"]) == 0


def test_the_updates_table_refuses_arms_matched_on_wall_time(tmp_path, capsys):
    """The review's numbers: 69 GRPO steps, 57 control steps of which 2 were skipped."""
    def write(name: str, step: int, skipped: int) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"status": "completed", "step": step, "steps": 400, "time_limited": True,
                                    "train": {"skipped_steps": skipped}}))
        return path

    grpo, control = write("grpo", 69, 0), write("control", 57, 2)
    assert arm_updates.main(["--same", f"grpo={grpo}", f"control={control}"]) == 1
    out = capsys.readouterr().out
    assert "57 of 400" in out and out.splitlines()[2].split()[-2:] == ["2", "55"]  # skipped, updates
    assert "grpo, control stopped before steps" in out
    assert arm_updates.mismatch([arm_updates.Arm("a", 69, 69, False, 0), arm_updates.Arm("b", 57, 57, False, 2)]) \
        == "updates differ: a 69, b 55"
    assert arm_updates.main(["control"]) == 2 and "NAME=RUN_DIR" in capsys.readouterr().err
