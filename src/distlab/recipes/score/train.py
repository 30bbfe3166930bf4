"""BiLevel SCoRe on code: two-turn self-correction RL, optionally with a guidance model and an ArCHer critic.

Read top to bottom, one step is:

1. take this rank's prompts from the global-batch sampler and play G episodes of each (``rollout.play``):
   y1 ~ policy(x); h ~ guidance(x, y1) when there is a guidance model; y2 ~ policy(x, y1, h, instruction);
   the sandbox scores y1 and y2 (and a second turn 2 without the hint, for the hint's effect);
2. turn rewards for the current stage (stage I: (0, r2); stage II: (r1, r2 + alpha (r2 - r1)));
3. advantages per turn: ``mc`` = turn returns minus the prompt group's mean; ``critic`` = one or more
   twin-Q/twin-V TD steps on the step's transitions, target critic soft-updated, then min Q - min V;
4. ``num_iterations`` clipped policy-gradient updates on y1 and y2 tokens only, with per-turn KL
   weights against the frozen reference (beta2 on y1 in stage I, beta1 elsewhere), normalised by
   global counts (world-size independent, as GRPO);
5. every ``guidance_every`` steps, a policy-gradient step of a trained guidance model on the
   improvement its hints caused (r2 - r1) minus length and code-leak penalties;
6. log, evaluate, checkpoint (every trainable model and optimizer, the target critic, the schedule
   position and the sampler); generation seeds come from (seed, step, rank), so resume is exact.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from distlab.logs import peak_memory
from distlab.optim_state import adamw

from distlab.checkpoint import Box
from distlab.dist import module_checksum
from distlab.placement import place
from distlab.recipes.grpo.loss import GlobalNorm, group_advantages, local_counts, policy_loss
from distlab.recipes.grpo.train import rollout_seed
from distlab.recipes.lm.build import load_placed, sequences
from distlab.recipes.lm.model_parts import unwrap_model
from distlab.recipes.lm.tasks_for import eval_tasks, train_tasks
from distlab.recipes.score import metrics as scm
from distlab.recipes.score.config import ScoreConfig, beta2_of, guidance_config, used_models
from distlab.recipes.score.critic import (Transitions, TwinHead, critic_advantages, critic_step, make_target,
                                          pooled_features)
from distlab.recipes.score.episode import Episode, leaks_code, pack
from distlab.recipes.score.logps import compute_device, logprobs
from distlab.recipes.score.evaluate import evaluate_self_correction, feedback_label
from distlab.recipes.score.objective import (guidance_rewards, kl_weights, known_before_turn2, mc_advantages,
                                             score_policy_loss, step_counts, token_advantages, turn_masks,
                                             turn_rewards, turn_returns)
from distlab.recipes.score.rollout import ExecScorer, Players, play
from distlab.recipes.score.schedule import StageSchedule
from distlab.recipes.score.warmup import packed_warmup
from distlab.sampler import GlobalBatchSampler
from distlab.wrap import clip_grad, no_sync, unwrap

log = logging.getLogger("distlab")


@dataclass
class Models:
    """Every model these options use, placed; the ones they do not use are None and were never loaded."""

    policy: nn.Module
    tok: Any
    reference: nn.Module | None = None
    guidance: nn.Module | None = None
    gtok: Any = None
    critic: nn.Module | None = None  # twin Q heads
    value: nn.Module | None = None  # twin V heads
    target_critic: nn.ModuleDict | None = None  # {"q", "v"}: followed by soft updates, never by gradients


def load_models(cfg: ScoreConfig, session) -> Models:
    rt = session.rt
    names = used_models(cfg)
    policy, tok = load_placed("policy", cfg, session, cfg.run.seed)
    m = Models(policy, tok)
    if "reference" in names:
        m.reference = load_placed("reference", cfg, session, cfg.run.seed, lora=False)[0]
    if "guidance" in names:
        m.guidance, m.gtok = load_placed("guidance", guidance_config(cfg), session, cfg.run.seed + 1)
    if "critic" in names:
        width = unwrap_model(unwrap(policy)).config.hidden_size
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.run.seed + 2)
            q, v = TwinHead(width, cfg.critic_hidden), TwinHead(width, cfg.critic_hidden)
        target = make_target(q, v)  # copied before placing: the target starts equal to the critic
        if cfg.dist.verify_init:
            rt.verify_identical(q, "initial critic")
            rt.verify_identical(v, "initial value")
        m.critic = place("critic", q, cfg.placement["critic"], cfg.models["critic"], rt, cfg.dist)
        m.value = place("value", v, cfg.placement["value"], cfg.models["value"], rt, cfg.dist)
        m.target_critic = place("target_critic", target, cfg.placement["target_critic"], cfg.models["target_critic"],
                                rt, cfg.dist)
    return m


def _dev(model: nn.Module) -> torch.device:
    return compute_device(model)


def _all_reduce(rt, t: torch.Tensor) -> torch.Tensor:
    """SUM over ranks, returned on the CPU."""
    if not rt.distributed:
        return t
    import torch.distributed as dist

    x = t.to(rt.comm_device)
    dist.all_reduce(x)
    return x.cpu()


def _logps(model, ids, attn, mask, cfg, grad: bool, temperature: float, entropy: bool = False):
    with torch.set_grad_enabled(grad):
        return logprobs(model, ids, attn, mask, chunk_tokens=cfg.logprob_chunk, temperature=temperature,
                        entropy=entropy)


def _micro_batches(n: int, size: int) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def _ends(episodes: list[Episode]) -> torch.Tensor:
    """Last token index of each prefix: s0 = x, (s0, a1) = x y1, s1 = x y1 h instr, (s1, a2) = everything."""
    rows = []
    for ep in episodes:
        s0 = len(ep.y1.prompt_ids) - 1
        s0a1 = s0 + len(ep.y1.token_ids)
        s1a2 = len(ep.ids) - 1
        rows.append([s0, s0a1, s1a2 - len(ep.y2.token_ids), s1a2])
    return torch.tensor(rows, dtype=torch.long)


def train(cfg: ScoreConfig, session) -> dict:
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    tasks, held_out = train_tasks(cfg.task), eval_tasks(cfg.task)
    few_shot = tasks[: cfg.task.few_shot]
    m = load_models(cfg, session)
    policy, tok = m.policy, m.tok
    opt = adamw([p for p in policy.parameters() if p.requires_grad], cfg.optim.state_dtype, lr=cfg.lr,
                weight_decay=cfg.weight_decay)
    session.track_model("policy", policy, [opt])
    g_opt = q_opt = v_opt = None
    if cfg.guidance == "trained":
        g_opt = adamw([p for p in m.guidance.parameters() if p.requires_grad], cfg.optim.state_dtype,
                      lr=cfg.guidance_lr, weight_decay=0.01)
        session.track_model("guidance", m.guidance, [g_opt])
    if m.critic is not None:
        q_opt = torch.optim.AdamW(m.critic.parameters(), lr=cfg.critic_lr)
        v_opt = torch.optim.AdamW(m.value.parameters(), lr=cfg.critic_lr)
        session.track_model("critic", m.critic, [q_opt])
        session.track_model("value", m.value, [v_opt])
        session.track("target_critic", m.target_critic)  # not trained by gradients, but it moves: it is state
    if m.reference is not None and cfg.sft_steps > 0:
        session.track("reference", m.reference)  # the warmed-up policy, not rebuildable from the source
    sampler = GlobalBatchSampler(len(tasks), cfg.prompts_per_step, rt.rank, rt.world_size, cfg.run.seed)
    schedule = StageSchedule(cfg.stage_schedule)
    start_eval = Box()  # the starting model's per-problem results, for the paired comparison at the end
    session.track("sampler", sampler)
    session.track("schedule", schedule)
    session.track("start_eval", start_eval)
    scorer = ExecScorer(cfg.sandbox, cfg.model.prompt_mode)
    players = Players(policy, tok, cfg.model.prompt_mode, m.guidance, m.gtok,
                      cfg.guidance_prompt_mode or cfg.model.prompt_mode)
    step = session.restore()
    if step == 0 and cfg.sft_steps > 0:
        packed_warmup(cfg, session, policy, tok, tasks)
        if m.reference is not None:  # KL is measured from the model RL starts from, not from random weights
            m.reference.load_state_dict(unwrap(policy).state_dict())
    if step == 0 and cfg.evaluation.before:
        start_eval.value = _evaluate(cfg, session, players, held_out, few_shot, scorer, step, "eval_start")
    progress = session.progress(cfg.steps, step)
    device = _dev(policy)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    beta2 = beta2_of(cfg)
    temp = cfg.sampling.temperature
    status, last = "completed", {}
    while step < cfg.steps:
        stage = schedule.stage
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        local = [tasks[i] for i in sampler.next()]
        seed = rollout_seed(cfg, step, rt.rank)
        episodes = play(cfg, players, local, few_shot, scorer, n=cfg.num_generations, temperature=temp,
                        hint_temperature=cfg.hint_temperature, seed=seed, no_hint=cfg.no_hint_sample)
        times["rollout_s"] = time.perf_counter() - t0
        # ALGO LOGIC: turn rewards of this stage, then per-turn advantages
        r1 = torch.tensor([ep.r1 for ep in episodes], dtype=torch.float32)
        r2 = torch.tensor([ep.r2 for ep in episodes], dtype=torch.float32)
        rew1, rew2 = turn_rewards(r1, r2, stage, cfg.alpha)
        ids, attn, roles = pack([ep.ids for ep in episodes], [ep.roles for ep in episodes], pad, device)
        t1 = time.perf_counter()
        extra: dict[str, float] = {}
        if cfg.advantage == "critic":
            feats = pooled_features(policy, ids, attn, _ends(episodes).to(device), cfg.micro_batch_size)
            trans = Transitions(feats[:, 0], feats[:, 1], feats[:, 2], feats[:, 3], rew1, rew2)
            global_rows = 4 * cfg.prompts_per_step * cfg.num_generations
            for _ in range(cfg.critic_updates):
                q_sum, v_sum = critic_step(m.critic, m.value, m.target_critic, q_opt, v_opt, trans, gamma=cfg.gamma,
                                           tau=cfg.tau, global_rows=global_rows, world_size=rt.world_size)
            a1, a2 = critic_advantages(m.critic, m.value, trans)
            extra.update(critic_q_loss_sum=q_sum, critic_v_loss_sum=v_sum, zero_var_groups=0.0)
        else:
            ret1, ret2 = turn_returns(rew1, rew2, cfg.gamma)
            a1, a2, zero_var = mc_advantages(ret1, ret2, cfg.num_generations, cfg.scale_rewards,
                                             known2=known_before_turn2(r1, stage, cfg.alpha))
            extra["zero_var_groups"] = zero_var * len(local)
        extra.update(adv_t1_sum=float(a1.sum()), adv_t2_sum=float(a2.sum()), adv_t1_sq=float((a1 * a1).sum()),
                     adv_t2_sq=float((a2 * a2).sum()))
        adv_tok = token_advantages(roles, a1, a2)
        kl_w = kl_weights(roles, stage, cfg.beta1, beta2)
        train_mask = turn_masks(roles)[0] | turn_masks(roles)[1]
        norm = GlobalNorm.from_counts(_all_reduce(rt, step_counts(roles)))
        times["advantage_s"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        batches = _micro_batches(len(episodes), cfg.micro_batch_size)
        old, ref = [], []
        with torch.no_grad():
            for sl in batches:
                old.append(_logps(policy, ids[sl], attn[sl], train_mask[sl], cfg, False, temp)[0]
                           if cfg.num_iterations > 1 else None)
                ref.append(_logps(m.reference, ids[sl], attn[sl], train_mask[sl], cfg, False, temp)[0].to(device)
                           if m.reference is not None else None)
        times["ref_logprobs_s"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        sums: dict[str, float] = {}
        for _ in range(cfg.num_iterations):
            for k, sl in enumerate(batches):
                with no_sync(policy, k < len(batches) - 1), session.autocast():
                    logp, ent = _logps(policy, ids[sl], attn[sl], train_mask[sl], cfg, True, temp, entropy=True)
                    loss, stats = score_policy_loss(logp, old[k], ref[k], adv_tok[sl], roles[sl], kl_w[sl],
                                                    epsilon=cfg.epsilon, kl=cfg.kl, loss_type=cfg.loss_type,
                                                    norm=norm, world_size=rt.world_size, entropy=ent)
                loss.backward()
                for key, val in stats.items():
                    sums[key] = sums.get(key, 0.0) + float(val)
            gnorm = clip_grad(policy, cfg.clip_grad)
            opt.step()
            opt.zero_grad(set_to_none=True)
        times["update_s"] = time.perf_counter() - t3
        if cfg.guidance == "trained" and (step + 1) % cfg.guidance_every == 0:
            t4 = time.perf_counter()
            extra.update(_guidance_update(cfg, session, m, g_opt, episodes))
            times["guidance_s"] = time.perf_counter() - t4
        schedule.advance()
        step += 1
        last = {**_step_metrics(cfg, rt, stage, episodes, sums, extra, scorer, times, gnorm, norm), **peak_memory(rt)}
        if step % cfg.log.every == 0 or step == cfg.steps:
            session.metrics.log(step, last)
        progress.update(step, acc_t1=last["acc_t1"], acc_t2=last["acc_t2"])
        if cfg.evaluation.eval_interval_steps and step % cfg.evaluation.eval_interval_steps == 0 and step < cfg.steps:
            _evaluate(cfg, session, players, held_out, few_shot, scorer, step, "eval")
        stop, cfg.steps = session.stop_or_end(step, cfg.steps)
        session.checkpoint(step, last=stop or step == cfg.steps)
        if stop:
            status = "preempted"
            break
    progress.close()
    result = {"status": status, "step": step, "train": last, "world_size": rt.world_size,
              "feedback": feedback_label(cfg), "schedule": schedule.state_dict(),
              "param_checksum": module_checksum(unwrap(policy)), "param_checksums": _checksums(m, cfg)}
    if status == "completed":
        final = _evaluate(cfg, session, players, held_out, few_shot, scorer, step, "eval")
        result["eval"] = _with_comparison(final, start_eval.value)
    scorer.close()
    return result


def _checksums(m: Models, cfg: ScoreConfig) -> dict[str, str]:
    """A fingerprint of every model that training changes (the resume test compares them one by one)."""
    out = {"policy": module_checksum(unwrap(m.policy))}
    if cfg.guidance == "trained":
        out["guidance"] = module_checksum(unwrap(m.guidance))
    if m.critic is not None:
        out.update(critic=module_checksum(unwrap(m.critic)), value=module_checksum(unwrap(m.value)),
                   target_critic=module_checksum(m.target_critic))
    return out


def _guidance_update(cfg: ScoreConfig, session, m: Models, g_opt, episodes: list[Episode]) -> dict[str, float]:
    """One policy-gradient step of the guidance on r2 - r1 less penalties; group baseline over the G hints."""
    rt = session.rt
    guidance = m.guidance
    device = _dev(guidance)
    pad = m.gtok.pad_token_id if m.gtok.pad_token_id is not None else 0
    hint_tokens = torch.tensor([len(ep.hint.token_ids) for ep in episodes], dtype=torch.float32)
    leaks = torch.tensor([leaks_code(ep.hint_text, cfg.leak_markers) for ep in episodes], dtype=torch.float32)
    r1 = torch.tensor([ep.r1 for ep in episodes])
    r2 = torch.tensor([ep.r2 for ep in episodes])
    g = guidance_rewards(r1, r2, hint_tokens, leaks, max_tokens=cfg.hint_max_tokens, len_penalty=cfg.hint_len_penalty,
                         leak_penalty=cfg.hint_leak_penalty)
    adv, _ = group_advantages(g, cfg.num_generations, "none")
    ids, attn, comp = sequences([ep.hint_prompt_ids for ep in episodes], [ep.hint.token_ids for ep in episodes],
                                pad, device)
    norm = GlobalNorm.from_counts(_all_reduce(rt, local_counts(comp)))
    batches = _micro_batches(len(episodes), cfg.micro_batch_size)
    loss_sum = 0.0
    for k, sl in enumerate(batches):
        with no_sync(guidance, k < len(batches) - 1), session.autocast():
            logp, _ = _logps(guidance, ids[sl], attn[sl], comp[sl], cfg, True, cfg.hint_temperature)
            loss, stats = policy_loss(logp, None, None, adv[sl].to(device), comp[sl], epsilon=cfg.epsilon,
                                      loss_type="grpo", norm=norm, world_size=rt.world_size)
        loss.backward()
        loss_sum += float(stats["objective"])
    clip_grad(guidance, cfg.clip_grad)
    g_opt.step()
    g_opt.zero_grad(set_to_none=True)
    return {"guidance_reward_sum": float(g.sum()), "guidance_objective": loss_sum, "guidance_updates": 1.0}


def _step_metrics(cfg, rt, stage, episodes, sums, extra, scorer, times, gnorm, norm: GlobalNorm) -> dict:
    rows = [_row(ep, cfg) for ep in episodes]
    local = {**scm.sums(rows), **{k: sums.get(k, 0.0) for k in ("kl_y1_sum", "kl_y2_sum", "tokens_y1", "tokens_y2",
                                                                "clip_low", "clip_high", "entropy_sum")},
             **extra, "truncated_y1": float(sum(ep.y1.truncated for ep in episodes)),
             "truncated_y2": float(sum(ep.y2.truncated for ep in episodes)), "groups": float(len(episodes)) /
             cfg.num_generations, **scorer.take_counts(), **{k: v for k, v in times.items()}}
    tot = rt.reduce_sums(local)
    n = max(tot["n"], 1.0)
    tok1, tok2 = max(tot["tokens_y1"], 1.0), max(tot["tokens_y2"], 1.0)
    out = {**scm.means(tot), "stage": 1.0 if stage == "I" else 2.0,
           "extrinsic": 1.0 if cfg.hint_sees_execution and cfg.guidance != "none" else 0.0,
           "kl_t1": tot["kl_y1_sum"] / tok1, "kl_t2": tot["kl_y2_sum"] / tok2,
           "len_t1": tot["tokens_y1"] / n, "len_t2": tot["tokens_y2"] / n,
           "clip_fraction": (tot["clip_low"] + tot["clip_high"]) / (tok1 + tok2),
           "entropy": tot["entropy_sum"] / (tok1 + tok2), "truncated_t1": tot["truncated_y1"] / n,
           "truncated_t2": tot["truncated_y2"] / n, "zero_var_fraction": tot["zero_var_groups"] / max(tot["groups"], 1),
           "adv_t1_mean": tot["adv_t1_sum"] / n, "adv_t2_mean": tot["adv_t2_sum"] / n,
           "adv_t1_rms": (tot["adv_t1_sq"] / n) ** 0.5, "adv_t2_rms": (tot["adv_t2_sq"] / n) ** 0.5,
           "grad_norm": gnorm, "global_tokens": norm.num_tokens, "sandbox_timeouts": tot["sandbox_timeouts"],
           "suspected_hacks": tot["suspected_hacks"], "no_code": tot["no_code"],
           **{k: tot[k] / rt.world_size for k in times}}
    if "critic_q_loss_sum" in tot:
        out["critic_q_loss"] = tot["critic_q_loss_sum"] / (4 * n)
        out["critic_v_loss"] = tot["critic_v_loss_sum"] / (4 * n)
    if tot.get("guidance_updates"):
        out["guidance_reward"] = tot["guidance_reward_sum"] / n
    return out


def _row(ep: Episode, cfg) -> dict:
    hinted = ep.hint is not None
    return {"task_id": ep.task.task_id, "r1": ep.r1, "r2": ep.r2, "r2_no_hint": ep.r2_no_hint,
            "hint_tokens": len(ep.hint.token_ids) if hinted else None,
            "leak": leaks_code(ep.hint_text, cfg.leak_markers) if hinted else False}


def _evaluate(cfg, session, players, tasks, few_shot, scorer, step: int, split: str) -> dict:
    rt = session.rt
    t0 = time.perf_counter()
    out = evaluate_self_correction(cfg, players, tasks, few_shot, scorer, rt, seed=cfg.run.seed + 31)
    metrics = {**out["metrics"], "eval_s": time.perf_counter() - t0}
    session.metrics.log(step, metrics, split=split)
    if rt.is_main:
        from distlab.atomic import atomic_write_json

        atomic_write_json(session.run_dir / f"{split}_step{step:06d}_problems.json", out["per_problem"])
        log.info("%s @%d (%s): acc@t1 %.3f  acc@t2 %.3f  delta %+.3f [%.3f, %.3f]  i->c %.3f  c->i %.3f on %d problems",
                 split, step, feedback_label(cfg), metrics["acc_t1"], metrics["acc_t2"], metrics["delta_t1_t2"],
                 metrics.get("delta_t1_t2_low", float("nan")), metrics.get("delta_t1_t2_high", float("nan")),
                 metrics["delta_i_to_c"], metrics["delta_c_to_i"], metrics["n_problems"])
    return {"metrics": metrics, "per_problem": out["per_problem"]}


def _with_comparison(final: dict, start: dict | None) -> dict:
    """Final metrics plus paired before/after comparisons on the same problems (acc@t2 and delta)."""
    from distlab.recipes.lm.passk import paired_comparison

    metrics = dict(final["metrics"])
    if start and len(start["per_problem"]) == len(final["per_problem"]) > 1:
        for key in ("acc_t1", "acc_t2", "delta_t1_t2"):
            metrics[f"start_{key}"] = start["metrics"][key]
        before = [r["r2"] - r["r1"] for r in start["per_problem"]]
        after = [r["r2"] - r["r1"] for r in final["per_problem"]]
        cmp = paired_comparison(before, after)
        metrics.update({"delta_change": cmp.diff, "delta_change_low": cmp.low, "delta_change_high": cmp.high,
                        "delta_change_significant": cmp.significant})
        cmp2 = paired_comparison([r["r2"] for r in start["per_problem"]], [r["r2"] for r in final["per_problem"]])
        metrics.update({"acc_t2_change": cmp2.diff, "acc_t2_change_low": cmp2.low, "acc_t2_change_high": cmp2.high})
    return metrics
