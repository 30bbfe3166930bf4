#!/usr/bin/env bash
# SCoRe after the bf16 fix: SmolLM2-135M-Instruct (4-bit GGUF), plain SCoRe (no guidance, mc advantages) on the
# synthetic training families, greedy self-correction metrics on held-out instances of those families.
#   stage 1 (carry .whl .gguf_a): wheels, first GGUF piece;  stage 2 (carry .whl .gguf_b): join, train TRAIN_S
#   seconds from /tmp/runs (stage 2 again right after resumes), evaluate; files to $OUT
set -uo pipefail
STAGE=${1:?stage 1 or 2}
TRAIN_S=${TRAIN_S:-400}
RUN=${RUN:-score-synth}
FAMILIES=add_const,sub_const,mul_const,mod_const,greater_than,reverse_str,upper_str,repeat_str,count_char,max_of_list,sum_of_list
source benchmarks/device_setup.sh
if [ "$STAGE" = 1 ]; then stash_gguf; exit 0; fi
join_gguf
date -u +%FT%TZ
python3 -m distlab.cli train score model.source=$GGUF model.prompt_mode=chat \
  task.train=synthetic task.train_size=512 task.eval=synthetic task.eval_size=128 task.eval_families=$FAMILIES \
  steps=400 prompts_per_step=16 num_generations=4 micro_batch_size=32 lr=5e-6 beta1=0.01 alpha=2 \
  stage_schedule=I:20,II:* sampling.max_completion_length=160 sampling.temperature=1.0 \
  dist.precision=bf16 models.policy.dtype=bf16 models.reference.dtype=bf16 \
  sandbox.workers=14 sandbox.timeout_s=5 ckpt.every=20 log.every=1 log.progress=false \
  run.dir=/tmp/runs run.name=$RUN run.time_limit_s=$TRAIN_S --gpus 1 2>&1 | grep -v "^step \|Loading\|de-quantizing" | tail -40
cp /tmp/runs/$RUN/metrics.jsonl /tmp/runs/$RUN/summary.json $OUT/ 2>/dev/null
cp /tmp/runs/$RUN/eval_step*_problems.json /tmp/runs/$RUN/eval_start_step*_problems.json $OUT/ 2>/dev/null
ls $OUT
