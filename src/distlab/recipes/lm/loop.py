"""The step loop every LM recipe runs: one step, its metrics, progress, evaluations, then stop or checkpoint.

A recipe's own algorithm is its ``one_step``; what happens between steps is the same for all of them,
so it lives here once.
"""

from __future__ import annotations

from collections.abc import Callable


def run_steps(session, cfg, step: int, one_step: Callable[[int], dict], evaluate: Callable[[int, str], dict],
              shown: tuple[str, ...]) -> tuple[str, int, dict]:
    """Steps from ``step`` to ``cfg.steps``; returns ``(status, last step, last step's metrics)``.

    ``one_step(step)`` trains and returns the step's metrics (identical on every rank); ``evaluate``
    runs every ``evaluation.eval_interval_steps``; ``shown`` names the metrics on the progress line.
    A stop signal ends with ``status="preempted"``; ``run.time_limit_s`` ends early but ``completed``.
    """
    progress = session.progress(cfg.steps, step)
    steps, status, last = cfg.steps, "completed", {}
    every = cfg.evaluation.eval_interval_steps
    while step < steps:
        last = one_step(step)
        step += 1
        if step % cfg.log.every == 0 or step == steps:
            session.metrics.log(step, last)
        progress.update(step, **{k: last[k] for k in shown})
        if every and step % every == 0 and step < steps:
            evaluate(step, "eval")
        stop, steps = session.end_step(step, steps)
        if stop:
            status = "preempted"
            break
    progress.close()
    return status, step, last
