"""GRPO on code: sample G programs per prompt, run them against hidden tests, push up the ones that pass.

Read top to bottom, one step is: take this rank's prompts from the global-batch sampler; sample G
completions of each (all of a prompt's group on one rank, so its advantages need no communication),
scoring each chunk's programs in the sandbox while the next chunk is sampled; agree on the step's
global token and sequence counts with one all-reduce; then ``num_iterations`` clipped policy updates,
each over micro-batches whose losses are normalised by those global counts, so the gradient does not
depend on the world size or the micro-batching.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from distlab.checkpoint import Box
from distlab.dist import module_checksum
from distlab.errors import DistlabError
from distlab.logs import peak_memory
from distlab.optim_state import adamw
from distlab.recipes.grpo.config import GRPOConfig
from distlab.recipes.grpo.loss import (GlobalNorm, apply_truncation_mask, group_advantages, local_counts,
                                       policy_loss, reward_moments, std_from_moments)
from distlab.recipes.grpo.warmup import supervised_warmup
from distlab.recipes.lm.build import gathered, load_placed, prompt_text, sequences, stops_for
from distlab.recipes.lm.evaluation import evaluate_pass_at_k
from distlab.recipes.lm.generate import generate
from distlab.recipes.lm.logprobs import token_logprobs
from distlab.recipes.lm.rewards import RewardScorer
from distlab.recipes.lm.tasks_for import eval_tasks, train_tasks
from distlab.sampler import GlobalBatchSampler
from distlab.wrap import clip_grad, no_sync, unwrap

log = logging.getLogger("distlab")


def rollout_seed(cfg: GRPOConfig, step: int, rank: int) -> int:
    """Sampling seeds come from (run seed, step, rank): a resumed run draws the same completions."""
    return (cfg.run.seed * 1_000_003 + step * 7919 + rank * 104_729) % 2**31


def rollout(cfg, policy, tok, tasks, prompts, scorer, seed):
    """G completions per prompt; returns completions and a future per completion (scored meanwhile)."""
    chunk = cfg.sampling.chunk_prompts or len(tasks)
    stops = stops_for(tasks, scorer.mode)
    comps, futures = [], []
    inner = unwrap(policy)
    with gathered(policy), torch.no_grad():
        for start in range(0, len(tasks), chunk):
            part = generate(inner, tok, prompts[start:start + chunk], max_new_tokens=cfg.sampling.max_completion_length,
                            temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p, stop_strings=stops,
                            seed=seed + start, n=cfg.num_generations, backend=cfg.sampling.backend)
            for c in part:
                c.prompt_index += start
                futures.append(scorer.submit(tasks[c.prompt_index], c.text))
            comps += part
    return comps, futures


def _micro_batches(n: int, size: int) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def _logps(model, ids, attn, comp, cfg, grad: bool, entropy: bool = False):
    with torch.set_grad_enabled(grad):
        return token_logprobs(model, ids, attn, completion_mask=comp, chunk_tokens=cfg.logprob_chunk,
                              temperature=cfg.sampling.temperature if cfg.sampling.temperature > 0 else 1.0,
                              with_entropy=entropy)


def train(cfg: GRPOConfig, session) -> dict:
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    tasks, held_out = train_tasks(cfg.task), eval_tasks(cfg.task)
    policy, tok = load_placed("policy", cfg, session, cfg.run.seed)
    reference = load_placed("reference", cfg, session, cfg.run.seed, lora=False)[0] if cfg.beta > 0 else None
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = adamw(params, cfg.optim.state_dtype, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sampler = GlobalBatchSampler(len(tasks), cfg.prompts_per_step, rt.rank, rt.world_size, cfg.run.seed)
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode)
    few_shot = tasks[: cfg.task.few_shot]
    start_eval = Box()  # the starting model's per-problem results, for the paired comparison at the end
    session.track_model("policy", policy, [opt])
    session.track("sampler", sampler)
    session.track("start_eval", start_eval)
    step = session.restore()
    if step == 0 and cfg.sft_steps > 0:
        supervised_warmup(cfg, session, policy, tok, tasks)
    if step == 0 and cfg.evaluation.before:
        start_eval.value = _evaluate(cfg, session, policy, tok, held_out, few_shot, scorer, step, "eval_start")
    progress = session.progress(cfg.steps, step)
    device = next(unwrap(policy).parameters()).device
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    eps_high = cfg.epsilon_high or cfg.epsilon
    status, last = "completed", {}
    while step < cfg.steps:
        for g in opt.param_groups:
            g["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
        times = {}
        t0 = time.perf_counter()
        local = [tasks[i] for i in sampler.next()]
        prompts = [prompt_text(t, tok, cfg.model.prompt_mode, few_shot) for t in local]
        comps, futures = rollout(cfg, policy, tok, local, prompts, scorer, rollout_seed(cfg, step, rt.rank))
        times["generate_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        rewards = torch.tensor([f.result() for f in futures], dtype=torch.float64)
        times["reward_wait_s"] = time.perf_counter() - t1
        # ALGO LOGIC: advantages within each prompt's group (and the batch std when asked)
        batch_std = None
        if cfg.scale_rewards == "batch":
            batch_std = std_from_moments(_all_reduce(rt, reward_moments(rewards)))
        adv, zero_var = group_advantages(rewards, cfg.num_generations, cfg.scale_rewards, batch_std=batch_std)
        ids, attn, comp = sequences([c.prompt_ids for c in comps], [c.token_ids for c in comps], pad, device)
        truncated = torch.tensor([c.truncated for c in comps], device=device)
        mask = apply_truncation_mask(comp, truncated) if cfg.mask_truncated_completions else comp
        norm = GlobalNorm.from_counts(_all_reduce(rt, local_counts(mask)))
        t2 = time.perf_counter()
        batches = _micro_batches(len(comps), cfg.micro_batch_size)
        old, ref = [], []
        with torch.no_grad():
            for sl in batches:
                old.append(_logps(policy, ids[sl], attn[sl], comp[sl], cfg, False)[0]
                           if cfg.num_iterations > 1 else None)
                ref.append(_logps(reference, ids[sl].to(_dev(reference)), attn[sl].to(_dev(reference)),
                                  comp[sl].to(_dev(reference)), cfg, False)[0].to(device)
                           if reference is not None else None)
        times["ref_logprobs_s"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        sums: dict[str, float] = {}
        for _ in range(cfg.num_iterations):
            for m, sl in enumerate(batches):
                with no_sync(policy, m < len(batches) - 1), session.autocast():
                    logp, ent = _logps(policy, ids[sl], attn[sl], comp[sl], cfg, True, entropy=True)
                    loss, stats = policy_loss(logp, old[m], ref[m], adv[sl].to(device).float(), mask[sl],
                                              epsilon=cfg.epsilon, epsilon_high=eps_high, beta=cfg.beta, kl=cfg.kl,
                                              loss_type=cfg.loss_type, norm=norm,
                                              max_completion_length=cfg.sampling.max_completion_length,
                                              world_size=rt.world_size, entropy=ent)
                loss.backward()
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
            gnorm = clip_grad(policy, cfg.clip_grad)
            opt.step()
            opt.zero_grad(set_to_none=True)
        times["update_s"] = time.perf_counter() - t3
        step += 1
        last = _step_metrics(rt, cfg, rewards, zero_var, comps, sums, scorer, times, gnorm, norm)
        if step % cfg.log.every == 0 or step == cfg.steps:
            session.metrics.log(step, last)
        progress.update(step, reward=last["reward_mean"])
        if cfg.evaluation.eval_interval_steps and step % cfg.evaluation.eval_interval_steps == 0 and step < cfg.steps:
            _evaluate(cfg, session, policy, tok, held_out, few_shot, scorer, step, "eval")
        stop, cfg.steps = session.stop_or_end(step, cfg.steps)
        session.checkpoint(step, last=stop or step == cfg.steps)
        if stop:
            status = "preempted"
            break
    progress.close()
    result = {"status": status, "step": step, "train": last, "world_size": rt.world_size,
              "param_checksum": module_checksum(unwrap(policy))}
    if status == "completed":
        final = _evaluate(cfg, session, policy, tok, held_out, few_shot, scorer, step, "eval")
        result["eval"] = _with_comparison(final, start_eval.value)
    scorer.close()
    return result


def _dev(model) -> torch.device:
    """Where a model computes: an offloaded model's weights sit on the CPU but it runs on its compute device."""
    inner = unwrap(model)
    return getattr(inner, "_distlab_offload_device", None) or next(inner.parameters()).device


def _all_reduce(rt, t: torch.Tensor) -> torch.Tensor:
    """SUM over ranks (CPU tensors through gloo, or the NCCL device), returned on the CPU."""
    if not rt.distributed:
        return t
    import torch.distributed as dist

    x = t.to(rt.comm_device)
    dist.all_reduce(x)
    return x.cpu()


def _step_metrics(rt, cfg, rewards, zero_var, comps, sums, scorer, times, gnorm, norm: GlobalNorm) -> dict:
    lengths = np.array([len(c.token_ids) for c in comps], dtype=np.float64)
    local = {"reward_sum": float(rewards.sum()), "n": float(len(rewards)), "zero_var_groups":
             zero_var * len(rewards) / cfg.num_generations, "groups": len(rewards) / cfg.num_generations,
             "length_sum": float(lengths.sum()), "truncated": float(sum(c.truncated for c in comps)),
             **{k: sums.get(k, 0.0) for k in ("kl_sum", "clip_low", "clip_high", "entropy_sum", "num_tokens")},
             **scorer.take_counts(), **times}
    tot = rt.reduce_sums(local)
    tokens = max(tot["num_tokens"], 1.0)
    world = rt.world_size
    return {"reward_mean": tot["reward_sum"] / tot["n"], "zero_std_fraction": tot["zero_var_groups"] / tot["groups"],
            "kl": tot["kl_sum"] / tokens, "clip_low_fraction": tot["clip_low"] / tokens,
            "clip_high_fraction": tot["clip_high"] / tokens, "entropy": tot["entropy_sum"] / tokens,
            "completion_length": tot["length_sum"] / tot["n"], "truncated_fraction": tot["truncated"] / tot["n"],
            "sandbox_timeouts": tot["sandbox_timeouts"], "suspected_hacks": tot["suspected_hacks"],
            "no_code": tot["no_code"], "grad_norm": gnorm, "global_tokens": norm.num_tokens,
            **peak_memory(rt),
            **{k: tot[k] / world for k in times}}


def _evaluate(cfg, session, policy, tok, tasks, few_shot, scorer, step: int, split: str) -> dict:
    rt = session.rt
    t0 = time.perf_counter()
    out = evaluate_pass_at_k(policy, tok, tasks, few_shot, cfg.sampling, cfg.evaluation, scorer, rt,
                             seed=cfg.run.seed + 31)
    metrics = {**out["metrics"], "eval_s": time.perf_counter() - t0}
    session.metrics.log(step, metrics, split=split)
    if rt.is_main:
        from distlab.atomic import atomic_write_json

        atomic_write_json(session.run_dir / f"{split}_step{step:06d}_problems.json", out["per_problem"])
        log.info("%s @%d: pass@1 %.3f [%.3f, %.3f] on %d problems", split, step, metrics["pass@1"],
                 metrics["pass@1_low"], metrics["pass@1_high"], metrics["n_problems"])
    return {"metrics": metrics, "per_problem": out["per_problem"]}


def _with_comparison(final: dict, start: dict | None) -> dict:
    """The final metrics, plus a paired comparison with the starting model on the same problems."""
    from distlab.recipes.lm.passk import paired_comparison

    metrics = dict(final["metrics"])
    if start and len(start["per_problem"]) == len(final["per_problem"]) > 1:
        base = [r["greedy"] for r in start["per_problem"]]
        cand = [r["greedy"] for r in final["per_problem"]]
        cmp = paired_comparison(base, cand)
        metrics.update({"start_pass@1": cmp.mean_baseline, "delta_pass@1": cmp.diff, "delta_low": cmp.low,
                        "delta_high": cmp.high, "delta_significant": cmp.significant})
    return metrics


def check(cfg: GRPOConfig, world_size: int) -> None:
    """Settings that cannot work together, named before any process starts."""
    from distlab.recipes.grpo.config import KL_ESTIMATORS, LOSS_TYPES, SCALE_REWARDS

    for key, value, allowed in (("loss_type", cfg.loss_type, LOSS_TYPES), ("scale_rewards", cfg.scale_rewards,
                                SCALE_REWARDS), ("kl", cfg.kl, KL_ESTIMATORS),
                                ("model.prompt_mode", cfg.model.prompt_mode, ("chat", "text")),
                                ("sampling.backend", cfg.sampling.backend, ("static", "hf"))):
        if value not in allowed:
            raise DistlabError(f"{key}={value!r} is not one of {', '.join(allowed)}")
    positive = {"steps": cfg.steps, "prompts_per_step": cfg.prompts_per_step, "num_generations": cfg.num_generations,
                "micro_batch_size": cfg.micro_batch_size, "num_iterations": cfg.num_iterations,
                "sampling.max_completion_length": cfg.sampling.max_completion_length}
    for key, value in positive.items():
        if value < 1:
            raise DistlabError(f"{key}={value} must be 1 or more")
    if cfg.lr <= 0 or cfg.beta < 0 or not 0 < cfg.epsilon < 1 or cfg.epsilon_high < 0:
        raise DistlabError(f"need lr > 0, beta >= 0, 0 < epsilon < 1 and epsilon_high >= 0 (got lr={cfg.lr}, "
                           f"beta={cfg.beta}, epsilon={cfg.epsilon}, epsilon_high={cfg.epsilon_high})")
    if cfg.num_generations < 2:
        raise DistlabError("num_generations=1 gives every completion advantage 0; use 2 or more (GRPO compares a group)")
    if cfg.prompts_per_step % world_size:
        raise DistlabError(f"prompts_per_step={cfg.prompts_per_step} does not split over {world_size} ranks; use a "
                           f"multiple of {world_size}")
    local = cfg.prompts_per_step // world_size * cfg.num_generations
    micro_steps = -(-local // cfg.micro_batch_size)
    if cfg.gradient_accumulation_steps and cfg.gradient_accumulation_steps != micro_steps:
        raise DistlabError(f"gradient_accumulation_steps={cfg.gradient_accumulation_steps} but each rank has {local} "
                           f"completions per step in micro-batches of {cfg.micro_batch_size} = {micro_steps} "
                           f"micro-steps; set gradient_accumulation_steps=0 or micro_batch_size="
                           f"{-(-local // cfg.gradient_accumulation_steps)}")
    if cfg.beta == 0 and cfg.placement.get("reference", "device") != "device":
        log.warning("beta=0: no reference model is loaded, placement.reference is unused")
