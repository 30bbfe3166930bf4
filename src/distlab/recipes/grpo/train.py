"""GRPO on code: sample G programs per prompt, run them against hidden tests, push up the ones that pass.

Read top to bottom, one step is: take this rank's prompts from the global-batch sampler; sample G
completions of each (all of a prompt's group on one rank, so its advantages need no communication),
scoring each chunk's programs in the sandbox while the next chunk is sampled; agree on the step's
global token and sequence counts with one all-reduce and take the reference's log-probs, while the sandbox still
runs the programs (unless dynamic sampling must see the rewards first); then ``num_iterations`` clipped policy updates
(``lm/update.py``), each over micro-batches whose losses are normalised by those global counts, so the
gradient does not depend on the world size or the micro-batching.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from distlab.recipes.grpo.config import GRPOConfig
from distlab.recipes.grpo.episodes import (env_metrics, env_rollout, evaluate_episodes, first_prompts, policy_tokens,
                                           prompt_bound)
from distlab.recipes.grpo.off_policy import RolloutsAhead
from distlab.recipes.lm.eval.evaluation import evaluate_pass_at_k, logged_evaluation, paired_fields
from distlab.recipes.lm.models.placed import SamplingCopy, gathered, load_placed
from distlab.recipes.lm.pg.batching import by_length, micro_batches, sequences
from distlab.recipes.lm.pg.logprobs import logprobs
from distlab.recipes.lm.pg.loss import (GlobalNorm, apply_truncation_mask, group_advantages, local_counts, policy_loss,
                                        reward_moments, std_from_moments, truncated_importance_weight)
from distlab.recipes.lm.pg.nonfinite import SkipProbe, micro_batch_record
from distlab.recipes.lm.pg.update import frozen_logprobs, policy_update
from distlab.recipes.lm.pg.warmup import supervised_warmup
from distlab.recipes.lm.rewards.functions import RewardFunctions, Sample
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.rollout.seeds import control_permutation, rollout_seed
from distlab.recipes.lm.tasks import Task
from distlab.recipes.lm.tasks.prompts import stops_for
from distlab.recipes.lm.tasks.select import task_split
from distlab.run.logs import Progress, mark_peak, peak_memory
from distlab.run.profiling import phase_time
from distlab.runtime.dist import module_checksum
from distlab.runtime.sampler import GlobalBatchSampler
from distlab.training.checkpoint import Box
from distlab.training.loop import count_skipped_steps, final_evaluation, run_fields, run_steps
from distlab.training.lr_schedule import lr_factor
from distlab.training.optim_state import adamw
from distlab.training.placement import DTYPES, compute_device
from distlab.training.wrap import unwrap


def train(cfg: GRPOConfig, session, feed: Callable[[GlobalBatchSampler, nn.Module], Any] | None = None) -> dict:
    """The run on this rank. ``feed(data sampler, policy)``: where the batches sampled ahead come from when rollout
    ranks sample them (``async.rollout_ranks``, :mod:`.split_roles`), in place of this rank's own
    :class:`RolloutsAhead`."""
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    tasks, held_out, few_shot = task_split(cfg.task)
    policy, tok = load_placed("policy", cfg, session, cfg.run.seed)
    reference = load_placed("reference", cfg, session, cfg.run.seed, lora=False)[0] if cfg.beta > 0 else None
    opt = adamw([p for p in policy.parameters() if p.requires_grad], cfg.optim.state_dtype, lr=cfg.lr,
                weight_decay=cfg.weight_decay)
    sampler = GlobalBatchSampler(len(tasks), cfg.prompts_per_step, rt.rank, rt.world_size, cfg.run.seed)
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode, rt.local_world_size)
    start_eval = Box()  # the starting model's per-problem results, for the paired comparison at the end
    session.track_model("policy", policy, [opt])
    session.track("sampler", sampler)
    session.track("start_eval", start_eval)
    ahead = None
    if feed is not None:  # batches received from the rollout ranks, and those asked for, are part of the state
        ahead = feed(sampler, policy)
        session.track("rollouts_received", ahead, per_rank=True)
    elif cfg.async_.off_policy_steps > 0:  # batches sampled ahead are part of the run's state: resume trains on them

        def sample(target: int, version: int, times: dict[str, float]) -> Rollouts:
            local = [tasks[i] for i in sampler.next()]
            return sample_ahead(cfg, session, parts, local, rollout_seed(cfg.run.seed, target, rt.rank), version,
                                times)

        ahead = RolloutsAhead(cfg.async_.off_policy_steps, cfg.steps - 1, sample,
                              lambda ro: resolved(parts, ro))  # parts: built after the restore
        session.track("rollouts_ahead", ahead, per_rank=True)
    count_skipped_steps(session)
    step = session.restore()
    if step == 0 and cfg.sft_steps > 0:
        supervised_warmup(session, policy, tok, tasks, steps=cfg.sft_steps, lr=cfg.sft_lr,
                          per_rank=max(1, cfg.micro_batch_size), pack=1, seed=cfg.run.seed,
                          chunk_tokens=cfg.logprob_chunk)
    sampling = SamplingCopy(policy, DTYPES[cfg.models["policy"].dtype])  # after restore and warm-up
    evaluate = partial(_evaluate, cfg, session, sampling.module, tok, held_out, few_shot, scorer)
    parts = build_parts(cfg, session, policy, sampling, reference, opt, tok, tasks, few_shot, scorer)
    if ahead is not None:
        ahead.start(step)

    def one_step(step: int) -> dict:
        if ahead is not None:
            return grpo_step(cfg, session, parts, [], step, tasks, ahead=ahead) | ahead.after_update(step)
        return grpo_step(cfg, session, parts, [tasks[i] for i in sampler.next()], step, tasks)

    status, step, last = run_steps(session, cfg, step, one_step, evaluate, shown=("reward_mean",),
                                   examples_per_step=cfg.prompts_per_step * cfg.num_generations, start_eval=start_eval)
    status, final = final_evaluation(session, status, step, evaluate)
    ended = ahead.close() if ahead is not None else {}  # the rollout ranks, if any, stop here
    result = {"status": status, "step": step, **run_fields(cfg, status, step), "train": last,
              "world_size": rt.world_size,
              "param_checksum": module_checksum(unwrap(policy)), **ended}
    if final is not None:
        result["eval"] = _with_comparison(final, start_eval.value)
    scorer.close()
    return result


@dataclass
class Parts:
    """What a GRPO step works with: the trained policy, its sampling weights, the reference, the rewards."""

    policy: nn.Module
    sampling: SamplingCopy
    reference: nn.Module | None
    opt: torch.optim.Optimizer
    tok: Any
    few_shot: list[Task]
    scorer: RewardScorer
    rewards: RewardFunctions
    max_prompt_length: int | None = None  # the task set's longest prompt: one compiled decode graph per run
    phase: Callable[[str, int, str], Progress] | None = None  # Session.phase: progress of a long rollout


def build_parts(cfg: GRPOConfig, session, policy: nn.Module, sampling: SamplingCopy, reference: nn.Module | None,
                opt: torch.optim.Optimizer | None, tok: Any, tasks: list[Task], few_shot: list[Task],
                scorer: RewardScorer) -> Parts:
    """The :class:`Parts` of a run (a rollout rank's has no reference and no optimizer)."""
    return Parts(policy, sampling, reference, opt, tok, few_shot, scorer, reward_functions(cfg, scorer),
                 max_prompt_length=prompt_bound(cfg, tok, tasks, few_shot), phase=session.phase)


def rollout(cfg: GRPOConfig, parts: Parts, tasks: list[Task], prompts: list[str], seed: int):
    """G completions per prompt from the sampling weights; returns completions and each one's started rewards.

    A rollout of minutes (a real model on a CPU) shows its decode steps, rate and ETA (an upper bound: completions
    may stop before ``max_completion_length``) through ``parts.phase``."""
    if cfg.env.name:  # multi-turn episodes in an environment
        return env_rollout(cfg, parts, tasks, prompts, seed, partial(_rollout_progress, parts))
    chunk = cfg.sampling.chunk_prompts or len(tasks)
    stops = stops_for(tasks, parts.scorer.mode)
    comps, started = [], []
    width = cfg.sampling.max_completion_length
    calls = -(-len(tasks) // chunk)
    with gathered(parts.policy), torch.no_grad(), _rollout_progress(parts, calls * width) as bar:
        for call, start in enumerate(range(0, len(tasks), chunk)):
            part = generate(parts.sampling.module, parts.tok, prompts[start:start + chunk], cfg.sampling,
                            stop_strings=stops, seed=seed + start, n=cfg.num_generations,
                            max_prompt_length=parts.max_prompt_length, batch_rows=chunk * cfg.num_generations,
                            on_step=lambda k, done=call * width: bar.update(done + k))
            bar.update((call + 1) * width)  # a call whose completions all stopped early is whole
            for c in part:
                c.prompt_index += start
                task = tasks[c.prompt_index]
                sample = Sample(task, prompts[c.prompt_index], c.text, len(c.token_ids), c.truncated)
                started.append(parts.rewards.submit(sample, partial(parts.scorer.submit, task, c.text),
                                                    partial(parts.scorer.submit_fraction, task, c.text)))
            comps += part
    return comps, started


@dataclass
class Group:
    """One prompt's G completions and every reward of each (what dynamic sampling keeps or replaces)."""

    prompt: str
    comps: list
    values: dict[str, list[float]]
    total: list[float]

    @property
    def informative(self) -> bool:
        return max(self.total) != min(self.total)  # equal rewards: every advantage is 0


@dataclass
class Rollouts:
    """Sampled completions whose rewards the sandbox is still computing (``started``: one pending set each).

    ``version``: optimizer steps the sampling weights had taken; ``behaviour``: per micro-batch of the update's
    layout, the log-probs of the sampled tokens under those weights (kept only when sampled ahead,
    ``async.off_policy_steps > 0``, for the importance weight)."""

    prompts: list[str]
    comps: list
    started: list
    version: int = 0
    behaviour: list | None = None
    # sampled on a rollout rank (split_roles): its times for the batch, its sandbox's counts (timeouts, no code...)
    sampler_times: dict[str, float] | None = None
    counts: dict[str, float] | None = None


def start_rollouts(cfg: GRPOConfig, parts: Parts, local: list[Task], seed: int, times: dict[str, float]) -> Rollouts:
    """G completions of each prompt, their programs already submitted to the sandbox."""
    t0 = phase_time()
    prompts = first_prompts(cfg, parts.tok, local, parts.few_shot)
    comps, started = rollout(cfg, parts, local, prompts, seed)
    times["generate_s"] = times.get("generate_s", 0.0) + phase_time() - t0
    return Rollouts(prompts, comps, started)


def sample_ahead(cfg: GRPOConfig, session, parts: Parts, local: list[Task], seed: int, version: int,
                 times: dict[str, float]) -> Rollouts:
    """Rollouts for a later step (``async.off_policy_steps``), their rewards started, with the log-probs of the
    weights that sampled them (version ``version``) on the layout the update will read, taken now: by the time the
    batch trains, those weights are gone."""
    ro = start_rollouts(cfg, parts, local, seed, times)
    t0 = phase_time()
    lay = update_layout(cfg, parts, ro.comps)
    ro.behaviour = frozen_logprobs(session, parts.policy, ids=lay.ids, attn=lay.attn, mask=lay.comp,
                                   slices=lay.slices, chunk_tokens=cfg.logprob_chunk,
                                   temperature=cfg.sampling.temperature, device=lay.ids.device, pack=cfg.padding_free)
    ro.version = version
    times["behaviour_logprobs_s"] = times.get("behaviour_logprobs_s", 0.0) + phase_time() - t0
    return ro


def resolved(parts: Parts, ro: Rollouts) -> Rollouts:
    """``ro`` with every reward waited for: numbers in place of the sandbox's futures (a checkpoint holds these)."""
    values = parts.rewards.collect(ro.started)
    ro.started = [{name: vals[i] for name, vals in values.items()} for i in range(len(ro.started))]
    return ro


def scored_groups(cfg: GRPOConfig, parts: Parts, ro: Rollouts, times: dict[str, float]) -> list[Group]:
    """Wait for every reward of ``ro``; one :class:`Group` per prompt."""
    t0 = phase_time()
    values = parts.rewards.collect(ro.started)
    times["reward_wait_s"] = times.get("reward_wait_s", 0.0) + phase_time() - t0
    total = parts.rewards.total(values)
    g = cfg.num_generations
    return [Group(ro.prompts[i], ro.comps[i * g:(i + 1) * g], {k: v[i * g:(i + 1) * g] for k, v in values.items()},
                  total[i * g:(i + 1) * g]) for i in range(len(ro.prompts))]


def sample_groups(cfg: GRPOConfig, parts: Parts, local: list[Task], seed: int, times: dict[str, float]
                  ) -> list[Group]:
    """G completions of each prompt, scored by every reward function, one :class:`Group` per prompt."""
    return scored_groups(cfg, parts, start_rollouts(cfg, parts, local, seed, times), times)


def refill(cfg: GRPOConfig, session, parts: Parts, groups: list[Group], tasks: list[Task], step: int,
           times: dict[str, float]) -> tuple[list[Group], int]:
    """DAPO's dynamic sampling: replace groups whose rewards all agree by groups of fresh prompts.

    Rounds continue while any rank still lacks informative groups, at most ``max_refill_rounds``, and every rank
    runs every round (the decision is one collective), so ranks stay in step; each keeps exactly as many groups
    as it had, informative ones first, so every rank runs the same number of micro-batches. Fresh prompts are
    drawn from a generator seeded by (seed, step, rank, round): a resumed run draws the same ones.
    """
    rt, want = session.rt, len(groups)
    keep = [grp for grp in groups if grp.informative]
    spare = [grp for grp in groups if not grp.informative]
    rounds = 0
    while rounds < cfg.max_refill_rounds and rt.any_flags(len(keep) < want)[0]:
        rounds += 1
        gen = torch.Generator().manual_seed(rollout_seed(cfg.run.seed, step, rt.rank) + 7_919 * rounds)
        fresh = [tasks[int(i)] for i in torch.randint(len(tasks), (want,), generator=gen)]
        seed = rollout_seed(cfg.run.seed, step, rt.rank) + 104_729 * rounds
        for grp in sample_groups(cfg, parts, fresh, seed, times):
            (keep if grp.informative else spare).append(grp)
    return (keep + spare)[:want], rounds


def grpo_step(cfg: GRPOConfig, session, parts: Parts, local: list[Task], step: int, tasks: list[Task],
              ahead: RolloutsAhead | None = None) -> dict:
    """One GRPO step on this rank's prompts ``local``; returns the step's metrics (identical on every rank).

    With ``ahead`` (``async.off_policy_steps=K > 0``) the step trains on the batch sampled K steps earlier
    (``local`` is unused: the batches draw their own prompts) and first samples the batches of the next K steps
    with its weights as handed to it, so their sandbox scoring overlaps this step's update."""
    rt = session.rt
    policy, opt = parts.policy, parts.opt
    for g in opt.param_groups:
        g["lr"] = cfg.lr * lr_factor(step, cfg.warmup_steps, cfg.steps, cfg.lr_scheduler_type.value)
    times: dict[str, float] = {}
    if ahead is None:
        ro = start_rollouts(cfg, parts, local, rollout_seed(cfg.run.seed, step, rt.rank), times)
        ro.version = step
    else:
        ro = ahead.take(step, times)
        ahead.prefetch(step, times)  # before the update: these batches are sampled by this step's starting weights
        times.update(ro.sampler_times or {})  # sampled on a rollout rank: its generate and reward-wait times
    mark_peak(rt, "generate", times)
    rounds = 0
    if cfg.dynamic_sampling:  # which groups train depends on their rewards: wait for them first
        first = scored_groups(cfg, parts, ro, times)
        groups, rounds = refill(cfg, session, parts, first, tasks, step, times)
        comps = [c for grp in groups for c in grp.comps]
        batch = frozen_batch(cfg, session, parts, comps, times)
    else:  # the reference's log-probs need no reward: the GPU computes them while the sandbox runs the programs
        comps = ro.comps
        batch = frozen_batch(cfg, session, parts, comps, times)
        groups = first = scored_groups(cfg, parts, ro, times)
    mark_peak(rt, "ref", times)
    prompts = [grp.prompt for grp in groups for _ in grp.comps]
    per_func = {k: [v for grp in groups for v in grp.values[k]] for k in groups[0].values} if groups else {}
    rewards = torch.tensor([r for grp in groups for r in grp.total], dtype=torch.float64)
    # ALGO LOGIC: advantages within each prompt's group (and the batch std when asked)
    credited = shuffled(rewards, rollout_seed(cfg.run.seed, step, rt.rank)) if cfg.shuffle_rewards else rewards
    batch_std = None
    if cfg.scale_rewards == "batch":
        batch_std = std_from_moments(rt.all_reduce_sum(reward_moments(credited)))
    adv, zero_var = group_advantages(credited, cfg.num_generations, cfg.scale_rewards, batch_std=batch_std)
    if cfg.shuffle_rewards:  # logged as the rollouts earned it, so both arms' curves read the same
        zero_var = group_advantages(rewards, cfg.num_generations, cfg.scale_rewards, batch_std=batch_std)[1]
    adv = adv[batch.order]
    device, temp = batch.ids.device, cfg.sampling.temperature
    is_max = [0.0]  # the largest importance weight of the step (a max, which policy_update's summed stats are not)

    def micro_loss(m: int):
        sl = batch.slices[m]
        logp, ent = logprobs(policy, batch.ids[sl], batch.attn[sl], batch.comp[sl], chunk_tokens=cfg.logprob_chunk,
                             temperature=temp, entropy="grad" if cfg.entropy_coef else True, pack=cfg.padding_free)
        weight, extra = None, {}
        if ro.behaviour is not None:  # sampled by older weights: pi_train is the policy before this step's update
            train = batch.old[m] if batch.old[m] is not None else logp
            weight, cut = truncated_importance_weight(train, ro.behaviour[m].to(device),
                                                      cfg.async_.importance_sampling_cap)
            weight, extra = importance_stats(weight, cut, batch.mask[sl] != 0, is_max)
        loss, stats = policy_loss(logp, batch.old[m], batch.ref[m], adv[sl[0]].to(device).float(), batch.mask[sl],
                                  epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high or cfg.epsilon, beta=cfg.beta,
                                  kl=cfg.kl, loss_type=cfg.loss_type, norm=batch.norm,
                                  max_completion_length=policy_tokens(cfg), world_size=rt.world_size,
                                  entropy=ent, entropy_coef=cfg.entropy_coef, is_weight=weight)
        return loss, {**stats, **extra}

    t3 = phase_time()
    def record(m: int) -> dict:
        sl = batch.slices[m]
        return micro_batch_record(session, policy, batch.ids[sl], batch.attn[sl], batch.comp[sl], batch.ref[m],
                                  kl=cfg.kl, chunk_tokens=cfg.logprob_chunk, temperature=temp, pack=cfg.padding_free)

    sums, gnorm = policy_update(session, policy, opt, len(batch.slices), micro_loss, iterations=cfg.num_iterations,
                                max_grad_norm=cfg.clip_grad, marks=times,
                                probe=SkipProbe(session.run_dir, step, rt.rank, record))
    parts.sampling.refresh()
    times["update_s"] = phase_time() - t3
    mark_peak(rt, "update", times)
    if cfg.log_completions and (step + 1) % cfg.log_completions == 0 and rt.is_main:
        _log_completions(session, step + 1, prompts, comps, per_func, rewards)
    counts = ro.counts if ro.counts is not None else parts.scorer.take_counts()
    metrics = _step_metrics(rt, cfg, rewards, zero_var, comps, sums, counts, times, gnorm, batch.norm)
    metrics |= importance_metrics(rt, sums, is_max[0] if ro.behaviour is not None else None, step, ro.version)
    if cfg.env.name:
        metrics |= env_metrics(rt, comps)
    means = rt.reduce_sums({name: sum(v) for name, v in per_func.items()} | {"refill_rounds": float(rounds)}
                           | first_round_sums(first))
    return {**metrics, **{f"rewards/{name}": means[name] / (len(comps) * rt.world_size) for name in per_func},
            "lr": opt.param_groups[0]["lr"], "refill_rounds": means["refill_rounds"] / rt.world_size,
            **first_round_means(means)}


def first_round_sums(first: list[Group]) -> dict[str, float]:
    """This rank's sums over the groups sampled first, before dynamic sampling replaced any: ``reward_mean`` and
    ``zero_std_fraction`` are of the trained (kept, mostly informative) batch, so how often a prompt's group
    agrees, and how well the policy does on the prompts as drawn, are only seen here."""
    return {"first_reward_sum": float(sum(sum(grp.total) for grp in first)),
            "first_completions": float(sum(len(grp.total) for grp in first)),
            "first_zero_var_groups": float(sum(not grp.informative for grp in first)),
            "first_groups": float(len(first))}


def first_round_means(tot: dict[str, float]) -> dict[str, float]:
    """``reward_first_round`` and ``zero_std_fraction_first_round`` from the all-reduced :func:`first_round_sums`
    (the kept batch's own when dynamic sampling is off)."""
    return {"reward_first_round": tot["first_reward_sum"] / max(tot["first_completions"], 1.0),
            "zero_std_fraction_first_round": tot["first_zero_var_groups"] / max(tot["first_groups"], 1.0)}


def importance_stats(weight: torch.Tensor, cut: torch.Tensor, keep: torch.Tensor, is_max: list
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The weight as the loss uses it, and its sums over the trained tokens ``keep`` (``is_max[0]``: the running
    max): ``policy_update`` adds the sums over micro-batches and iterations, as it does ``num_tokens``."""
    kept = torch.where(keep, weight, torch.zeros_like(weight))
    if kept.numel():
        is_max[0] = max(is_max[0], float(kept.max()))
    return weight, {"is_weight_sum": kept.sum().to(torch.float64),
                    "is_truncated": (cut & keep).sum().to(torch.float64)}


def importance_metrics(rt, sums: dict[str, float], local_max: float | None, step: int, version: int
                       ) -> dict[str, float]:
    """The step's importance weights over every rank's trained tokens (mean, max, tokens the cap truncated) and
    the version of the weights that sampled the batch. Synchronous (``async.off_policy_steps=0``): no weight is
    applied, logged as 1, 1 and 0."""
    tot = rt.reduce_sums({"tokens": sums.get("num_tokens", 0.0),
                          "weights": sums.get("is_weight_sum", sums.get("num_tokens", 0.0)),
                          "truncated": sums.get("is_truncated", 0.0)})
    top = 1.0 if local_max is None else max(rt.all_gather_object(local_max))
    return {"is_weight/mean": tot["weights"] / tot["tokens"] if tot["tokens"] else 1.0, "is_weight/max": top,
            "is_weight/truncated_tokens": tot["truncated"], "policy_version": float(version),
            "policy_lag": float(step - version)}


@dataclass
class Layout:
    """A step's completions in the order and shapes the update reads: sorted by length (``order``), padded, cut
    into micro-batches (each to its own widest row). A pure function of the completions, so log-probs taken on it
    when a batch is sampled line up with the update's."""

    order: torch.Tensor
    ids: torch.Tensor
    attn: torch.Tensor
    comp: torch.Tensor
    truncated: torch.Tensor
    slices: list


def update_layout(cfg: GRPOConfig, parts: Parts, comps: list) -> Layout:
    device = compute_device(parts.policy)
    pad = parts.tok.pad_token_id if parts.tok.pad_token_id is not None else 0
    order = by_length([len(c.prompt_ids) + len(c.token_ids) for c in comps])
    ordered = [comps[i] for i in order.tolist()]
    ids, attn, comp = sequences([c.prompt_ids for c in ordered], [c.token_ids for c in ordered], pad, device,
                                [getattr(c, "mask", None) for c in ordered])  # an episode's: its policy tokens
    truncated = torch.tensor([c.truncated for c in ordered], device=device)
    return Layout(order, ids, attn, comp, truncated, micro_batches(len(comps), cfg.micro_batch_size, attn))


@dataclass
class FrozenBatch:
    """A step's completions as the update reads them: sorted by length (``order``), padded tensors, micro-batch
    slices, the step's global token counts, and the log-probs of the old policy and the reference."""

    order: torch.Tensor
    ids: torch.Tensor
    attn: torch.Tensor
    comp: torch.Tensor
    mask: torch.Tensor
    norm: GlobalNorm
    slices: list
    old: list
    ref: list


def frozen_batch(cfg: GRPOConfig, session, parts: Parts, comps: list, times: dict[str, float]) -> FrozenBatch:
    """Everything the update needs that no reward decides: it can run while the sandbox still scores ``comps``."""
    rt, policy = session.rt, parts.policy
    device = compute_device(policy)
    # the update sees the completions sorted by length, each micro-batch cut to its own widest row
    lay = update_layout(cfg, parts, comps)
    order, ids, attn, comp, slices = lay.order, lay.ids, lay.attn, lay.comp, lay.slices
    mask = apply_truncation_mask(comp, lay.truncated) if cfg.mask_truncated_completions else comp
    norm = GlobalNorm.from_counts(rt.all_reduce_sum(local_counts(mask)).cpu())
    t0 = phase_time()
    frozen = partial(frozen_logprobs, session, ids=ids, attn=attn, mask=comp, slices=slices,
                     chunk_tokens=cfg.logprob_chunk, temperature=cfg.sampling.temperature, device=device,
                     pack=cfg.padding_free)
    old = frozen(policy if cfg.num_iterations > 1 else None)
    ref = frozen(parts.reference)
    times["ref_logprobs_s"] = phase_time() - t0
    return FrozenBatch(order, ids, attn, comp, mask, norm, slices, old, ref)


def reward_functions(cfg: GRPOConfig, scorer: RewardScorer) -> RewardFunctions:
    """The configured reward functions and weights, their programs run on ``scorer``'s sandbox pool."""
    return RewardFunctions(cfg.reward_funcs, cfg.reward_weights, mode=cfg.model.prompt_mode,
                           max_len=cfg.sampling.max_completion_length, overlong_buffer=cfg.overlong_buffer,
                           timeout_s=cfg.reward_timeout_s, pool=scorer.pool)


def shuffled(rewards: torch.Tensor, seed: int) -> torch.Tensor:
    """``rewards`` in a random order drawn from ``seed`` (the control arm): the same values, hence the same reward
    mean and spread, credited to the wrong completions."""
    return rewards[control_permutation(len(rewards), seed)]


def _log_completions(session, step: int, prompts, comps, per_func: dict[str, list[float]], rewards) -> None:
    """This rank's sampled completions with every reward, one metrics row (split ``completions``)."""
    table = [{"prompt": prompts[i], "completion": c.text, "reward": float(rewards[i]),
              **{name: values[i] for name, values in per_func.items()}} for i, c in enumerate(comps)]
    session.metrics.log(step, {"completions": table}, split="completions")


def _rollout_progress(parts: Parts, total: int) -> Progress:
    """The rollout's progress in decode steps (silent without a session's ``phase``: tests, benchmarks)."""
    return parts.phase("rollout", total, "token") if parts.phase else Progress(total, enabled=False)


def _step_metrics(rt, cfg, rewards, zero_var, comps, sums, counts, times, gnorm, norm: GlobalNorm) -> dict:
    lengths = np.array([len(c.token_ids) for c in comps], dtype=np.float64)
    local = {"reward_sum": float(rewards.sum()), "n": float(len(rewards)), "zero_var_groups":
             zero_var * len(rewards) / cfg.num_generations, "groups": len(rewards) / cfg.num_generations,
             "length_sum": float(lengths.sum()), "truncated": float(sum(c.truncated for c in comps)),
             **{k: sums.get(k, 0.0) for k in ("kl_sum", "clip_low", "clip_high", "entropy_sum", "num_tokens")},
             **counts, **times}
    tot = rt.reduce_sums(local)
    tokens = max(tot["num_tokens"], 1.0)
    return {"reward_mean": tot["reward_sum"] / tot["n"], "zero_std_fraction": tot["zero_var_groups"] / tot["groups"],
            "kl": tot["kl_sum"] / tokens, "clip_low_fraction": tot["clip_low"] / tokens,
            "clip_high_fraction": tot["clip_high"] / tokens, "entropy": tot["entropy_sum"] / tokens,
            "completion_length": tot["length_sum"] / tot["n"], "truncated_fraction": tot["truncated"] / tot["n"],
            "sandbox_timeouts": tot["sandbox_timeouts"], "suspected_hacks": tot["suspected_hacks"],
            "no_code": tot["no_code"], "grad_norm": gnorm, "global_tokens": norm.num_tokens,
            **peak_memory(rt),
            **{k: tot[k] / rt.world_size for k in times}}


def _evaluate(cfg, session, policy, tok, tasks, few_shot, scorer, step: int, split: str) -> dict:
    def run(progress) -> dict:
        out = evaluate_pass_at_k(policy, tok, tasks, few_shot, cfg.sampling, cfg.evaluation, scorer, session.rt,
                                 seed=cfg.run.seed + 31, step_rows=cfg.rows_per_rank(session.rt.world_size),
                                 progress=progress)
        if cfg.env.name:  # the episodes too: what the environment's turns add
            played = evaluate_episodes(cfg, policy, tok, tasks, few_shot, scorer, session.rt, cfg.run.seed + 31,
                                       progress)
            out["metrics"] |= played["metrics"]
            for row, episode in zip(out["per_problem"], played["per_problem"]):
                row.update(episode)
        return out

    def describe(m: dict) -> str:
        said = f"pass@1 {m['pass@1']:.3f} [{m['pass@1_low']:.3f}, {m['pass@1_high']:.3f}] on {m['n_problems']} problems"
        if "env_return" in m:
            said += (f"; {cfg.env.name} episodes: return {m['env_return']:.3f} [{m['env_return_low']:.3f}, "
                     f"{m['env_return_high']:.3f}] in {m['env_turns']:.2f} turns")
        return said

    return logged_evaluation(session, step, split, run, describe)


def _with_comparison(final: dict, start: dict | None) -> dict:
    """The final metrics, plus a paired comparison with the starting model on the same problems."""
    metrics = dict(final["metrics"])
    if start and len(start["per_problem"]) == len(final["per_problem"]) > 1:
        metrics.update(paired_fields([r["greedy"] for r in start["per_problem"]],
                                     [r["greedy"] for r in final["per_problem"]],
                                     {"start_pass@1": "mean_baseline", "delta_pass@1": "diff", "delta_low": "low",
                                      "delta_high": "high", "delta_significant": "significant",
                                      "delta_fixed": "candidate_only", "delta_broken": "baseline_only",
                                      "mcnemar_p": "mcnemar_p"}))
        if "episode_return" in start["per_problem"][0]:  # env.name: the episodes' return, paired the same way
            metrics.update(paired_fields([r["episode_return"] for r in start["per_problem"]],
                                         [r["episode_return"] for r in final["per_problem"]],
                                         {"start_env_return": "mean_baseline", "delta_env_return": "diff",
                                          "delta_env_return_low": "low", "delta_env_return_high": "high"}))
    return metrics
