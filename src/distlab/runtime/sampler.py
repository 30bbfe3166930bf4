"""Data order that does not depend on the number of ranks.

The training stream is a concatenation of per-epoch orders derived from the seed. Global batch
``s`` is always the same slice of that stream; a rank only decides which part of the slice it
takes. So 1, 2 or 8 ranks see the same global batches, and a resumed run (on any world size) picks
up at the saved position in the stream.

An epoch visits every example once, or, given :class:`~distlab.runtime.epoch_order.ExampleGroups`, every
group once through one random member (what "epoch" means for augmented puzzle datasets).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from distlab.errors import DistlabError
from distlab.runtime.epoch_order import ExampleGroups, example_epoch

#: ``state_dict()["order"]`` of each epoch kind; checkpoints written before grouping existed have none
ORDER_EXAMPLES, ORDER_GROUPS = "examples", "groups"


def check_divisible(global_batch: int, world_size: int, grad_accum: int = 1) -> int:
    """Per-rank micro-batch size, or a one-line error naming valid batch sizes."""
    denom = world_size * grad_accum
    if global_batch <= 0 or global_batch % denom:
        lo = max(denom, global_batch // denom * denom)
        raise DistlabError(f"global batch {global_batch} is not divisible by world size {world_size} x grad_accum "
                           f"{grad_accum}; use e.g. {lo} or {lo + denom}")
    return global_batch // denom


@dataclass
class GlobalBatchSampler:
    """Yields this rank's example indices for each global batch; ``position`` is resumable.

    With ``groups`` an epoch visits each group once (one member drawn at random); epochs may then
    differ in length, so the sampler keeps a cursor (the epoch holding ``position`` and where it
    starts) and saves it with the position.
    """

    num_examples: int
    global_batch: int
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    position: int = 0  # examples of the global stream already consumed
    groups: ExampleGroups | None = None

    def __post_init__(self) -> None:
        if self.num_examples <= 0:
            raise DistlabError("the training set is empty; build the dataset first")
        if self.groups is not None and self.groups.num_examples != self.num_examples:
            raise DistlabError(f"the groups cover {self.groups.num_examples} examples but the dataset has "
                               f"{self.num_examples}; rebuild the dataset")
        self.local_batch = check_divisible(self.global_batch, self.world_size)
        self._cache: tuple[int, np.ndarray] | None = None
        self._cursor = (0, 0)  # (epoch, its first stream position), valid for variable-length epochs

    @property
    def order(self) -> str:
        return ORDER_EXAMPLES if self.groups is None else ORDER_GROUPS

    @property
    def _fixed_length(self) -> int | None:
        return self.num_examples if self.groups is None else self.groups.fixed_epoch_length

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if self._cache is None or self._cache[0] != epoch:
            order = (example_epoch(self.num_examples, self.seed, epoch) if self.groups is None
                     else self.groups.epoch(self.seed, epoch))
            self._cache = (epoch, order)
        return self._cache[1]

    def _locate(self, pos: int) -> tuple[int, int]:
        """``(epoch, first stream position of that epoch)`` for stream position ``pos``."""
        length = self._fixed_length
        if length is not None:
            return pos // length, pos // length * length
        epoch, start = self._cursor if pos >= self._cursor[1] else (0, 0)
        while pos >= start + len(self._epoch_order(epoch)):
            start += len(self._epoch_order(epoch))
            epoch += 1
        self._cursor = (epoch, start)
        return epoch, start

    def stream(self, start: int, count: int) -> np.ndarray:
        """``count`` indices of the global stream from ``start`` (crossing epochs as needed)."""
        out = np.empty(count, dtype=np.int64)
        filled = 0
        while filled < count:
            epoch, epoch_start = self._locate(start + filled)
            order = self._epoch_order(epoch)
            offset = start + filled - epoch_start
            take = min(count - filled, len(order) - offset)
            out[filled:filled + take] = order[offset:offset + take]
            filled += take
        return out

    def global_batch_indices(self) -> np.ndarray:
        return self.stream(self.position, self.global_batch)

    def next(self) -> np.ndarray:
        """This rank's slice of the next global batch; advances the position."""
        batch = self.global_batch_indices()
        self.position += self.global_batch
        return batch[self.rank * self.local_batch:(self.rank + 1) * self.local_batch]

    def last_batch_digest(self) -> str:
        """A short digest of the global batch handed out last ("" before the first): two runs whose digests agree
        step by step trained on the same batches, whatever their numerics (GPU runs differ in the last bits from
        run to run, so a resumed run's loss or weights alone cannot show that it replayed the data in order)."""
        if self.position < self.global_batch:
            return ""
        return f"{zlib.crc32(self.stream(self.position - self.global_batch, self.global_batch).tobytes()):08x}"

    def __iter__(self) -> Iterator[np.ndarray]:
        while True:
            yield self.next()

    @property
    def epoch(self) -> float:
        """Epochs completed, fractional: ``position`` in units of the epoch it falls in."""
        epoch, start = self._locate(self.position)
        return epoch + (self.position - start) / len(self._epoch_order(epoch))

    def state_dict(self) -> dict:
        epoch, start = self._locate(self.position)
        return {"position": self.position, "seed": self.seed, "num_examples": self.num_examples,
                "order": self.order, "num_groups": 0 if self.groups is None else self.groups.num_groups,
                "epoch": epoch, "epoch_start": start}

    def load_state_dict(self, state: dict) -> None:
        if state["num_examples"] != self.num_examples:
            raise DistlabError(f"checkpoint was made on a dataset of {state['num_examples']} examples, this one has "
                               f"{self.num_examples}; point data.path at the original dataset")
        saved = state.get("order", ORDER_EXAMPLES)  # checkpoints from before grouped epochs: per-example order
        if saved != self.order:
            raise DistlabError(f"checkpoint's data order visits {saved} per epoch, this run visits {self.order}; "
                               f"resume with the same setting (e.g. sampling={saved}) or start fresh "
                               "(run.resume=fresh)")
        if self.groups is not None and state.get("num_groups") != self.groups.num_groups:
            raise DistlabError(f"checkpoint was made on a dataset of {state.get('num_groups')} groups, this one has "
                               f"{self.groups.num_groups}; point data.path at the original dataset")
        self.position = int(state["position"])
        self.seed = int(state["seed"])
        self._cache = None
        self._cursor = (int(state.get("epoch", 0)), int(state.get("epoch_start", 0)))
        if self._cursor[1] > self.position:
            self._cursor = (0, 0)


@dataclass
class EvalShard:
    """One rank's evaluation batches: ``indices`` padded to a common batch count, ``mask`` marks real rows."""

    indices: list[np.ndarray]
    masks: list[np.ndarray]


def eval_shard(num_examples: int, local_batch: int, rank: int, world_size: int) -> EvalShard:
    """Every example exactly once across ranks; all ranks run the same number of batches.

    Equal batch counts keep collectives inside the model (DDP, FSDP) in step; padded rows repeat a
    real index so shapes are static, and their mask is False so they are never counted.
    """
    per_rank = math.ceil(num_examples / world_size)
    lo, hi = min(rank * per_rank, num_examples), min((rank + 1) * per_rank, num_examples)
    n_batches = max(1, math.ceil(per_rank / local_batch))
    idx, masks = [], []
    for b in range(n_batches):
        real = np.arange(lo + b * local_batch, min(hi, lo + (b + 1) * local_batch), dtype=np.int64)
        pad = local_batch - len(real)
        fill = real[-1] if len(real) else 0
        idx.append(np.concatenate([real, np.full(pad, fill, dtype=np.int64)]))
        masks.append(np.concatenate([np.ones(len(real), bool), np.zeros(pad, bool)]))
    return EvalShard(idx, masks)
