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
RUN=${RUN:-smol-synth}
# greedy evaluation during the run: held-out instances of the training families (FAMILIES_TRAIN); FINAL=1 also
# scores base and trained policy on the held-out families (FAMILIES_EVAL) with `distlab eval`, paired
TRAIN_FAMILIES=add_const,sub_const,mul_const,mod_const,greater_than,reverse_str,upper_str,repeat_str,count_char,max_of_list,sum_of_list
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
  task.train=synthetic task.train_size=512 task.eval=synthetic task.eval_size=128 task.eval_families=$TRAIN_FAMILIES \
  steps=400 prompts_per_step=16 num_generations=8 micro_batch_size=32 lr=5e-6 beta=0.02 \
  sampling.max_completion_length=160 sampling.temperature=1.0 \
  dist.precision=bf16 models.policy.dtype=bf16 models.reference.dtype=bf16 \
  sandbox.workers=14 sandbox.timeout_s=5 ckpt.every=20 log.every=1 log.progress=false \
  run.dir=/tmp/runs run.name=$RUN run.time_limit_s=$TRAIN_S --gpus 1 2>&1 | grep -v "^step " | tail -30
cp /tmp/runs/$RUN/metrics.jsonl /tmp/runs/$RUN/summary.json $OUT/ 2>/dev/null
cp /tmp/runs/$RUN/eval_step*_problems.json $OUT/ 2>/dev/null
if [ "${FINAL:-0}" = 1 ]; then
  python3 -m distlab.cli eval /tmp/runs/$RUN task.eval_families=affine,poly,less_than,lower_str,min_of_list,count_list task.eval_size=128 --gpus 1 -o /tmp/heldout 2>&1 | tail -14
  cp /tmp/heldout/eval.json $OUT/heldout_eval.json 2>/dev/null
fi
ls $OUT
