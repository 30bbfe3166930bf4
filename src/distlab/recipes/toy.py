"""A small causal transformer on synthetic sequences: the reference use of the core.

It exercises every core path (global-batch sampler, DDP/FSDP2, accumulation, clipping, bf16/fp16,
checkpoints, resume, preemption, exact metric reduction, MFU) in a few seconds on a CPU, which is
why the core's tests and ``distlab bench`` use it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from distlab.config import BaseConfig
from distlab.errors import DistlabError
from distlab.recipe import Recipe
from distlab.run.profiling import phase
from distlab.runtime.dist import module_checksum
from distlab.runtime.sampler import GlobalBatchSampler, check_divisible, eval_shard
from distlab.training.loop import after_step
from distlab.training.lr_schedule import set_lr
from distlab.training.optim_state import adamw
from distlab.training.wrap import unwrap


@dataclass
class ToyConfig(BaseConfig):
    steps: int = 40
    global_batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 5
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    num_examples: int = 2048
    eval_examples: int = 250
    eval_every: int = 0
    seq_len: int = 32
    vocab: int = 32
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    step_delay_s: float = 0.0  # slows each step (fault-injection tests need time to act)
    record_sample_ids: bool = False  # log every step's example ids, all ranks, in order (data-order tests)


def make_sequences(n: int, seq_len: int, vocab: int, seed: int) -> torch.Tensor:
    """Sequences with learnable structure: each continues an arithmetic progression mod ``vocab``."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, vocab, size=(n, 1))
    stride = rng.integers(1, 4, size=(n, 1))
    seq = (start + stride * np.arange(seq_len + 1)[None, :]) % vocab
    return torch.from_numpy(seq.astype(np.int64))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(att)
        return x + self.mlp(self.norm2(x))


class ToyLM(nn.Module):
    def __init__(self, cfg: ToyConfig):
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise DistlabError(f"d_model={cfg.d_model} is not divisible by n_heads={cfg.n_heads}")
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(cfg.seq_len, cfg.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def flops_per_example(cfg: ToyConfig) -> float:
    """Training FLOPs of one sequence: 6 x matmul params x tokens plus causal attention."""
    d, t, L = cfg.d_model, cfg.seq_len, cfg.n_layers
    matmul_params = L * (3 * d * d + d * d + 8 * d * d) + d * cfg.vocab
    attention = L * 2 * 2 * t * t * d / 2  # QK^T and AV, causal half
    return 3 * (2 * matmul_params * t + attention)


def _loss_sums(model: nn.Module, seqs: torch.Tensor, mask: torch.Tensor | None = None):
    logits = model(seqs[:, :-1])
    target = seqs[:, 1:]
    tok_loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), reduction="none").view_as(target)
    correct = (logits.argmax(-1) == target).float()
    if mask is not None:
        tok_loss, correct = tok_loss * mask[:, None], correct * mask[:, None]
    count = target.numel() if mask is None else float(mask.sum()) * target.shape[1]
    return tok_loss.sum(), correct.sum(), count


@torch.no_grad()
def evaluate(model: nn.Module, session, cfg: ToyConfig) -> dict:
    rt = session.rt
    data = make_sequences(cfg.eval_examples, cfg.seq_len, cfg.vocab, seed=10_000 + cfg.run.seed)
    shard = eval_shard(len(data), max(1, cfg.global_batch_size // rt.world_size), rt.rank, rt.world_size)
    sums = {"loss": 0.0, "correct": 0.0, "tokens": 0.0, "examples": 0.0}
    model.eval()
    for idx, mask in zip(shard.indices, shard.masks):
        m = torch.from_numpy(mask).to(rt.device).float()
        with session.autocast():
            loss, correct, count = _loss_sums(model, data[idx].to(rt.device), m)
        sums["loss"] += float(loss)
        sums["correct"] += float(correct)
        sums["tokens"] += float(count)
        sums["examples"] += float(mask.sum())
    model.train()
    tot = rt.reduce_sums(sums)
    return {"loss": tot["loss"] / tot["tokens"], "token_accuracy": tot["correct"] / tot["tokens"],
            "examples": tot["examples"]}


def train(cfg: ToyConfig, session) -> dict:
    rt = session.rt
    rt.seed_everything(cfg.run.seed)
    data = make_sequences(cfg.num_examples, cfg.seq_len, cfg.vocab, seed=cfg.run.seed)
    core = ToyLM(cfg)
    if cfg.dist.verify_init:
        rt.verify_identical(core, "initial parameters")
    model = session.wrap(core, shard_modules=list(core.blocks))
    opt = adamw(model.parameters(), cfg.optim.state_dtype, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sampler = GlobalBatchSampler(cfg.num_examples, cfg.global_batch_size, rt.rank, rt.world_size, cfg.run.seed)
    global_tokens = cfg.global_batch_size * cfg.seq_len

    def probe(n: int) -> None:  # dist.auto_micro_batch: one training micro-step's memory on n examples
        with session.autocast():
            loss = _loss_sums(unwrap(model), data[:n].to(rt.device))[0]
        (loss / global_tokens).backward()

    session.auto_micro_batch(model, check_divisible(cfg.global_batch_size, rt.world_size), probe)
    micro = check_divisible(cfg.global_batch_size, rt.world_size, cfg.dist.grad_accum)
    session.track_model("model", model, [opt])
    session.track("sampler", sampler)
    step = session.restore()
    for g in opt.param_groups:  # from cfg.lr on every start (scale.lr may differ), not the checkpoint's
        g["base_lr"] = cfg.lr
    steps = cfg.steps  # end_step may lower it (run.time_limit_s); the config keeps what was asked
    progress, meter = session.progress(steps, step), session.throughput()
    flops = flops_per_example(cfg)
    status, last = "completed", {}
    while step < steps:
        if cfg.step_delay_s:
            time.sleep(cfg.step_delay_s)
        lr = set_lr([opt], step, cfg.warmup_steps, cfg.steps, "cosine", min_ratio=0.1)[0]  # warm-up, cosine to 10%
        idx = sampler.next()
        sums = {"loss": 0.0, "correct": 0.0, "tokens": 0.0}
        fed: list[int] = []  # the example ids in the order the micro-batches consumed them
        for m in range(cfg.dist.grad_accum):
            fed.extend(int(i) for i in idx[m * micro:(m + 1) * micro])
            batch = data[idx[m * micro:(m + 1) * micro]].to(rt.device)
            with session.no_sync(model, m), session.autocast():
                with phase("forward"):
                    loss, correct, count = _loss_sums(model, batch)
                with phase("backward"):
                    session.amp.backward(loss * rt.world_size / global_tokens)
            sums["loss"] += float(loss.detach())
            sums["correct"] += float(correct)
            sums["tokens"] += count
        if cfg.record_sample_ids:
            session.metrics.log(step + 1, {"sample_ids": _gathered_ids(rt, fed), "micro_steps": cfg.dist.grad_accum},
                                split="samples")
        with phase("optimizer"):
            gnorm = session.amp.step(opt, model, cfg.clip_grad)  # None: fp16 skipped the step (inf/NaN gradients)
            opt.zero_grad(set_to_none=True)
        step += 1
        session.profile_step()
        tot = rt.reduce_sums(sums)
        last = {"loss": tot["loss"] / tot["tokens"], "token_accuracy": tot["correct"] / tot["tokens"],
                "grad_norm": float("nan") if gnorm is None else float(gnorm), "lr": lr}
        meter.add(len(idx) * rt.world_size, global_tokens, flops * cfg.global_batch_size)
        if step % cfg.log.every == 0 or step == steps:
            session.metrics.log(step, {**last, **meter.report(), "epoch": sampler.epoch})
        progress.update(step, loss=last["loss"])
        stopped, steps = after_step(session, step, steps, every=cfg.eval_every, last_too=True,
                                    evaluate=lambda at: session.metrics.log(at, evaluate(model, session, cfg),
                                                                            split="eval"))
        if stopped:
            status = "preempted"
            break
    progress.close()
    final_eval = evaluate(model, session, cfg) if status == "completed" else {}
    if final_eval:
        session.metrics.log(step, final_eval, split="eval")
    return {"status": status, "step": step, "train": last, "eval": final_eval,
            "param_checksum": module_checksum(unwrap(model)), "pid": os.getpid(), "world_size": rt.world_size}


def _gathered_ids(rt, idx) -> list[int]:
    """The step's example ids, rank after rank (the same list whatever the micro-batching)."""
    return [int(i) for ids in rt.all_gather_object([int(i) for i in idx]) for i in ids]


def evaluate_checkpoint(cfg: ToyConfig, session, ckpt) -> dict:
    core = ToyLM(cfg)
    model = session.wrap(core, shard_modules=list(core.blocks))
    session.track_model("model", model)
    meta = session.load_checkpoint(ckpt)
    return {"step": meta["step"], **evaluate(model, session, cfg)}


def model_spec(cfg: ToyConfig):
    from distlab.recipe import ModelSpec

    params = sum(p.numel() for p in ToyLM(cfg).parameters())
    # activations kept for backward: ~16 floats per token per layer per d_model plus attention scores
    act = cfg.n_layers * cfg.seq_len * (16 * cfg.d_model + 2 * cfg.n_heads * cfg.seq_len) * 4
    return ModelSpec("toy", params, activation_bytes_per_example=act, batch_per_device=cfg.global_batch_size)


def validate(cfg: ToyConfig, world_size: int) -> None:
    """Checks before any process starts; the model's own shape check would otherwise fire inside the rank, after
    the run directory exists."""
    check_divisible(cfg.global_batch_size, world_size, cfg.dist.grad_accum)
    if cfg.n_heads > 0 and cfg.d_model % cfg.n_heads:
        fit = cfg.d_model - cfg.d_model % cfg.n_heads or cfg.n_heads
        raise DistlabError(f"d_model={cfg.d_model} is not divisible by n_heads={cfg.n_heads} (each head gets "
                           f"d_model/n_heads dimensions); use d_model={fit} or an n_heads that divides it")


RECIPE = Recipe(name="toy", config=ToyConfig, train=train, batch_keys=("global_batch_size",), lr_keys=("lr",),
                validate=validate, evaluate=evaluate_checkpoint, model_spec=model_spec,
                report_metrics=("token_accuracy", "loss"), percent_metrics=("token_accuracy",),
                supports=frozenset({"dist.cpu_offload",
                                    "dist.grad_accum", "dist.wrap", "dist.compile", "dist.compile_split_ddp", "dist.compile_mode",
                                    "log.profile_steps",
                                    "dist.activation_checkpointing", "dist.comm_hook", "dist.auto_micro_batch",
                                    "optim.state_dtype"}),
                positive_keys=frozenset({"steps", "lr", "global_batch_size", "num_examples", "seq_len", "vocab",
                                         "d_model", "n_layers", "n_heads"}),
                smoke={"steps": 3, "warmup_steps": 1, "num_examples": 256, "eval_examples": 64, "log.every": 1})
