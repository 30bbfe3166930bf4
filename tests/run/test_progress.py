"""Progress of long phases (logs.Progress, the one home for it): count, rate and ETA on the console while a slow
evaluation runs, nothing for a phase of a second, never the same line twice, rates below one per second in seconds
per unit; evaluation files keep the first completions of each problem; a stop signal cuts an evaluation short."""

import time
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
import torch

import distlab.recipes.lm.eval.evaluation as evaluation
import distlab.training.session as session_mod
from distlab.recipes.lm.config import EvalConfig, SamplingConfig
from distlab.recipes.lm.eval.evaluation import evaluate_pass_at_k
from distlab.run.logs import Progress, phase_progress, rate_text
from distlab.runtime.dist import Runtime
from distlab.training.session import StopRequested


def _solved(task, text):
    f = Future()
    f.set_result(1.0 if text.endswith("ok") else 0.0)
    return f


@pytest.fixture
def slow_model(monkeypatch):
    """An evaluation whose generate calls take ``delay`` seconds each; completions alternate "ok" and "no"."""
    calls = []

    def fake_generate(model, tok, prompts, sampling, *, n, **kw):
        calls.append(len(prompts))
        time.sleep(slow_model.delay)
        return [SimpleNamespace(prompt_index=i, text=f"{prompts[i]} try{j} {'ok' if j % 2 == 0 else 'no'}")
                for i in range(len(prompts)) for j in range(n)]

    slow_model.delay = 0.0
    monkeypatch.setattr(evaluation, "generate", fake_generate)
    monkeypatch.setattr(evaluation, "prompt_text", lambda t, tok, mode, few: f"problem {t.task_id}")
    monkeypatch.setattr(evaluation, "stops_for", lambda tasks, mode: ())
    slow_model.calls = calls
    return slow_model


def _evaluate(tasks, ev, progress=None):
    scorer = SimpleNamespace(mode="text", submit=_solved)
    return evaluate_pass_at_k(torch.nn.Linear(1, 1), None, tasks, [], SamplingConfig(), ev, scorer, Runtime(), seed=0,
                              step_rows=2, progress=progress)


def test_a_slow_evaluation_prints_count_rate_and_eta_while_it_runs(slow_model, capsys):
    slow_model.delay = 0.15
    tasks = [SimpleNamespace(task_id=str(i)) for i in range(12)]

    def progress(label, total):  # what logged_evaluation opens, at a pace a test can wait for
        return Progress(total, unit="problem", label=f"eval_start {label}", quiet_s=0.3, every_s=0.3, transient=True)

    _evaluate(tasks, EvalConfig(), progress)
    lines = [x for x in capsys.readouterr().err.splitlines() if "eval_start greedy: problem" in x]
    assert len(lines) >= 2, lines  # several lines during the evaluation, not one at its end
    first = lines[0]
    done = int(first.split("problem ")[1].split("/")[0])
    assert 0 < done < 12 and "/12" in first  # a count part-way through
    assert "problem/s" in first and "eta " in first and "eta ?" not in first  # a rate and an ETA
    assert lines[-1].split("  ")[0].endswith("problem 12/12")


def test_a_phase_of_a_second_shows_nothing(slow_model, capsys):
    tasks = [SimpleNamespace(task_id=str(i)) for i in range(4)]
    _evaluate(tasks, EvalConfig(), lambda label, total: phase_progress(label, total, "problem"))
    assert "problem" not in capsys.readouterr().err


def test_the_same_count_is_never_printed_twice(capsys):
    bar = Progress(10, every_s=0.0)
    for done in (1, 1, 1, 2, 2):
        bar.update(done, loss=0.5)
    lines = capsys.readouterr().err.splitlines()
    assert [x.split()[2] for x in lines] == ["1/10", "2/10"]


def test_rates_below_one_per_second_read_in_seconds_per_unit():
    assert rate_text(12.094, "step") == "12.09 step/s"
    assert rate_text(0.004, "update") == "250.0 s/update"  # never "0.00 update/s"
    assert rate_text(0.0, "update") == "? update/s"


def test_evaluation_files_keep_the_first_completions_of_each_problem(slow_model):
    tasks = [SimpleNamespace(task_id=str(i)) for i in range(3)]
    out = _evaluate(tasks, EvalConfig(samples=4, ks="1,2", completions=3))
    row = out["per_problem"][1]
    assert [c["kind"] for c in row["completions"]] == ["greedy", "sample", "sample"]
    assert [c["text"] for c in row["completions"]] == ["problem 1 try0 ok", "problem 1 try0 ok", "problem 1 try1 no"]
    assert [c["reward"] for c in row["completions"]] == [1.0, 1.0, 0.0]
    assert row["c"] == 2 and row["greedy"] == 1.0
    none = _evaluate(tasks, EvalConfig(completions=0))
    assert "completions" not in none["per_problem"][0]


def test_a_stop_signal_ends_an_evaluation_after_its_current_call(slow_model, monkeypatch):
    tasks = [SimpleNamespace(task_id=str(i)) for i in range(20)]
    monkeypatch.setattr(session_mod, "_received", [])
    real = slow_model.calls

    def generate_then_signal(*a, **kw):
        session_mod._received.append(2)  # SIGINT arrives while the first call runs
        return fake(*a, **kw)

    fake = evaluation.generate
    monkeypatch.setattr(evaluation, "generate", generate_then_signal)
    with pytest.raises(StopRequested):
        _evaluate(tasks, EvalConfig())
    assert real == [2]  # one call of 2 prompts, not ten


def test_nested_bars_share_one_live_display(monkeypatch):
    """On a terminal the training bar and an evaluation's bar are tasks of one rich display (rich allows one)."""
    import sys

    from distlab.run import logs
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    train = Progress(5)
    shared = logs._BAR.rich
    with phase_progress("eval greedy", 8, "problem", quiet_s=0.0) as inner:
        inner.advance(3)
        assert logs._BAR.rich is shared and len(shared.tasks) == 2
    assert len(shared.tasks) == 1  # the phase's bar is gone, the training bar stays
    train.close()
    assert logs._BAR.rich is None and logs._BAR.open == 0
