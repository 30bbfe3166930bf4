"""The step loop: one step, its metrics, progress, evaluations, then stop or checkpoint.

``after_step`` is what follows a step in every recipe (the periodic evaluation, then ``Session.end_step``);
``run_steps`` is the whole loop of the LM recipes, whose own algorithm is their ``one_step``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from distlab.training.amp import MixedPrecision
from distlab.training.checkpoint import Box
from distlab.training.session import StopRequested

log = logging.getLogger("distlab")

SKIPPED = "skipped_steps"  # steps whose update was skipped for an inf/NaN gradient norm, since the run began


def count_skipped_steps(session) -> None:
    """Before ``session.restore()``: keep the skipped-step count in the checkpoint's counters, so a resumed run
    goes on counting in every precision (only fp16's loss-scale state carried it before)."""
    session.counters.setdefault(SKIPPED, 0)


def skipped_fields(meta: dict) -> dict[str, int]:
    """``skipped_steps`` and ``updates`` (steps less skipped ones) of a checkpoint's meta, for an evaluation's
    results: two arms compared on their checkpoints should have made the same number of updates. Empty for a
    checkpoint written before the count was kept."""
    if SKIPPED not in meta:
        return {}
    return {SKIPPED: int(meta[SKIPPED]), "updates": int(meta["step"]) - int(meta[SKIPPED])}


def run_steps(session, cfg, step: int, one_step: Callable[[int], dict], evaluate: Callable[[int, str], dict],
              shown: tuple[str, ...], examples_per_step: int = 0, start_eval: Box | None = None
              ) -> tuple[str, int, dict]:
    """Steps from ``step`` to ``cfg.steps``; returns ``(status, last step, last step's metrics)``.

    ``one_step(step)`` trains and returns the step's metrics (identical on every rank); ``evaluate``
    runs every ``evaluation.eval_interval_steps``, and first, into ``start_eval``, on the starting model
    (``evaluation.before``, at step 0); ``shown`` names the metrics on the progress line.
    A stop signal ends with ``status="preempted"``, also one that cuts an evaluation short (the last finished step
    is saved; nothing is, before the first); ``run.time_limit_s`` ends early but ``completed``.
    Every step's metrics carry ``skipped_steps``, the run's running count of updates skipped for an inf/NaN
    gradient (0 included, in every precision), so a table of results can say how many updates a run made.
    ``examples_per_step`` (the whole job's completions a step) adds ``examples_per_s`` over each log window, the
    rate ``distlab bench scaling`` reads; evaluations fall outside the windows.
    """
    if start_eval is not None and step == 0 and cfg.evaluation.before:
        try:
            start_eval.value = evaluate(step, "eval_start")
        except StopRequested:
            _stopped_in(session, "eval_start", step)
            return "preempted", step, {}
    progress = session.progress(cfg.steps, step)
    steps, status, last = cfg.steps, "completed", {}
    every = cfg.evaluation.eval_interval_steps
    amp = MixedPrecision.of(session)
    amp.skipped_steps = max(amp.skipped_steps, int(session.counters.get(SKIPPED, 0)))
    meter = session.throughput()
    with progress:
        while step < steps:
            last = one_step(step)
            last[SKIPPED] = session.counters[SKIPPED] = amp.skipped_steps
            step += 1
            meter.add(examples_per_step)
            if step % cfg.log.every == 0 or step == steps:
                session.metrics.log(step, {**last, **meter.report()} if examples_per_step else last)
            progress.update(step, **{k: last[k] for k in shown})
            stopped, steps = after_step(session, step, steps, lambda at: _evaluated(session, evaluate, at, meter),
                                        every)
            if stopped:
                status = "preempted"
                break
    if status == "completed" and step < cfg.steps:
        log.warning("run.time_limit_s ended training at step %d of steps=%d: runs compared on their updates (an arm "
                    "and its control) must reach the same steps; run the same command again to go on", step, cfg.steps)
    return status, step, last


def after_step(session, step: int, steps: int, evaluate: Callable[[int], object] | None = None, every: int = 0,
               last_too: bool = False) -> tuple[bool, int]:
    """What follows a training step in every recipe: the evaluation every ``every`` steps (at the last step too only
    with ``last_too``: recipes whose final evaluation is its own call leave it out), then ``Session.end_step``
    (checkpoint, stop signal, ``run.time_limit_s``). Returns ``(stopped, steps)``: ``steps`` as ``end_step`` may
    have lowered it; ``stopped`` also when ``evaluate`` returned False (a stop signal cut it short)."""
    if evaluate is not None and every and step % every == 0 and (last_too or step < steps):
        if evaluate(step) is False:
            return True, steps
    return session.end_step(step, steps)


def _evaluated(session, evaluate: Callable[[int, str], dict], step: int, meter) -> bool:
    """A mid-run evaluation; False when a stop signal cut it short, after saving ``step`` (just trained)."""
    try:
        evaluate(step, "eval")
    except StopRequested:
        _stopped_in(session, "eval", step)
        return False
    meter.report()  # the evaluation's time is not the training's rate
    return True


def final_evaluation(session, status: str, step: int, evaluate: Callable[[int, str], dict]) -> tuple[str, dict | None]:
    """``(status, metrics)`` of the evaluation after training, run only when it ``completed``. A stop signal during
    it makes the run ``preempted`` with its last step saved, so the same command resumes straight into it."""
    if status != "completed":
        return status, None
    try:
        return status, evaluate(step, "eval")
    except StopRequested:
        _stopped_in(session, "eval", step)
        return "preempted", None


def _stopped_in(session, split: str, step: int) -> None:
    """Save ``step`` unless it is saved or nothing is trained yet, and say in the summary (and so in the closing
    line) which evaluation the stop cut short."""
    if step > 0 and session.saved_step != step:
        session.checkpoint(step, last=True)
    session.stopped_in = f"{split} at step {step}"
    log.warning("stopped during %s at step %d: %s", split, step,
                "checkpoint of that step saved" if step > 0 else "nothing trained yet, so nothing to save")


def run_fields(cfg, status: str, step: int) -> dict:
    """The summary's ``steps`` (as asked) and ``time_limited``: a run that ``run.time_limit_s`` ended before
    ``steps`` says so (and the closing report reads "step 57 of 400"), since two arms matched on wall time are not
    matched on updates; with ``steps=N`` the time limit is only a guard."""
    return {"steps": cfg.steps, "time_limited": status == "completed" and step < cfg.steps}
