"""Math tasks: final-answer extraction and checking (no sandbox), synthetic word-problem families with held-out
families, GSM8K/MATH JSONL files, and GRPO and SCoRe training on them through the real command."""

import json
import sys
from pathlib import Path

import pytest

from distlab.errors import DistlabError
from distlab.recipes.lm.rewards.functions import Sample, format_reward
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.tasks import (MATH_FAMILIES, MATH_FAMILIES_EVAL, MATH_FAMILIES_TRAIN, chat_messages,
                                      load_tasks, math_tasks, stop_strings, text_completion, text_prompt)
from distlab.recipes.lm.tasks.math_answer import answers_match, check_answer, extract_answer, numeric_value
from distlab.sandbox import SandboxConfig

from clitools import run_cli, summary  # noqa: E402


@pytest.mark.parametrize("completion, reference, reward", [
    (r"First \boxed{\frac{1}{2}}, then the final \boxed{\frac{x^{2}}{4}}", r"\frac{x^2}{4}", 1.0),  # nested, last
    (r"so the total is \boxed{12} apples", "12", 1.0),
    ("48/2 = 24 and 24 + 48 = 72.\n#### 72", "72", 1.0),
    ("The answer is 12.", "12", 1.0),
    ("The answer is 12.", "13", 0.0),
    ("So we get 1,234 in all", "1234", 1.0),
    ("The answer is $1,234.50.", "1234.5", 1.0),
    ("The answer is 3/4", "0.75", 1.0),
    (r"\boxed{\dfrac{3}{4}}", "0.75", 1.0),
    ("Answer: 0.75", "3/4", 1.0),
    ("The answer is -7.", "-7", 1.0),
    ("The answer is 7.", "-7", 0.0),
    ("it drops to \u22125 degrees", "-5", 1.0),
    ("The answer is 25%.", "25", 1.0),
    ("The answer is 12 apples.", "12", 1.0),
    (r"so $x = 5$. The answer is x = 5", "5", 1.0),
    ("3 + 4 = 7, then 7 * 2 = 14", "14", 1.0),  # no stated answer: the last number
    (r"\boxed{\text{Monday}}", "monday", 1.0),
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt3}{2}", 1.0),
    ("I do not know.", "5", 0.0),  # no answer at all
    ("", "5", 0.0),
    (r"\boxed{2^{1000000}}", "1", 0.0),  # a huge power is not evaluated
    ("The answer is __import__('os').system('true')", "0", 0.0),  # never evaluated
])
def test_final_answer_extraction_and_comparison(completion, reference, reward):
    assert check_answer(completion, reference)[0] == reward


def test_extraction_order_and_statuses():
    assert extract_answer(r"\boxed{3} ... The answer is 4") == "3"  # boxed wins over a stated answer
    assert extract_answer("#### 5\nThe answer is 6.") == "6"  # the last stated answer
    assert extract_answer("about 7 or 8") == "8" and extract_answer("about 7 or 8", strict=True) is None
    assert check_answer("nothing", "1")[1] == "no_answer"
    status, detail = check_answer("The answer is 9.", "10")[1:]
    assert status == "wrong_answer" and "10" not in detail  # the reference is never shown (SCoRe's guide reads this)
    assert numeric_value("-2^3") == -8 and numeric_value("1/0") is None and numeric_value("abs(-1)") is None
    assert answers_match("0.3333333", "1/3") and not answers_match("0.33", "1/3")


def test_families_are_deterministic_and_their_references_score():
    a, b = math_tasks(20, seed=3, families="all"), math_tasks(20, seed=3, families="all")
    assert a == b and a != math_tasks(20, seed=4, families="all")
    assert math_tasks(5, seed=3, families="all") == a[:5]  # task i does not depend on n
    assert {t.source for t in a} == {f"math:{f}" for f in MATH_FAMILIES}
    for t in a:
        assert t.kind == "math" and t.answer.lstrip("-").isdigit()
        assert check_answer(t.solution, t.answer)[0] == 1.0
        assert check_answer(text_completion(t), t.answer)[0] == 1.0
        assert check_answer(f"The answer is {int(t.answer) + 1}.", t.answer)[0] == 0.0


def test_held_out_families_are_disjoint_and_splits_pick_them():
    assert not set(MATH_FAMILIES_TRAIN) & set(MATH_FAMILIES_EVAL)
    assert set(MATH_FAMILIES_TRAIN) | set(MATH_FAMILIES_EVAL) == set(MATH_FAMILIES)
    train, held = load_tasks("math", "train", n=10), load_tasks("math_synthetic", "eval", n=10)
    assert {t.source.split(":")[1] for t in train} == set(MATH_FAMILIES_TRAIN)
    assert {t.source.split(":")[1] for t in held} == set(MATH_FAMILIES_EVAL)
    assert {t.source for t in load_tasks("math", "train", n=4, families=["minutes"])} == {"math:minutes"}
    with pytest.raises(DistlabError, match="did you mean 'minutes'"):
        load_tasks("math", "train", n=4, families=["minute"])


def test_prompts_and_the_scorer_need_no_sandbox(tmp_path):
    task = math_tasks(1)[0]
    assert text_prompt(task).endswith("\nSolution:") and "\n\n" in stop_strings(task, "text")
    assert "\\boxed{}" in chat_messages(task)[-1]["content"]
    scorer = RewardScorer(SandboxConfig(), "text")
    try:
        assert scorer.submit(task, text_completion(task)).result() == 1.0
        assert scorer.submit_fraction(task, "The answer is -1.").result() == 0.0
        assert scorer.submit_detailed(task, "no idea").result().status == "no_answer"
        counts = scorer.take_counts()
        assert counts["sandbox_runs"] == 0 and counts["no_code"] == 1
    finally:
        scorer.close()
    sample = Sample(task=task, prompt="", completion="so 5", tokens=2, truncated=False)
    assert format_reward(sample, "text") == 0.0
    assert format_reward(Sample(task, "", r"\boxed{5}", 3, False), "text") == 1.0


def _write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GSM8K = [{"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
          "answer": "In May she sold 48/2 = <<48/2=24>>24 clips.\nIn all 48+24 = <<48+24=72>>72.\n#### 72"},
         {"question": "What is 1,000 + 234?", "answer": "1000 + 234 = 1234\n#### 1,234"}]
MATH = [{"problem": "What is $\\frac{1}{2} + \\frac{1}{4}$?", "solution": "We get $\\boxed{\\frac{3}{4}}$.",
         "unique_id": "algebra/1"},
        {"problem": "Compute $2^{3}$.", "solution": "It is eight.", "answer": "8"}]


def test_gsm8k_and_math_layouts_load(tmp_path):
    g = load_tasks(str(_write(tmp_path / "gsm.jsonl", GSM8K)), "train")
    assert [t.answer for t in g] == ["72", "1,234"] and g[0].task_id == "gsm/1" and g[0].kind == "math"
    assert "<<" not in g[0].solution and check_answer(g[0].solution, g[0].answer)[0] == 1.0
    assert check_answer("The answer is 1234.", g[1].answer)[0] == 1.0
    m = load_tasks(str(_write(tmp_path / "math.jsonl", MATH)), "train")
    assert [t.answer for t in m] == ["\\frac{3}{4}", "8"] and m[0].task_id == "algebra/1"
    assert check_answer("The answer is 0.75", m[0].answer)[0] == 1.0


@pytest.mark.parametrize("rows, message", [
    ([GSM8K[0], {"question": "q", "answer": "no final line"}], r"gsm\.jsonl:2: gsm8k layout: 'answer' has no '####"),
    ([GSM8K[0], "{oops"], r"gsm\.jsonl:2: not JSON"),
    ([GSM8K[0], {"question": "q"}], r"gsm\.jsonl:2: gsm8k layout: 'answer' must be a non-empty string"),
    ([MATH[0], {"problem": "p", "solution": "no box"}], r"gsm\.jsonl:2: math layout: 'solution' has no \\boxed"),
    ([MATH[0], MATH[0]], r"gsm\.jsonl:2: task_id 'algebra/1' appears twice"),
    # json reads the non-standard NaN/Infinity as floats: once these became the answers "nan" and "inf"
    ([{"prompt": "p", "answer": 3}, {"prompt": "q", "answer": float("nan")}], r"gsm\.jsonl:2: 'answer' is NaN"),
    ([MATH[0], {"problem": "p", "solution": "s", "answer": float("-inf")}], r"gsm\.jsonl:2: 'answer' is -Infinity"),
])
def test_a_bad_line_names_file_and_line(tmp_path, rows, message):
    with pytest.raises(DistlabError, match=message):
        load_tasks(str(_write(tmp_path / "gsm.jsonl", rows)), "train")


def test_a_numeric_math_answer_is_its_text(tmp_path):
    """A number where MATH-500 puts its answer is the answer (it once fell back to the \\boxed{} silently)."""
    rows = [{"problem": "p", "solution": "so \\boxed{7}", "answer": 8}]
    assert [t.answer for t in load_tasks(str(_write(tmp_path / "m.jsonl", rows)), "train")] == ["8"]
    assert [t.answer for t in load_tasks(str(_write(tmp_path / "s.jsonl", [{"prompt": "q", "answer": 2.5}])),
                                         "train")] == ["2.5"]


pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")


def test_grpo_trains_on_math_tasks_through_the_cli(tmp_path):
    data = _write(tmp_path / "gsm.jsonl", GSM8K)
    run_cli(["train", "grpo", "model.source=tiny:llama-2l", "model.prompt_mode=text", "task.train=math",
             "task.families=groups,minutes", f"task.eval={data}", "task.train_size=16", "prompts_per_step=2",
             "num_generations=4", "micro_batch_size=4", "sampling.max_completion_length=24", "steps=2",
             "sft_steps=4", "lr=1e-3", "reward_funcs=[tests,format]", "log.every=1", "log.progress=false",
             "run.name=math"], tmp_path)
    s = summary(tmp_path / "runs" / "math")
    assert s["status"] == "completed" and s["eval"]["n_problems"] == 2
    rows = [json.loads(x) for x in (tmp_path / "runs" / "math" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 2 and all("rewards/tests" in r and "rewards/format" in r for r in train)


def test_one_score_step_on_math_tasks(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "score"))
    from score_cli import EVERYTHING, ON_CPU, TINY  # noqa: PLC0415
    run_cli(["train", "score", *TINY, *EVERYTHING, *ON_CPU, "stage_schedule=II:1", "task.train=math",
             "task.eval=math", "task.families=list_sum", "task.eval_families=centimetres", "steps=1",
             "run.name=math"], tmp_path)  # a trained guidance model that reads turn 1's answer check
    assert summary(tmp_path / "runs" / "math")["status"] == "completed"
    problems = json.loads((tmp_path / "runs" / "math" / "eval_step000001_problems.json").read_text())
    assert len(problems) == 2 and {p["turn1_status"] for p in problems} <= {"passed", "wrong_answer", "no_answer"}
    assert all(p["hint"] is not None for p in problems)


def test_score_turn2_and_guidance_prompts_of_a_math_task():
    from distlab.recipes.lm.rollout.stops import Completion  # noqa: PLC0415
    from distlab.recipes.score.episode import guidance_prompt, turn2_pieces  # noqa: PLC0415
    task = math_tasks(1)[0]
    y1 = Completion(0, [1, 2], [3], " 3 + 4 = 7. The answer is 7.", "length")
    pieces = turn2_pieces(task, None, "text", "", y1, "check the sum", "Review your solution.")
    text = "".join(p for p, _ in pieces)
    assert "```" not in text and text.endswith("\nSolution:") and "Hint: check the sum" in text
    guide = guidance_prompt(task, y1.text, None, "text", ("wrong_answer", "the final answer '7' is wrong"))
    assert "```" not in guide and "The answer is 7." in guide and "wrong_answer" in guide
