"""What one epoch visits: every example once, or every group once through one random member.

Augmented datasets store many variants of one original item (a group); counting every stored
variant as part of an epoch makes an epoch ``num_aug`` times longer than the item count that
training budgets are written in. :class:`ExampleGroups` describes the grouping generically, as two
levels of contiguous offsets (groups of members, members of examples), so the sampler can visit
each group once per epoch through one member drawn at random, with all of that member's examples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distlab.errors import DistlabError


def _check_offsets(offsets: np.ndarray, end: int, what: str, of: str) -> None:
    if offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != end or np.any(np.diff(offsets) < 1):
        raise DistlabError(f"{what} offsets must start at 0, grow strictly and end at the number of {of} ({end}); "
                           "rebuild the dataset")


@dataclass(frozen=True)
class ExampleGroups:
    """Group ``g`` holds members ``group_offsets[g]:group_offsets[g+1]``; member ``m`` holds examples
    ``member_offsets[m]:member_offsets[m+1]``. A member is the unit drawn (e.g. one augmented puzzle)."""

    group_offsets: np.ndarray
    member_offsets: np.ndarray

    def __post_init__(self) -> None:
        g = np.asarray(self.group_offsets, dtype=np.int64)
        m = np.asarray(self.member_offsets, dtype=np.int64)
        _check_offsets(m, int(m[-1]) if len(m) else 0, "member", "examples")
        _check_offsets(g, len(m) - 1, "group", "members")
        object.__setattr__(self, "group_offsets", g)
        object.__setattr__(self, "member_offsets", m)
        sizes = np.diff(m)  # computed once: the sampler asks for every batch
        fixed = (len(g) - 1) * int(sizes[0]) if np.all(sizes == sizes[0]) else None
        object.__setattr__(self, "_fixed_epoch_length", fixed)

    @classmethod
    def one_example_members(cls, group_offsets: np.ndarray) -> ExampleGroups:
        """Groups of single examples (``group_offsets`` index examples directly)."""
        g = np.asarray(group_offsets, dtype=np.int64)
        return cls(g, np.arange(int(g[-1]) + 1, dtype=np.int64))

    @property
    def num_groups(self) -> int:
        return len(self.group_offsets) - 1

    @property
    def num_examples(self) -> int:
        return int(self.member_offsets[-1])

    @property
    def fixed_epoch_length(self) -> int | None:
        """Examples per epoch when every member has the same size (else epochs differ in length)."""
        return self._fixed_epoch_length

    def epoch(self, seed: int, epoch: int) -> np.ndarray:
        """Example indices of one epoch: groups in a seeded random order, one uniformly drawn member
        each, that member's examples in random order (HRM's ``puzzle_dataset._sample_batch``)."""
        rng = np.random.default_rng([seed, epoch])
        order = rng.permutation(self.num_groups)
        member = rng.integers(self.group_offsets[order], self.group_offsets[order + 1])
        starts = self.member_offsets[member]
        sizes = self.member_offsets[member + 1] - starts
        if np.all(sizes == 1):
            return starts
        slot = np.repeat(np.arange(len(sizes)), sizes)
        first = np.repeat(np.cumsum(sizes) - sizes, sizes)
        within = np.arange(len(slot)) - first
        shuffled = np.lexsort((rng.random(len(slot)), slot))  # random order inside each member's block
        return np.repeat(starts, sizes) + within[shuffled]


def example_epoch(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    """Every example once, in a seeded random order."""
    return np.random.default_rng([seed, epoch]).permutation(num_examples)
