"""Overlapped GRPO: rollouts sampled ``async.off_policy_steps`` (K) optimizer steps before the step that trains on them.

On one device the sampler and the trainer share the weights, so the overlap comes from ordering rather than from a
second copy: step k first samples the rollouts of step k + K with the weights it was handed (version k, before its
own update), submits their programs to the sandbox, and only then computes the reference pass and the update on the
batch sampled K steps ago. The sandbox's worker processes score batch k + K while step k updates and while step
k + 1 samples, which is the wait the synchronous loop spends idle (issue 49's profile: sandbox 4.3 s against 1.0 s
of update). The first K steps train on batches sampled by the starting weights (lag 0, 1, ..., K - 1); every later
batch is exactly K versions old, which each step logs (``policy_version``, ``policy_lag``).

Each batch keeps the log-probs of its sampled tokens under the weights that sampled it (the trainer's own forward on
the update's micro-batch layout, so a batch with no lag gets importance weights of exactly 1): the update multiplies
each token's policy-gradient term by ``min(pi_train / pi_behaviour, importance_sampling_cap)``
(:func:`~distlab.recipes.lm.pg.loss.truncated_importance_weight`). That corrects the policy's lag only; the
sampler's own numerics (a bf16 sampling copy) are not part of ``pi_behaviour``.

Checkpoints: the batches sampled ahead are saved with the step (per rank: their completions, their rewards, waited
for at the checkpoint, and their behaviour log-probs), so a resumed run trains on the very batches the uninterrupted
run would have and ends with the same weights. A resume on another world size, or from a checkpoint without them,
samples the missing batches afresh from the restored weights (those batches have lag 0; the prompts the lost
batches held are skipped, as the data sampler had already drawn them).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from typing import Any

import torch

# sample(step, version, times): the rollouts of ``step`` (its prompts drawn from the data sampler now), sampled by
# the current weights, which have taken ``version`` optimizer steps
Sample = Callable[[int, int, dict[str, float]], Any]
# resolve(rollouts): the same rollouts with every reward waited for (what a checkpoint can hold)
Resolve = Callable[[Any], Any]


class RolloutsAhead:
    """The batches sampled ahead of the step that trains on them, keyed by that step; tracked per rank."""

    def __init__(self, lag: int, last_step: int, sample: Sample, resolve: Resolve) -> None:
        if lag < 1:
            raise ValueError(f"off_policy_steps must be >= 1 to sample ahead, got {lag}")
        self.lag, self.last_step = lag, last_step
        self.sample, self.resolve = sample, resolve
        self.batches: dict[int, Any] = {}

    def start(self, step: int) -> None:
        """Before the first step this process trains (nothing to do: ``take`` samples what is missing)."""

    def after_update(self, step: int) -> dict[str, float]:
        """After step ``step``'s update; the metrics it adds to the step's (none: the sampling is the step's own)."""
        return {}

    def close(self) -> dict[str, Any]:
        """After the last step; what it adds to the run's summary (nothing)."""
        return {}

    def take(self, step: int, times: dict[str, float]) -> Any:
        """The rollouts ``step`` trains on: sampled K steps ago, or now when none were (the first step, a resume
        without them)."""
        batch = self.batches.pop(step, None)
        return batch if batch is not None else self.sample(step, step, times)

    def prefetch(self, step: int, times: dict[str, float]) -> None:
        """Sample the batches of steps ``step + 1 .. step + K`` not sampled yet, with the weights of version ``step``
        (call it before the step's update). In step order, so the data sampler hands each step its own prompts."""
        for ahead in range(step + 1, min(step + self.lag, self.last_step) + 1):
            if ahead not in self.batches:
                self.batches[ahead] = self.sample(ahead, step, times)

    def state_dict(self) -> dict[str, Any]:
        """The pending batches with their rewards waited for (a checkpoint cannot hold a running sandbox job)."""
        self.batches = {step: self.resolve(batch) for step, batch in self.batches.items()}
        return {"value": pickle.dumps({step: on_cpu(batch) for step, batch in self.batches.items()})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = pickle.loads(state["value"])


def on_cpu(batch: Any) -> Any:
    """A copy of ``batch`` (a dataclass) whose behaviour log-probs are on the CPU: a checkpoint is read on any
    device, and the update moves them back to its own."""
    if getattr(batch, "behaviour", None) is None:
        return batch
    return dataclasses.replace(batch, behaviour=[t.cpu() for t in batch.behaviour])
