"""Several placed models in one run, small enough for a CPU test: what GRPO and SCoRe need from the core.

A trainable policy is pulled towards a frozen reference (a KL term, the reference on ``cpu`` by default),
a trainable critic regresses a TD target from a target critic that follows it by soft updates (kept on the
``cpu``), and an EMA of the policy is kept. Every piece of state is registered once with the session;
the summary reports a fingerprint of each piece right after restore and at the end, so tests can assert
them one by one.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from distlab.config import BaseConfig, ModelSettings, wrap_of
from distlab.recipe import ModelSpec, Recipe
from distlab.runtime.dist import module_checksum
from distlab.runtime.sampler import GlobalBatchSampler, check_divisible
from distlab.training.loop import after_step
from distlab.training.placement import compute_device, place, soft_update_
from distlab.training.wrap import unwrap


def _default_models() -> dict[str, ModelSettings]:
    return {"policy": ModelSettings(), "reference": ModelSettings(trainable=False, placement="cpu"),
            "critic": ModelSettings(), "target_critic": ModelSettings(trainable=False, placement="cpu")}


@dataclass
class MultiToyConfig(BaseConfig):
    steps: int = 20
    global_batch_size: int = 16
    num_examples: int = 512
    dim: int = 16
    actions: int = 8
    lr: float = 1e-2
    critic_lr: float = 1e-2
    beta: float = 0.1  # KL(policy || reference) weight
    tau: float = 0.1  # target critic soft-update rate
    gamma: float = 0.9
    ema_decay: float = 0.9
    models: dict[str, ModelSettings] = field(default_factory=_default_models)


class EMAWeights:
    """A replicated average of the policy's weights (registered like any other state)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.shadow = {k: v.detach().clone().float() for k, v in unwrap(model).state_dict().items()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for k, v in unwrap(model).state_dict().items():
            self.shadow[k].lerp_(v.detach().float().to(self.shadow[k].device), 1 - self.decay)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "shadow": {k: v.clone() for k, v in self.shadow.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.decay = float(state["decay"])
        for k, v in state["shadow"].items():
            self.shadow[k].copy_(v)


def _net(cfg: MultiToyConfig, out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(cfg.dim, 32), nn.Tanh(), nn.Linear(32, out))


def _data(cfg: MultiToyConfig) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(cfg.run.seed + 1)
    x = torch.randn(cfg.num_examples, cfg.dim, generator=g)
    labels = (x[:, : cfg.actions].argmax(1)).long()
    return x, labels


def _optim_checksum(opt: torch.optim.Optimizer) -> float:
    return float(sum(float(v.double().sum()) for st in opt.state.values() for v in st.values()
                     if isinstance(v, torch.Tensor)))


def fingerprints(policy, critic, target, ema, opts, sampler, step) -> dict:
    """One entry per piece of state, so a resume test can name the piece that did not come back."""
    return {"policy": module_checksum(unwrap(policy)), "critic": module_checksum(unwrap(critic)),
            "target_critic": module_checksum(target),
            "ema": float(sum(float(v.double().sum()) for v in ema.shadow.values())),
            "policy_optim": _optim_checksum(opts[0]), "critic_optim": _optim_checksum(opts[1]),
            "sampler": sampler.state_dict(), "step": step}


def train(cfg: MultiToyConfig, session) -> dict:
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    base_policy, base_critic = _net(cfg, cfg.actions), _net(cfg, 1)
    reference = copy.deepcopy(base_policy)  # "rebuilt from its source": same seed, same weights
    target = copy.deepcopy(base_critic)
    if cfg.dist.verify_init:
        rt.verify_identical(base_policy, "initial policy")
    put = {name: (lambda m, n=name: place(n, m, cfg.models[n], rt, cfg.dist))
           for name in cfg.models}
    policy, critic = put["policy"](base_policy), put["critic"](base_critic)
    reference, target = put["reference"](reference), put["target_critic"](target)
    opts = [torch.optim.AdamW(policy.parameters(), lr=cfg.lr),
            torch.optim.AdamW(critic.parameters(), lr=cfg.critic_lr)]
    ema = EMAWeights(policy, cfg.ema_decay)
    sampler = GlobalBatchSampler(cfg.num_examples, cfg.global_batch_size, rt.rank, rt.world_size, cfg.run.seed)
    session.track_model("policy", policy, [opts[0]])
    session.track_model("critic", critic, [opts[1]])
    session.track("target_critic", target)  # not trained by gradients, but it moves: it is state
    session.track("ema", ema)
    session.track("sampler", sampler)
    step = session.restore()
    restored = fingerprints(policy, critic, target, ema, opts, sampler, step)
    x_all, y_all = _data(cfg)
    dev = {n: compute_device(m) for n, m in
           (("policy", policy), ("critic", critic), ("target", target))}
    check_divisible(cfg.global_batch_size, rt.world_size, 1)
    status, last, steps = "completed", {}, cfg.steps  # end_step may lower steps; the config keeps what was asked
    while step < steps:
        idx = torch.as_tensor(sampler.next())
        x, y = x_all[idx], y_all[idx]
        logits = policy(x.to(dev["policy"]))
        with torch.no_grad():
            ref_logp = F.log_softmax(reference(x).float(), -1).to(logits.device)
        logp = F.log_softmax(logits.float(), -1)
        kl = (logp.exp() * (logp - ref_logp)).sum(-1)
        pi_loss = F.nll_loss(logp, y.to(logits.device), reduction="sum") + cfg.beta * kl.sum()
        reward = (logits.argmax(-1).cpu() == y).float()
        with torch.no_grad():
            nxt = x_all[(idx + 1) % cfg.num_examples]  # the next state is fixed per example, not per rank's batch
            boot = target(nxt.to(dev["target"])).squeeze(-1).cpu()
        td_target = (reward + cfg.gamma * boot).to(dev["critic"])
        v_loss = F.mse_loss(critic(x.to(dev["critic"])).squeeze(-1), td_target, reduction="sum")
        # DDP averages: global mean. No autocast here (fp32 compute); with fp16 the loss is still scaled
        session.amp.backward((pi_loss + v_loss) * rt.world_size / cfg.global_batch_size)
        session.amp.step(opts)  # both optimizers or, after an fp16 overflow, neither
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        soft_update_(target, unwrap(critic), cfg.tau)
        ema.update(policy)
        step += 1
        last = rt.reduce_sums({"pi_loss": float(pi_loss.detach()), "v_loss": float(v_loss.detach()),
                               "n": float(len(idx))})
        last = {"pi_loss": last["pi_loss"] / last["n"], "v_loss": last["v_loss"] / last["n"]}
        session.metrics.log(step, last)
        stopped, steps = after_step(session, step, steps)
        if stopped:
            status = "preempted"
            break
    return {"status": status, "step": step, "train": last, "world_size": rt.world_size, "pid": os.getpid(),
            "restored": restored, "final": fingerprints(policy, critic, target, ema, opts, sampler, step)}


def model_spec(cfg: MultiToyConfig) -> list[ModelSpec]:
    per = {name: sum(p.numel() for p in _net(cfg, cfg.actions if name in ("policy", "reference") else 1).parameters())
           for name in cfg.models}
    act = 4 * (cfg.dim + 32 + cfg.actions)
    return [ModelSpec(name, per[name], trainable_params=per[name] if s.trainable else 0,
                      activation_bytes_per_example=act, batch_per_device=cfg.global_batch_size,
                      optimizer="adamw" if s.trainable else "none", placement=s.placement,
                      param_dtype_bytes={"fp32": 4, "bf16": 2, "fp16": 2}[s.dtype], wrap=wrap_of(s, cfg.dist))
            for name, s in cfg.models.items()]


RECIPE = Recipe(name="multitoy", config=MultiToyConfig, train=train, batch_keys=("global_batch_size",),
                lr_keys=("lr",), model_spec=model_spec, report_metrics=("pi_loss", "v_loss"),
                supports=frozenset({"dist.wrap", "dist.compile"}),
                positive_keys=frozenset({"steps", "lr", "critic_lr", "global_batch_size", "num_examples", "dim",
                                         "actions"}),
                smoke={"steps": 3, "num_examples": 64, "log.every": 1})
