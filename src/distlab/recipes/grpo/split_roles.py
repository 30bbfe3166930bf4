"""Overlapped GRPO with rollout and trainer ranks split: ``async.rollout_ranks=R`` (with ``async.off_policy_steps=K``).

The job's last R ranks only sample: they generate the rollouts of step k + K and score them in their sandboxes while
the first W - R ranks update step k. The trainers form a group of their own (:meth:`Runtime.subgroup`): DDP or FSDP2,
the step's global token counts, the metrics, the evaluations and the checkpoints agree among them only, so each
update is the one W - R ranks would make if they sampled for themselves. Trainer j's share of a step's prompts (the
data sampler's slice j of W - R) is sampled by rollout rank j mod R with trainer j's rollout seed.

Trainer 0 and the rollout ranks meet once per step, after the update (a *round*): trainer 0 broadcasts what to do
(which batches to hand over, which steps to sample next and where their prompts start in the data stream); each
rollout rank sends each of its trainers that trainer's share of step k + K, which it sampled during the update
(point-to-point, the pickled batch: completions, rewards already waited for, behaviour log-probs); then trainer 0
broadcasts the parameters that train (gathered whole under FSDP2) and the rollout ranks sample step k + 1 + K with
them. Batch k + K is sampled by the weights after k updates, so the lag is K, as when every rank samples for itself
(:mod:`.off_policy`): the first K batches are sampled by the starting weights, later ones K versions back. Each step
logs ``policy_version`` and ``policy_lag``, ``batch_wait_s`` (how long the trainers waited at the round for their
batch: sampling and scoring slower than the update) and ``weight_sync_s`` (handing over the weights).

The behaviour log-probs are taken on the rollout rank, by the weights that sampled the batch, on the update's
micro-batch layout (``sample_ahead``, as when a rank samples ahead for itself), so the truncated importance weight is
computed by the same code on the same numbers.

Checkpoints: only the trainers hold state. Each saves the batches it received and has not trained on yet (steps
k + 1 .. k + K after step k) and the stream positions of the batches asked for and not received (step k + 1 + K).
A resumed run hands the restored weights to the rollout ranks and asks them for those same prompts again: they are
sampled by the weights that sampled them before, so the run ends on the uninterrupted run's weights. A resume on
another number of trainers, or from a checkpoint without them (written by every rank sampling for itself), samples
the missing batches afresh from the restored weights (lag 0 .. K - 1; the prompts the lost batches held are skipped,
as the data sampler had already drawn them). A batch a rollout rank was sampling when the run stopped is dropped.

While the trainers restore, warm up, evaluate or save, the rollout ranks wait for the next round: the group of
trainer 0 and the rollout ranks waits up to :data:`ROUND_WAIT_S`, not ``dist.timeout_s`` (an evaluation may take
longer than the trainers' collectives may); a trainer that fails closes its connections, which ends the wait at once.
The trainers stop the rollout ranks after the final evaluation.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from distlab.recipes.grpo.config import GRPOConfig
from distlab.recipes.grpo.off_policy import on_cpu
from distlab.recipes.grpo.train import Parts, Rollouts, build_parts, resolved, sample_ahead
from distlab.recipes.grpo.train import train as train_grpo
from distlab.recipes.lm.models.placed import SamplingCopy, load_placed
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.rollout.seeds import rollout_seed
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.select import task_split
from distlab.run.profiling import phase_time
from distlab.runtime.dist import Runtime, full_tensor, module_checksum
from distlab.runtime.sampler import GlobalBatchSampler
from distlab.training.placement import DTYPES
from distlab.training.wrap import unwrap


ROUND_WAIT_S = 24 * 3600.0  # how long a rollout rank waits for the trainers' next round


@dataclass
class Roles:
    """This rank's place in a job split into trainer ranks (the first ``trainers``) and rollout ranks (the rest)."""

    world: Runtime  # the whole job: batches travel over it, rank to rank
    trainers: int
    rt: Runtime  # this rank's own: the trainers' group, or a rollout rank alone
    sync: Runtime | None  # trainer 0 (its rank 0) and the rollout ranks; None on the other trainers

    @property
    def samples(self) -> bool:
        return self.world.rank >= self.trainers

    def sampler_of(self, trainer: int) -> int:
        """The job rank that samples trainer ``trainer``'s share of every step."""
        return self.trainers + trainer % (self.world.world_size - self.trainers)

    def shares(self) -> list[int]:
        """The trainers whose shares this rollout rank samples."""
        return [j for j in range(self.trainers) if self.sampler_of(j) == self.world.rank]


def split_roles(rollout_ranks: int, world: Runtime) -> Roles:
    """The roles of a job whose last ``rollout_ranks`` ranks sample. Collective: every rank builds both groups."""
    trainers = world.world_size - rollout_ranks
    group = world.subgroup(list(range(trainers)))
    sync = world.subgroup([0, *range(trainers, world.world_size)], timeout_s=ROUND_WAIT_S)
    return Roles(world, trainers, group if group is not None else world.alone(), sync)


def train_split(cfg: GRPOConfig, session) -> dict:
    """The run with ``async.rollout_ranks`` set: a trainer's (train.py's loop fed by the rollout ranks) or a
    rollout rank's (:func:`serve_rollouts`). Each side's collectives run inside its own group until both return."""
    roles = split_roles(cfg.async_.rollout_ranks, session.rt)
    with session.narrowed(roles.rt):
        if roles.samples:
            return serve_rollouts(cfg, session, roles)
        return train_grpo(cfg, session, feed=lambda data, policy: RolloutFeed(
            roles, cfg.async_.off_policy_steps, cfg.steps - 1, data, policy))


# ---------------------------------------------------------------------------------------------- trainer side


class RolloutFeed:
    """A trainer's batches, sampled by the rollout ranks, keyed by the step that trains on them; the interface of
    :class:`~distlab.recipes.grpo.off_policy.RolloutsAhead`, tracked per rank. Every trainer runs the same rounds
    (they decide the same steps and positions); only trainer 0 talks to the rollout ranks as a group."""

    def __init__(self, roles: Roles, lag: int, last_step: int, data: GlobalBatchSampler, policy: nn.Module) -> None:
        self.roles, self.lag, self.last_step, self.data, self.policy = roles, lag, last_step, data, policy
        self.batches: dict[int, Rollouts] = {}  # received, not trained on yet
        self.asked: dict[int, int] = {}  # step -> stream position of its prompts: asked for, not received yet
        self.missing: list[int] = []  # asked for at the start, received at the first take
        self.waited = {"batch_wait_s": 0.0, "weight_sync_s": 0.0}

    def start(self, step: int) -> None:
        """Hand the starting weights to the rollout ranks and ask for the batches that are missing (all of the first
        K on a fresh run; none on an exact resume, which asks for step + K): they sample while this rank evaluates."""
        self.missing = [t for t in range(step, min(step + self.lag, self.last_step + 1)) if t not in self.batches]
        self._round(step, deliver=[], sample=self.missing or self._upto(step + self.lag))

    def take(self, step: int, times: dict[str, float]) -> Rollouts:
        if self.missing:  # the first batches: then step + K is sampled, still by the starting weights
            self._round(step, deliver=self.missing, sample=self._upto(step + self.lag), weights=False)
            self.missing = []
        return self.batches.pop(step)

    def prefetch(self, step: int, times: dict[str, float]) -> None:
        """Nothing: the rollout ranks sample ahead, with the weights each round hands them."""

    def after_update(self, step: int) -> dict[str, float]:
        """The round after step ``step``'s update: receive batch step + K, hand over the new weights, ask for step
        + K + 1. Returns the step's wait times, averaged over the trainers."""
        self._round(step + 1, deliver=self._upto(step + self.lag), sample=self._upto(step + 1 + self.lag))
        waited, self.waited = self.waited, dict.fromkeys(self.waited, 0.0)
        rt = self.roles.rt
        return {k: v / rt.world_size for k, v in rt.reduce_sums(waited).items()}

    def close(self) -> dict[str, Any]:
        """Stop the rollout ranks. Trainer 0's summary gets their weights' checksums: the last round handed them the
        trained weights, so each equals the summary's ``param_checksum``."""
        ended: dict[str, Any] = {"rollout_ranks": self.roles.world.world_size - self.roles.trainers}
        if self.roles.sync is not None:
            self.roles.sync.barrier("rollout round")
            self.roles.sync.broadcast_object({"stop": True}, src=0)
            ended["rollout_param_checksums"] = self.roles.sync.all_gather_object(None)[1:]
        return ended

    def _upto(self, step: int) -> list[int]:
        return [step] if step <= self.last_step else []

    def _round(self, version: int, deliver: list[int], sample: list[int], weights: bool = True) -> None:
        t0 = phase_time()
        for t in sample:
            if t not in self.asked:  # a resumed run asks again for the prompts it asked for before
                self.asked[t] = self.data.position
                self.data.position += self.data.global_batch
        todo = {"stop": False, "version": version, "deliver": deliver, "weights": weights,
                "sample": [(t, self.asked[t]) for t in sample]}
        if self.roles.sync is not None:
            self.roles.sync.barrier("rollout round")
            self.roles.sync.broadcast_object(todo, src=0)
        for t in deliver:
            self.batches[t] = self.roles.world.recv_object(self.roles.sampler_of(self.roles.rt.rank))
            del self.asked[t]
        t1 = phase_time()
        self.waited["batch_wait_s"] += t1 - t0
        if weights:
            send_weights(self.roles.sync, self.policy)
            self.waited["weight_sync_s"] += phase_time() - t1

    def state_dict(self) -> dict[str, Any]:
        return {"value": pickle.dumps({"batches": self.batches, "asked": self.asked})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = pickle.loads(state["value"])
        self.batches, self.asked = saved["batches"], saved["asked"]


def trained_parameters(policy: nn.Module) -> list[torch.Tensor]:
    """The parameters that train, in the model's order (the same on every rank: each built the same model)."""
    return [p for p in unwrap(policy).parameters() if p.requires_grad]


@torch.no_grad()
def send_weights(sync: Runtime | None, policy: nn.Module) -> None:
    """Every trainer calls it (under FSDP2 gathering a parameter whole is a collective of the trainers); trainer 0
    broadcasts each to the rollout ranks."""
    for p in trained_parameters(policy):
        whole = full_tensor(p.detach())
        if sync is not None:
            sync.broadcast_(whole, src=0)


@torch.no_grad()
def receive_weights(sync: Runtime, policy: nn.Module) -> None:
    for p in trained_parameters(policy):
        sync.broadcast_(p.data, src=0)


# ---------------------------------------------------------------------------------------------- rollout side


def serve_rollouts(cfg: GRPOConfig, session, roles: Roles) -> dict:
    """A rollout rank's run: at each round hand over the batches asked for, take the weights, sample and score the
    steps asked for, until trainer 0 says stop; then report its weights' checksum to trainer 0."""
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    tasks, _, few_shot = task_split(cfg.task)
    # neither trained nor sharded here, so never offloaded: FSDP2 would shard it over the whole job's mesh, which
    # this rank alone never gathers, and the weights each round hands over are whole tensors
    whole = dataclasses.replace(cfg, dist=dataclasses.replace(cfg.dist, cpu_offload=False))
    policy, tok = load_placed("policy", whole, session, cfg.run.seed)
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode, rt.local_world_size)
    parts = build_parts(cfg, session, policy, SamplingCopy(policy, DTYPES[cfg.models["policy"].dtype]), None, None,
                        tok, tasks, few_shot, scorer)
    data = GlobalBatchSampler(len(tasks), cfg.prompts_per_step, 0, roles.trainers, cfg.run.seed)
    pending: dict[int, list[Rollouts]] = {}
    try:
        while True:
            roles.sync.barrier("rollout round")
            todo = roles.sync.broadcast_object(None, src=0)
            if todo["stop"]:
                break
            for t in todo["deliver"]:
                for trainer, batch in zip(roles.shares(), pending.pop(t)):
                    roles.world.send_object(batch, dst=trainer)
            if todo["weights"]:
                receive_weights(roles.sync, policy)
                parts.sampling.refresh()
            for t, position in todo["sample"]:
                data.position = position
                pending[t] = sample_shares(cfg, session, parts, roles, tasks, data, t, todo["version"])
        roles.sync.all_gather_object(module_checksum(unwrap(policy)))
    finally:
        scorer.close()
    return {"status": "completed", "role": "rollout"}


def sample_shares(cfg: GRPOConfig, session, parts: Parts, roles: Roles, tasks: list[Task],
                  data: GlobalBatchSampler, step: int, version: int) -> list[Rollouts]:
    """Step ``step``'s batch for each trainer this rank serves, sampled by the weights of ``version``, rewards waited
    for (after every share is generated, so the sandbox scores one share while the next is sampled), on the CPU.
    Each carries this rank's times for the step; the first carries its sandbox counts (the others zeros, so the
    trainers' sum is the total)."""
    indices, width = data.global_batch_indices(), data.local_batch
    times: dict[str, float] = {}
    started = [sample_ahead(cfg, session, parts, [tasks[i] for i in indices[j * width:(j + 1) * width]],
                            rollout_seed(cfg.run.seed, step, j), version, times) for j in roles.shares()]
    t0 = phase_time()
    done = [resolved(parts, ro) for ro in started]
    times["reward_wait_s"] = phase_time() - t0
    counts = parts.scorer.take_counts()
    none = dict.fromkeys(counts, 0.0)
    return [dataclasses.replace(on_cpu(ro), sampler_times=times, counts=counts if i == 0 else none)
            for i, ro in enumerate(done)]
