#!/usr/bin/env bash
# Does GRPO train a real model now that trained weights stay fp32? SmolLM2-135M-Instruct (4-bit GGUF) on the
# synthetic training families, greedy pass@1 on held-out families before and after, on one device-tool GPU.
#   stage 1 (carry .whl .gguf_a): install the carried wheels, stash the first GGUF piece in the machine's /tmp
#   stage 2 (carry .whl .gguf_b): join the GGUF, then train for TRAIN_S seconds; the run lives in /tmp/runs, so
#            stage 2 again, right after (the machine stays warm about 30 s), resumes it from its checkpoint
# Every call ends with the evaluation (run.time_limit_s ends training normally) and copies the run's files to $OUT.
set -uo pipefail
STAGE=${1:?stage 1 or 2}
TRAIN_S=${TRAIN_S:-400}
source benchmarks/device_setup.sh
if [ "$STAGE" = 1 ]; then
  stash_gguf
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
  exit 0
fi
join_gguf
git rev-parse --short HEAD 2>/dev/null; date -u +%FT%TZ
python3 -m distlab.cli train grpo model.source=$GGUF model.prompt_mode=chat \
  task.train=synthetic task.train_size=512 task.eval=synthetic task.eval_size=128 \
  steps=400 prompts_per_step=16 num_generations=8 micro_batch_size=32 lr=5e-6 beta=0.02 \
  sampling.max_completion_length=160 sampling.temperature=1.0 \
  dist.precision=bf16 models.policy.dtype=bf16 models.reference.dtype=bf16 \
  sandbox.workers=14 sandbox.timeout_s=5 ckpt.every=20 log.every=1 log.progress=false \
  run.dir=/tmp/runs run.name=smol-synth run.time_limit_s=$TRAIN_S --gpus 1 2>&1 | grep -v "^step " | tail -30
cp /tmp/runs/smol-synth/metrics.jsonl /tmp/runs/smol-synth/summary.json $OUT/ 2>/dev/null
cp /tmp/runs/smol-synth/eval_step*_problems.json $OUT/ 2>/dev/null
ls $OUT
