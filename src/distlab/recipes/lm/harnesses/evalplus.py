"""The ``evalplus`` harness: EvalPlus's prompts and stops (:mod:`.evalplus_prompt`), its code extraction
(:mod:`.evalplus_extract`), its tolerance and time limits (:mod:`.evalplus_judge`), put together for one evaluation."""

from __future__ import annotations

from distlab.errors import DistlabError
from distlab.recipes.lm.harnesses import HarnessPlan
from distlab.recipes.lm.harnesses.evalplus_extract import evalplus_program
from distlab.recipes.lm.harnesses.evalplus_judge import (ReferenceTimes, count_asserts, task_atol, time_limit,
                                                         tolerant_tests)
from distlab.recipes.lm.harnesses.evalplus_prompt import evalplus_prompt, evalplus_stops, is_direct, problem_text
from distlab.recipes.lm.rewards.scorer import Judging, RewardScorer
from distlab.recipes.lm.tasks.task import Task

REFERENCE_TIMES = ReferenceTimes()  # one measurement per process: a run's base and final evaluations share it


def judging(direct: bool) -> Judging:
    """EvalPlus's program, tests and time limit for a completion (``direct``: it continues the problem's text)."""
    return Judging(
        program=lambda task, text: evalplus_program(text, task.entry_point, problem_text(task) if direct else ""),
        tests=lambda task: tolerant_tests(task.tests, task_atol(task)),
        time_limit=lambda task: time_limit(count_asserts(task.tests), REFERENCE_TIMES.seconds(task)))


def evalplus_plan(tasks: list[Task], tokenizer, scorer: RewardScorer) -> HarnessPlan:
    """Prompts, stops and judging for ``tasks``; measures the reference solutions' times first (once per task)."""
    math = [t.task_id for t in tasks if t.kind == "math"]
    if math:
        raise DistlabError(f"evaluation.harness=evalplus judges programs, and task {math[0]} is a math task; use "
                           f"evaluation.harness=distlab for math sets")
    direct = is_direct(tokenizer, scorer.mode)
    REFERENCE_TIMES.measure(tasks, scorer.sandbox)
    rules = judging(direct)
    return HarnessPlan([evalplus_prompt(t, tokenizer, direct) for t in tasks], evalplus_stops(tasks, direct),
                       lambda task, text: scorer.submit(task, text, rules))
