"""The ``ppo`` recipe: PPO with MLP, LSTM or cascaded-LSTM policies on Gymnasium envs or the trading env.

The algorithm lives in :mod:`distlab.recipes.ppo.algo`; this module binds it to the core: typed
config and overrides, torchrun/SLURM launch, DCP checkpoints with resume, metrics and progress.
"""

from __future__ import annotations

import logging
import shlex

from distlab.errors import DistlabError
from distlab.recipe import Recipe
from distlab.recipes.ppo.algo import PPOHooks
from distlab.recipes.ppo.algo import train as ppo_train
from distlab.recipes.ppo.backtest_cli import register_commands
from distlab.recipes.ppo.config import PPORecipeConfig, to_algo_config
from distlab.recipes.ppo.envs import check_env_id, check_env_impl
from distlab.recipes.ppo.trading import check_market_files

__all__ = ["RECIPE", "PPORecipeConfig", "to_algo_config", "train", "validate"]

log = logging.getLogger("distlab")


def train(cfg: PPORecipeConfig, session) -> dict:
    algo_cfg = to_algo_config(cfg, str(session.rt.device))
    hooks = _CoreHooks(cfg, session, algo_cfg)
    summary = ppo_train(algo_cfg, hooks, rt=session.rt, amp=session.amp)
    hooks.close(summary)
    # the closing line and the launcher read "step" and "steps": for PPO an update, so they say "update 8 of 8"
    # no `distlab eval` for PPO: a trading policy is judged by a backtest, a Gymnasium one by its returns above
    evaluate_with = f"distlab backtest {shlex.quote(str(session.run_dir))}" if cfg.env == "trading" else None
    return {"status": hooks.status, **summary, "step": summary["updates"], "steps": hooks.num_updates,
            "step_unit": "update", "evaluate_with": evaluate_with}


class _CoreHooks(PPOHooks):
    """Checkpoint, resume, log and stop PPO through the core session."""

    def __init__(self, cfg: PPORecipeConfig, session, algo_cfg) -> None:
        self.cfg, self.session, self.algo_cfg = cfg, session, algo_cfg
        world = session.rt.world_size
        self.num_updates = algo_cfg.total_timesteps // (algo_cfg.num_envs * algo_cfg.num_steps * world)
        self.status, self.episodes, self.run = "completed", 0, None
        self.progress = None
        self.saved_last = False  # on_update already wrote the final checkpoint: close() need not

    def bind(self, run) -> None:
        self.run = run
        s = self.session
        s.track_model("policy", run.policy, [run.optimizer])
        s.track("minibatch_rng", _GeneratorState(run.generator), per_rank=True)
        s.counters.update(update=0, global_step=0, episodes=0)
        s.restore()
        run.update, run.global_step = int(s.counters["update"]), int(s.counters["global_step"])
        self.episodes = int(s.counters["episodes"])
        self.progress = self.session.progress(self.num_updates, run.update, unit="update")

    def _count(self, update: int) -> None:
        self.session.counters.update(update=update, global_step=self.run.global_step, episodes=self.episodes)

    def on_update(self, update_idx: int, global_step: int, metrics: dict[str, float]) -> bool:
        self.episodes += int(metrics.get("episodes", 0))
        if update_idx % self.cfg.log.every == 0 or update_idx == self.num_updates:
            self.session.metrics.log(global_step, {**metrics, "update": update_idx, "episodes_total": self.episodes,
                                                   "env_steps_per_s": metrics.get("sps", 0.0)})
        self.progress.update(update_idx, **progress_fields(self.episodes, metrics))
        done_by_episodes = self.cfg.num_episodes > 0 and self.episodes >= self.cfg.num_episodes
        self._count(update_idx)
        stop, end = self.session.end_step(update_idx, self.num_updates)
        self.saved_last = stop or update_idx >= end
        if stop:
            self.status = "preempted"
        return self.saved_last or done_by_episodes

    def close(self, summary: dict) -> None:
        if self.status == "completed" and not self.saved_last:  # ended early (num_episodes, stop_return)
            self._count(self.run.update)
            self.session.checkpoint(self.run.update, last=True)
        self.progress.close()
        self.session.metrics.log(summary["global_step"], {k: v for k, v in summary.items()
                                                          if isinstance(v, (int, float)) and v is not None},
                                 split="summary")


def progress_fields(episodes: int, metrics: dict[str, float]) -> dict[str, float | int]:
    """What the progress line shows: episodes ended so far, the mean return of the last 100 (named as in
    metrics.jsonl, and left out until an episode has ended rather than shown as nan) and env steps per second."""
    fields: dict[str, float | int] = {"episodes": episodes}
    ret = metrics.get("mean_return_100", float("nan"))
    if ret == ret:
        fields["mean_return_100"] = ret
    fields["env_steps_per_s"] = metrics.get("sps", 0.0)
    return fields


class _GeneratorState:
    def __init__(self, gen):
        self.gen = gen

    def state_dict(self):
        return {"state": self.gen.get_state()}

    def load_state_dict(self, sd):
        self.gen.set_state(sd["state"])


def validate(cfg: PPORecipeConfig, world_size: int) -> None:
    if cfg.policy not in ("mlp", "lstm", "clstm"):
        raise DistlabError(f"policy={cfg.policy!r} is not one of mlp, lstm, clstm")
    check_env_id(cfg.env)
    trading = cfg.env == "trading"
    check_env_impl(cfg.env_impl, cfg.async_envs and trading, cfg.mask_velocity and trading)
    if trading:
        check_market_files(cfg.trading_data)
    per_update = cfg.num_envs * cfg.num_steps * world_size
    if cfg.total_timesteps < per_update:
        raise DistlabError(f"total_timesteps={cfg.total_timesteps} is less than one update ({per_update} = num_envs x "
                           f"num_steps x {world_size} ranks); raise total_timesteps")
    if cfg.num_envs % cfg.num_minibatches and cfg.policy != "mlp":
        raise DistlabError(f"num_envs={cfg.num_envs} must be divisible by num_minibatches={cfg.num_minibatches} for "
                           f"recurrent policies (minibatches are whole env sequences)")


RECIPE = Recipe(name="ppo", config=PPORecipeConfig, train=train, lr_keys=("lr",), validate=validate,
                register_commands=register_commands, report_metrics=("mean_return_100", "solved_at_step"),
                percent_metrics=(), steps_key="total_timesteps", supports=frozenset(),
                positive_keys=frozenset({"lr", "total_timesteps", "num_envs", "num_steps", "num_minibatches",
                                         "update_epochs", "hidden_size"}),
                aliases={"--num_episodes": "num_episodes", "--batch_size": "num_steps", "--num-episodes": "num_episodes",
                         "--batch-size": "num_steps"},
                # two updates of the default 4 envs on one rank (PPO has no evaluation phase: a backtest is separate)
                smoke={"total_timesteps": 256, "num_steps": 32, "log.every": 1})
