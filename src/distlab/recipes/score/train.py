"""BiLevel SCoRe on code: two-turn self-correction RL, optionally with a guidance model and an ArCHer critic.

Read top to bottom, one step is:

1. take this rank's prompts from the global-batch sampler and play G episodes of each (``rollout.play``):
   y1 ~ policy(x); h ~ guidance(x, y1) when there is a guidance model; y2 ~ policy(x, y1, h, instruction);
   the sandbox scores y1 and y2 (evaluation also samples turn 2 without the hint, for the hint's effect);
2. turn rewards for the current stage (stage I: (0, r2); stage II: (r1, r2 + alpha (r2 - r1))), and turn
   returns R1 = rew1 + gamma rew2, R2 = rew2 (gamma = 1 by default: turn 1 is credited with the episode);
3. advantages per turn: ``mc`` = turn returns minus the prompt group's mean; ``critic`` = min Q - min V of the
   critic as it stands, then one or more twin-Q/twin-V TD steps on the step's transitions (target critic
   soft-updated), so no transition is scored by a fit to itself;
4. ``num_iterations`` clipped policy-gradient updates on y1 and y2 tokens only (``lm/update.py``), with
   per-turn KL weights against the frozen reference (beta2 on y1 in stage I, beta1 elsewhere),
   normalised by global counts (world-size independent, as GRPO);
5. every ``guidance_every`` steps, a policy-gradient step of a trained guidance model on the
   improvement its hints caused (r2 - r1) minus length and code-leak penalties, each hint compared with the
   prompt's hints after an equally scored y1 (``guidance_baseline``);
6. log, evaluate, checkpoint (every trainable model and optimizer, the target critic, the schedule
   position and the sampler); generation seeds come from (seed, step, rank), so resume is exact.
"""

from __future__ import annotations

from functools import partial

import torch

from distlab.recipes.lm.eval.evaluation import logged_evaluation
from distlab.recipes.lm.models.placed import SamplingCopy
from distlab.recipes.lm.pg.batching import micro_batches, sequences
from distlab.recipes.lm.pg.logprobs import logprobs
from distlab.recipes.lm.pg.loss import GlobalNorm, local_counts, policy_loss
from distlab.recipes.lm.pg.nonfinite import SkipProbe, micro_batch_record
from distlab.recipes.lm.pg.update import frozen_logprobs, policy_update
from distlab.recipes.lm.pg.warmup import supervised_warmup
from distlab.recipes.lm.rewards.scorer import RewardScorer
from distlab.recipes.lm.rollout.seeds import rollout_seed
from distlab.recipes.lm.tasks.prompts import prompt_text
from distlab.recipes.lm.tasks.select import task_split
from distlab.recipes.score import metrics as scm
from distlab.recipes.score.config import ScoreConfig, beta2_of
from distlab.recipes.score.critic import Transitions, pooled_features, score_then_fit
from distlab.recipes.score.episode import Episode, guidance_length_bound, leaks_code, pack, turn2_length_bound
from distlab.recipes.score.evaluate import evaluate_self_correction, feedback_label, paired_changes
from distlab.recipes.score.models import Models, checksums, load_models
from distlab.recipes.score.objective import (TurnNorm, bandit_advantages, guidance_advantages, guidance_rewards,
                                             kl_weights, mc_advantages, score_policy_loss, selective_rewards,
                                             shuffled_pairs, step_counts, token_advantages, turn_masks, turn_rewards,
                                             turn_returns)
from distlab.recipes.score.rollout import CacheShapes, Players, play
from distlab.recipes.score.schedule import StageSchedule
from distlab.run.logs import mark_peak, peak_memory
from distlab.run.profiling import phase_time
from distlab.runtime.dist import full_state_dict
from distlab.runtime.sampler import GlobalBatchSampler
from distlab.training.checkpoint import Box
from distlab.training.loop import count_skipped_steps, final_evaluation, run_fields, run_steps
from distlab.training.optim_state import adamw
from distlab.training.placement import DTYPES, compute_device
from distlab.training.wrap import unwrap


def train(cfg: ScoreConfig, session) -> dict:
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    tasks, held_out, few_shot = task_split(cfg.task)
    m = load_models(cfg, session)
    opts = _optimizers(cfg, session, m)
    if m.reference is not None and cfg.sft_steps > 0:
        session.track("reference", m.reference)  # the warmed-up policy, not rebuildable from the source
    sampler = GlobalBatchSampler(len(tasks), cfg.prompts_per_step, rt.rank, rt.world_size, cfg.run.seed)
    schedule = StageSchedule(cfg.stage_schedule)
    start_eval = Box()  # the starting model's per-problem results, for the paired comparison at the end
    session.track("sampler", sampler)
    session.track("schedule", schedule)
    session.track("start_eval", start_eval)
    scorer = RewardScorer(cfg.sandbox, cfg.model.prompt_mode, rt.local_world_size)
    count_skipped_steps(session)
    step = session.restore()
    if step == 0 and cfg.sft_steps > 0:
        supervised_warmup(session, m.policy, m.tok, tasks, steps=cfg.sft_steps, lr=cfg.sft_lr,
                          per_rank=max(1, cfg.sft_batch_size // rt.world_size), pack=cfg.sft_pack,
                          seed=cfg.run.seed, chunk_tokens=cfg.logprob_chunk)
        if m.reference is not None:  # KL is measured from the model RL starts from, not from random weights
            m.reference.load_state_dict(full_state_dict(unwrap(m.policy)))  # gathered if sharded
    sampling = _sampling_copies(cfg, m)  # after restore and warm-up: they copy the weights as they are now
    players = Players(sampling["policy"].module, m.tok, cfg.model.prompt_mode,
                      sampling["guidance"].module if m.guidance is not None else None, m.gtok,
                      cfg.guidance_prompt_mode or cfg.model.prompt_mode,
                      cache_shapes(cfg, rt.world_size, m, tasks, few_shot))
    evaluate = partial(_evaluate, cfg, session, players, held_out, few_shot, scorer)

    def one_step(step: int) -> dict:
        local = [tasks[i] for i in sampler.next()]
        metrics = score_step(cfg, session, m, opts, players, schedule.stage, local, few_shot, scorer, step)
        for weights in sampling.values():
            weights.refresh()
        schedule.advance()
        return metrics

    status, step, last = run_steps(session, cfg, step, one_step, evaluate, shown=("acc_t1", "acc_t2"),
                                   start_eval=start_eval)
    status, final = final_evaluation(session, status, step, evaluate)
    result = {"status": status, "step": step, **run_fields(cfg, status, step), "train": last,
              "world_size": rt.world_size,
              "feedback": feedback_label(cfg), "schedule": schedule.state_dict(),
              "param_checksums": checksums(m, cfg)}
    result["param_checksum"] = result["param_checksums"]["policy"]
    if final is not None:
        result["eval"] = _with_comparison(final, start_eval.value)
    scorer.close()
    return result


def cache_shapes(cfg: ScoreConfig, world_size: int, m: Models, tasks, few_shot) -> CacheShapes:
    """The training rollouts' fixed cache shapes, from the whole task set (one compiled decode step per model)."""
    mode, s = cfg.model.prompt_mode, cfg.sampling
    prompts = [prompt_text(t, m.tok, mode, few_shot) for t in tasks]
    hint = cfg.hint_max_tokens if m.guidance is not None else 0
    policy = turn2_length_bound(tasks, m.tok, mode, prompts, cfg.instruction, few_shot, cfg.restate_problem,
                                s.max_completion_length, hint,
                                cfg.error_tail_chars if cfg.policy_sees_execution else -1)
    guidance = (guidance_length_bound(tasks, m.gtok, cfg.guidance_prompt_mode or mode, s.max_completion_length,
                                      cfg.error_tail_chars, cfg.hint_sees_execution)
                if m.guidance is not None else None)
    return CacheShapes(policy, guidance, cfg.rows_per_rank(world_size))


def _sampling_copies(cfg: ScoreConfig, m: Models) -> dict[str, SamplingCopy]:
    """The weights the policy and the guidance generate from (narrow copies of trained fp32 weights)."""
    out = {"policy": SamplingCopy(m.policy, DTYPES[cfg.models["policy"].dtype])}
    if m.guidance is not None:
        out["guidance"] = SamplingCopy(m.guidance, DTYPES[cfg.models["guidance"].dtype])
    return out


def _optimizers(cfg: ScoreConfig, session, m: Models) -> dict[str, torch.optim.Optimizer]:
    """An optimizer per trained model, each registered with its model for every checkpoint."""
    opts = {"policy": adamw([p for p in m.policy.parameters() if p.requires_grad], cfg.optim.state_dtype,
                            lr=cfg.lr, weight_decay=cfg.weight_decay)}
    session.track_model("policy", m.policy, [opts["policy"]])
    if cfg.guidance == "trained":
        opts["guidance"] = adamw([p for p in m.guidance.parameters() if p.requires_grad], cfg.optim.state_dtype,
                                 lr=cfg.guidance_lr, weight_decay=0.01)
        session.track_model("guidance", m.guidance, [opts["guidance"]])
    if m.critic is not None:
        opts["critic"] = torch.optim.AdamW(m.critic.parameters(), lr=cfg.critic_lr)
        opts["value"] = torch.optim.AdamW(m.value.parameters(), lr=cfg.critic_lr)
        session.track_model("critic", m.critic, [opts["critic"]])
        session.track_model("value", m.value, [opts["value"]])
        session.track("target_critic", m.target_critic)  # not trained by gradients, but it moves: it is state
    return opts


def _ends(episodes: list[Episode]) -> torch.Tensor:
    """Last token index of each prefix: s0 = x, (s0, a1) = x y1, s1 = x y1 h instr, (s1, a2) = everything."""
    rows = []
    for ep in episodes:
        s0 = len(ep.y1.prompt_ids) - 1
        s0a1 = s0 + len(ep.y1.token_ids)
        s1a2 = len(ep.ids) - 1
        rows.append([s0, s0a1, s1a2 - len(ep.y2.token_ids), s1a2])
    return torch.tensor(rows, dtype=torch.long)


def arm_rewards(cfg: ScoreConfig, episodes: list[Episode], stage: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each episode's turn rewards ``(rew1, rew2)`` under ``cfg.arm`` (``score``: this stage's SCoRe rewards;
    ``selective``: r1 and r2 plus the verdict bonus; ``bandit_t2``: (r1, r2), only turn 2 is trained), permuted
    across the episodes with ``shuffle_rewards`` (the control arm; ``seed`` draws the permutation)."""
    r1 = torch.tensor([ep.r1 for ep in episodes], dtype=torch.float32)
    r2 = torch.tensor([ep.r2 for ep in episodes], dtype=torch.float32)
    if cfg.arm == "selective":
        kept = torch.tensor([bool(ep.kept) for ep in episodes])
        rew1, rew2 = selective_rewards(r1, r2, kept, cfg.verify_bonus)
    elif cfg.arm == "bandit_t2":
        rew1, rew2 = r1, r2
    else:
        rew1, rew2 = turn_rewards(r1, r2, stage, cfg.alpha)
    return shuffled_pairs(rew1, rew2, seed) if cfg.shuffle_rewards else (rew1, rew2)


def _advantages(cfg: ScoreConfig, session, m: Models, opts, episodes, ids, attn, stage: str, extra: dict,
                seed: int):
    """Per-episode turn advantages ``(A1, A2)`` for this stage and arm, from Monte Carlo returns or the critic."""
    rew1, rew2 = arm_rewards(cfg, episodes, stage, seed)
    if cfg.arm == "bandit_t2":  # turn 1 untrained; turn 2 against the prompt's turn 2s after an equal r1
        a1, a2 = bandit_advantages(rew1, rew2, cfg.num_generations)
        extra["zero_var_groups"] = float((a2.reshape(-1, cfg.num_generations) == 0).all(1).sum())
        return a1, a2
    if cfg.advantage == "critic":
        feats = pooled_features(m.policy, ids, attn, _ends(episodes).to(ids.device), cfg.micro_batch_size)
        trans = Transitions(feats[:, 0], feats[:, 1], feats[:, 2], feats[:, 3], rew1, rew2)
        a1, a2, q_sum, v_sum = score_then_fit(m.critic, m.value, m.target_critic, opts["critic"], opts["value"],
                                              trans, updates=cfg.critic_updates, gamma=cfg.gamma, tau=cfg.tau,
                                              global_rows=4 * cfg.prompts_per_step * cfg.num_generations,
                                              world_size=session.rt.world_size, amp=session.amp)
        extra.update(critic_q_loss_sum=q_sum, critic_v_loss_sum=v_sum, zero_var_groups=0.0)
        return a1, a2
    ret1, ret2 = turn_returns(rew1, rew2, cfg.gamma)
    a1, a2, zero_var = mc_advantages(ret1, ret2, cfg.num_generations, cfg.scale_rewards)
    extra["zero_var_groups"] = zero_var * (len(episodes) // cfg.num_generations)
    return a1, a2


def score_step(cfg: ScoreConfig, session, m: Models, opts, players: Players, stage: str, local, few_shot,
               scorer: RewardScorer, step: int) -> dict:
    """One SCoRe step on this rank's prompts ``local``; returns the step's metrics (identical on every rank)."""
    rt = session.rt
    times: dict[str, float] = {}
    t0 = phase_time()
    temp = cfg.sampling.temperature
    episodes = play(cfg, players, local, few_shot, scorer, n=cfg.num_generations, temperature=temp,
                    hint_temperature=cfg.hint_temperature, seed=rollout_seed(cfg.run.seed, step, rt.rank),
                    no_hint=False, fixed=True,  # the no-hint turn 2 is an evaluation diagnostic, not training compute
                    phase=session.phase)
    times["rollout_s"] = phase_time() - t0
    mark_peak(rt, "rollout", times)
    # ALGO LOGIC: turn rewards of this stage, then per-turn advantages
    device = compute_device(m.policy)
    pad = m.tok.pad_token_id if m.tok.pad_token_id is not None else 0
    ids, attn, roles = pack([ep.ids for ep in episodes], [ep.roles for ep in episodes], pad, device)
    t1 = phase_time()
    extra: dict[str, float] = {}
    a1, a2 = _advantages(cfg, session, m, opts, episodes, ids, attn, stage, extra,
                         rollout_seed(cfg.run.seed, step, rt.rank))
    extra.update(adv_t1_sum=float(a1.sum()), adv_t2_sum=float(a2.sum()), adv_t1_sq=float((a1 * a1).sum()),
                 adv_t2_sq=float((a2 * a2).sum()))
    adv_tok = token_advantages(roles, a1, a2)
    kl_w = kl_weights(roles, stage, cfg.beta1, beta2_of(cfg))
    m1, m2 = turn_masks(roles)
    turns = (2,) if cfg.arm == "bandit_t2" else (1, 2)  # bandit_t2: turn-1 tokens carry no gradient, not even KL
    train_mask = m2 if turns == (2,) else m1 | m2
    norm = TurnNorm.from_counts(rt.all_reduce_sum(step_counts(roles)).cpu())
    times["advantage_s"] = phase_time() - t1
    t2 = phase_time()
    batches = micro_batches(len(episodes), cfg.micro_batch_size, attn)  # each cut to its own widest episode
    frozen = partial(frozen_logprobs, session, ids=ids, attn=attn, mask=train_mask, slices=batches,
                     chunk_tokens=cfg.logprob_chunk, temperature=temp, device=device, pack=cfg.padding_free)
    old = frozen(m.policy if cfg.num_iterations > 1 else None)
    ref = frozen(m.reference)
    times["ref_logprobs_s"] = phase_time() - t2
    mark_peak(rt, "ref", times)

    def micro_loss(k: int):
        sl = batches[k]
        logp, ent = logprobs(m.policy, ids[sl], attn[sl], train_mask[sl], chunk_tokens=cfg.logprob_chunk,
                             temperature=temp, entropy=True, pack=cfg.padding_free)
        return score_policy_loss(logp, old[k], ref[k], adv_tok[sl], roles[sl], kl_w[sl], epsilon=cfg.epsilon,
                                 kl=cfg.kl, loss_type=cfg.loss_type, norm=norm, world_size=rt.world_size, entropy=ent,
                                 turns=turns)

    t3 = phase_time()
    def record(k: int) -> dict:
        sl = batches[k]
        return micro_batch_record(session, m.policy, ids[sl], attn[sl], train_mask[sl], ref[k], kl=cfg.kl,
                                  chunk_tokens=cfg.logprob_chunk, temperature=temp, pack=cfg.padding_free)

    sums, gnorm = policy_update(session, m.policy, opts["policy"], len(batches), micro_loss,
                                iterations=cfg.num_iterations, max_grad_norm=cfg.clip_grad, marks=times,
                                probe=SkipProbe(session.run_dir, step, rt.rank, record))
    times["update_s"] = phase_time() - t3
    mark_peak(rt, "update", times)
    if cfg.guidance == "trained" and (step + 1) % cfg.guidance_every == 0:
        t4 = phase_time()
        extra.update(_guidance_update(cfg, session, m, opts["guidance"], episodes, step))
        times["guidance_s"] = phase_time() - t4
    return {**_step_metrics(cfg, rt, stage, episodes, sums, extra, scorer, times, gnorm, norm), **peak_memory(rt)}


def _guidance_update(cfg: ScoreConfig, session, m: Models, g_opt, episodes: list[Episode], step: int
                     ) -> dict[str, float]:
    """One policy-gradient step of the guidance on r2 - r1 less penalties; group baseline over the G hints."""
    rt = session.rt
    device = compute_device(m.guidance)
    pad = m.gtok.pad_token_id if m.gtok.pad_token_id is not None else 0
    hint_tokens = torch.tensor([len(ep.hint.token_ids) for ep in episodes], dtype=torch.float32)
    leaks = torch.tensor([leaks_code(ep.hint_text, cfg.leak_markers) for ep in episodes], dtype=torch.float32)
    g = guidance_rewards(torch.tensor([ep.r1 for ep in episodes]), torch.tensor([ep.r2 for ep in episodes]),
                         hint_tokens, leaks, max_tokens=cfg.hint_max_tokens, len_penalty=cfg.hint_len_penalty,
                         leak_penalty=cfg.hint_leak_penalty)
    adv = guidance_advantages(g, torch.tensor([ep.r1 for ep in episodes]), cfg.num_generations,
                              cfg.guidance_baseline.value)
    ids, attn, comp = sequences([ep.hint_prompt_ids for ep in episodes], [ep.hint.token_ids for ep in episodes],
                                pad, device)
    norm = GlobalNorm.from_counts(rt.all_reduce_sum(local_counts(comp)).cpu())
    batches = micro_batches(len(episodes), cfg.micro_batch_size, attn)

    def micro_loss(k: int):
        sl = batches[k]
        logp, _ = logprobs(m.guidance, ids[sl], attn[sl], comp[sl], chunk_tokens=cfg.logprob_chunk,
                           temperature=cfg.hint_temperature)
        return policy_loss(logp, None, None, adv[sl[0]].to(device), comp[sl], epsilon=cfg.epsilon, loss_type="grpo",
                           norm=norm, world_size=rt.world_size)

    def record(k: int) -> dict:  # no reference: the guidance trains without KL
        sl = batches[k]
        return micro_batch_record(session, m.guidance, ids[sl], attn[sl], comp[sl], None, kl=cfg.kl,
                                  chunk_tokens=cfg.logprob_chunk, temperature=cfg.hint_temperature)

    sums, gnorm = policy_update(session, m.guidance, g_opt, len(batches), micro_loss, max_grad_norm=cfg.clip_grad,
                                name="guidance", probe=SkipProbe(session.run_dir, step, rt.rank, record))
    return {"guidance_reward_sum": float(g.sum()), "guidance_objective": sums["objective"], "guidance_updates": 1.0,
            "guidance_grad_norm": gnorm}


def _step_metrics(cfg, rt, stage, episodes, sums, extra, scorer, times, gnorm, norm: TurnNorm) -> dict:
    rows = [_row(ep, cfg) for ep in episodes]
    local = {**scm.sums(rows), **{k: sums.get(k, 0.0) for k in ("kl_y1_sum", "kl_y2_sum", "tokens_y1", "tokens_y2",
                                                                "clip_low", "clip_high", "entropy_sum")},
             **extra, "truncated_y1": float(sum(ep.y1.truncated for ep in episodes)),
             "truncated_y2": float(sum(ep.y2.truncated for ep in episodes)),
             "kept": float(sum(bool(ep.kept) for ep in episodes)),
             "y1_tokens": float(sum(len(ep.y1.token_ids) for ep in episodes)),
             "y2_tokens": float(sum(len(ep.y2.token_ids) for ep in episodes)), "groups": float(len(episodes)) /
             cfg.num_generations, **scorer.take_counts(), **times}
    tot = rt.reduce_sums(local)
    n = max(tot["n"], 1.0)
    tok1, tok2 = max(tot["tokens_y1"], 1.0), max(tot["tokens_y2"], 1.0)
    trained_tokens = max(tot["tokens_y1"] + tot["tokens_y2"], 1.0)  # bandit_t2 trains no y1 token
    out = {**scm.means(tot), "stage": 1.0 if stage == "I" else 2.0,
           "extrinsic": 1.0 if feedback_label(cfg) == "extrinsic" else 0.0, "keep_rate": tot["kept"] / n,
           "kl_t1": tot["kl_y1_sum"] / tok1, "kl_t2": tot["kl_y2_sum"] / tok2,
           "len_t1": tot["y1_tokens"] / n, "len_t2": tot["y2_tokens"] / n,  # sampled, trained or not
           "clip_fraction": (tot["clip_low"] + tot["clip_high"]) / trained_tokens,
           "entropy": tot["entropy_sum"] / trained_tokens, "truncated_t1": tot["truncated_y1"] / n,
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
        out["guidance_grad_norm"] = tot["guidance_grad_norm"] / rt.world_size  # the same norm on every rank
    return out


def _row(ep: Episode, cfg) -> dict:
    hinted = ep.hint is not None
    return {"task_id": ep.task.task_id, "r1": ep.r1, "r2": ep.r2, "r2_no_hint": ep.r2_no_hint,
            "hint_tokens": len(ep.hint.token_ids) if hinted else None,
            "leak": leaks_code(ep.hint_text, cfg.leak_markers) if hinted else False}


def _evaluate(cfg, session, players, tasks, few_shot, scorer, step: int, split: str) -> dict:
    def run(progress) -> dict:
        return evaluate_self_correction(cfg, players, tasks, few_shot, scorer, session.rt, seed=cfg.run.seed + 31,
                                        progress=progress)

    def describe(m: dict) -> str:
        return (f"({feedback_label(cfg)}) acc@t1 {m['acc_t1']:.3f}  acc@t2 {m['acc_t2']:.3f}  delta "
                f"{m['delta_t1_t2']:+.3f} [{m.get('delta_t1_t2_low', float('nan')):.3f}, "
                f"{m.get('delta_t1_t2_high', float('nan')):.3f}] (McNemar p {m.get('delta_t1_t2_p', float('nan')):.3f})"
                f"  i->c {m['delta_i_to_c']:.3f}  c->i "
                f"{m['delta_c_to_i']:.3f} on {m['n_problems']} problems")

    return logged_evaluation(session, step, split, run, describe)


def _with_comparison(final: dict, start: dict | None) -> dict:
    """Final metrics plus paired before/after comparisons on the same problems (acc@t1, acc@t2 and delta)."""
    metrics = dict(final["metrics"])
    if start and len(start["per_problem"]) == len(final["per_problem"]) > 1:
        for key in ("acc_t1", "acc_t2", "delta_t1_t2"):
            metrics[f"start_{key}"] = start["metrics"][key]
        metrics.update(paired_changes(start["per_problem"], final["per_problem"]))
    return metrics
