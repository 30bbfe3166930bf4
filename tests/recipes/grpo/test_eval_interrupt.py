"""Ctrl-C during an evaluation, with a real ``distlab train grpo`` process on the CPU: the evaluation shows its
progress, the run stops within seconds (not after the evaluation and one more step), the step it finished is
saved, the closing line says where it stopped, and the same command resumes from that step."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clitools import run_cli  # noqa: E402

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
        "micro_batch_size=4", "sampling.max_completion_length=64", "task.train_size=32", "task.families=add_const",
        "task.eval_families=add_const", "task.eval_split=train", "sft_steps=2", "lr=1e-3", "sandbox.timeout_s=3",
        "steps=3", "run.name=cut"]
# an evaluation after every step, long enough to be interrupted: one problem per generate call
SLOW_EVAL = ["evaluation.before=false", "evaluation.eval_interval_steps=1", "task.eval_size=600",
             "sampling.chunk_prompts=1"]


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _wait_for(lines: queue.Queue, text: str, timeout: float, seen: list[str]) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            return False
        seen.append(line)
        if text in line:
            return True
    return False


def test_ctrl_c_during_an_evaluation_stops_within_seconds_with_the_finished_step_saved(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "distlab.cli", "train", "grpo", *TINY, *SLOW_EVAL], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # its own process group, as a terminal's foreground job
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        # the evaluation after step 1 shows its count, rate and ETA while it runs
        assert _wait_for(lines, "eval greedy: problem", 240, seen), "".join(seen)
        progress = seen[-1]
        assert "/600" in progress and "problem/s" in progress and "eta " in progress
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does
        t0 = time.monotonic()
        rc = proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    while (line := lines.get(timeout=10)) is not None:
        seen.append(line)
    out = "".join(seen)
    assert rc == 128 + signal.SIGINT, out
    assert took < 20, f"took {took:.1f}s to stop"  # one generate call and a checkpoint, not 600 problems
    run = tmp_path / "runs" / "cut"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "preempted" and summary["step"] == 1 and summary["steps"] == 3
    assert summary["stopped_in"] == "eval at step 1" and summary["stopped_by"] == "SIGINT"
    assert [d.name for d in (run / "checkpoints").glob("step*")] == ["step00000001"]
    assert "run cut preempted: step 1 of 3" in out and "(stopped during eval at step 1)" in out
    assert "step 2/3" not in out  # no step after the interrupted evaluation
    assert not list(run.glob("eval_step*_problems.json"))  # a cut evaluation writes no results
    # the same command, evaluating less, goes on from the saved step
    run_cli(["train", "grpo", *TINY, "evaluation.before=false", "task.eval_size=4", "log.progress=false"], tmp_path)
    done = json.loads((run / "summary.json").read_text())
    assert done["status"] == "completed" and done["step"] == 3
    assert "resumed from" in (run / "train.log").read_text()


class _Loop:
    """What the LM step loop needs of a session, recording the checkpoints it asks for."""

    def __init__(self, saved_step=None):
        from distlab.run.logs import Progress

        self.saved: list[int] = []
        self.saved_step, self.stopped_in, self.counters = saved_step, None, {}
        self.metrics = type("M", (), {"log": lambda *a, **k: None})()
        self._progress = Progress

    def progress(self, total, start=0, unit="step"):
        return self._progress(total, start, enabled=False)

    def throughput(self):
        return type("T", (), {"add": lambda *a: None, "report": lambda *a: {}})()

    def checkpoint(self, step, last=False):
        self.saved.append(step)
        self.saved_step = step
        return True

    def end_step(self, step, steps):
        return False, steps


def _cfg(steps=3, every=0, before=True):
    from types import SimpleNamespace

    return SimpleNamespace(steps=steps, log=SimpleNamespace(every=1),
                           evaluation=SimpleNamespace(eval_interval_steps=every, before=before))


def _stopping_at(split_to_stop):
    from distlab.training.session import StopRequested

    def evaluate(step, split):
        if (split, step) == split_to_stop:
            raise StopRequested("signal")
        return {"metrics": {}, "per_problem": []}
    return evaluate


@pytest.mark.parametrize("where, status, step, saved, stopped_in", [
    (("eval_start", 0), "preempted", 0, [], "eval_start at step 0"),  # nothing trained: nothing saved
    (("eval", 2), "preempted", 2, [2], "eval at step 2"),  # the step just trained is saved
    (("none", 0), "completed", 3, [], None),
])
def test_the_step_loop_ends_preempted_where_an_evaluation_was_cut(monkeypatch, where, status, step, saved,
                                                                   stopped_in):
    from distlab.training.checkpoint import Box
    from distlab.training import loop
    monkeypatch.setattr(loop.MixedPrecision, "of", staticmethod(lambda s: type("A", (), {"skipped_steps": 0})()))
    session = _Loop()
    ran: list[int] = []
    result = loop.run_steps(session, _cfg(every=2), 0, lambda s: ran.append(s) or {}, _stopping_at(where), (),
                            start_eval=Box())
    assert result[:2] == (status, step) and session.saved == saved and session.stopped_in == stopped_in
    assert len(ran) == step  # no step after the cut evaluation


def test_a_stop_during_the_final_evaluation_saves_the_last_step_once():
    from distlab.training import loop
    at_end = _Loop(saved_step=3)  # ckpt.at_end saved step 3 already
    assert loop.final_evaluation(at_end, "completed", 3, _stopping_at(("eval", 3))) == ("preempted", None)
    assert at_end.saved == [] and at_end.stopped_in == "eval at step 3"
    unsaved = _Loop()  # ckpt.at_end=false: the stop saves it, so the same command resumes into the evaluation
    assert loop.final_evaluation(unsaved, "completed", 3, _stopping_at(("eval", 3)))[0] == "preempted"
    assert unsaved.saved == [3]
    assert loop.final_evaluation(_Loop(), "preempted", 2, _stopping_at(("eval", 2))) == ("preempted", None)
