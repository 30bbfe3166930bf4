"""A training set made of several task sources: ``task.train=mbpp+synthetic+mbpp:docstring``.

The mixture is one list of tasks, fixed by the config alone (``task.train_weights`` and ``task.seed``), never by the
rank or the number of ranks; the recipes' data sampler (:class:`~distlab.runtime.sampler.GlobalBatchSampler`)
then visits that list in a seeded order per epoch and hands every rank its slice of each global batch. So the
sources are interleaved at random but identically on 1, 2 or 8 ranks, and a resumed run continues the same order.

Proportions: without weights each source contributes its tasks once per epoch (sizes decide the shares). With
weights ``w_i`` an epoch keeps its length (the sources' sizes summed) and source ``i`` fills ``w_i / sum(w)`` of
it (largest remainders settle the rounding), taking its tasks in a seeded order of its own and starting that order
again only when all have been used: a small source is repeated, a large one subsampled, never a task twice within
an epoch while another of the same source is unused. The list is drawn once, so every epoch visits the same
subsample of a subsampled source (in a new order): to train on all of a large source, give it a weight that
keeps its share at its size or above.
"""

from __future__ import annotations

import math
import os

import numpy as np

from distlab.errors import DistlabError
from distlab.recipes.lm.tasks.task import Task

SEPARATOR = "+"
WEIGHTS_KEY = "task.train_weights"


def names_mixture(spec: str) -> bool:
    """Whether ``spec`` joins several sources. A path that exists is one source even when it holds a ``+`` (a
    ``c++/`` folder, or a notebook's ``tasks=`` file written under one)."""
    return SEPARATOR in str(spec) and not os.path.exists(str(spec))


def mixture_sources(spec: str) -> list[str]:
    """The sources a ``task.train`` value names: one, or several joined by ``+``; each at most once."""
    if not names_mixture(spec):
        return [str(spec)]
    parts = [p.strip() for p in str(spec).split(SEPARATOR)]
    if any(not p for p in parts):
        raise DistlabError(f"task.train={spec!r} has an empty part; join sources with one '+', e.g. "
                           f"mbpp+synthetic+mbpp:docstring")
    repeated = sorted({p for p in parts if parts.count(p) > 1})
    if repeated:
        raise DistlabError(f"task.train={spec!r} names {repeated[0]!r} twice; give each source once and set its share "
                           f"with {WEIGHTS_KEY}")
    return parts


def mixture_weights(spec: str, sources: list[str]) -> list[float] | None:
    """``task.train_weights`` as numbers, one per source, or ``None`` when unset (each task once an epoch)."""
    if not str(spec).strip():
        return None
    try:
        weights = [float(w) for w in str(spec).split(",")]
    except ValueError:
        raise DistlabError(f"{WEIGHTS_KEY}={spec!r} is not a comma-separated list of numbers, e.g. 2,1,1") from None
    if len(weights) != len(sources):
        raise DistlabError(f"{WEIGHTS_KEY}={spec!r} gives {len(weights)} weight(s) for {len(sources)} source(s) of "
                           f"task.train ({' + '.join(sources)}); give one per source")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise DistlabError(f"{WEIGHTS_KEY}={spec!r}: every weight must be a finite number above 0 (leave a source out "
                           f"of task.train instead of weighting it 0)")
    return weights


def shares(sizes: list[int], weights: list[float]) -> list[int]:
    """Tasks each source fills in an epoch of ``sum(sizes)``: proportional to ``weights``, summing exactly, at
    least one each (largest remainders)."""
    total, wsum = sum(sizes), sum(weights)
    exact = [total * w / wsum for w in weights]
    counts = [max(1, math.floor(x)) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[:max(0, total - sum(counts))]:
        counts[i] += 1
    return counts


def mix_tasks(parts: list[list[Task]], weights: list[float] | None, seed: int) -> list[Task]:
    """One list of the sources' tasks in the proportions above, source after source (the sampler shuffles)."""
    if weights is None:
        return [t for part in parts for t in part]
    mixed: list[Task] = []
    for i, (part, count) in enumerate(zip(parts, shares([len(p) for p in parts], weights))):
        order = np.random.default_rng([seed, i]).permutation(len(part))
        mixed += [part[int(order[k % len(part)])] for k in range(count)]
    return mixed
