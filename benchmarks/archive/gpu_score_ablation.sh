#!/usr/bin/env bash
# SCoRe with SmolLM2 on one GPU (issue 15; see docs/benchmarks.md). Stage 1 stashes the first GGUF piece (as
# gpu_llm.sh 1). Stage 2: the guidance ablation (none, frozen, trained) at an equal wall budget per run, the three
# runs sharing the GPU; then `distlab eval` of each run on MBPP test and HumanEval, which scores the base model
# (same guidance mode) and the trained one on the same problems, greedily, with intervals.
set -uo pipefail
source benchmarks/device_setup.sh
if [ "${1:?stage}" = 1 ]; then stash_gguf && nvidia-smi -L; exit 0; fi
join_gguf
BUDGET=${BUDGET:-200}
date -u
COMMON="model.source=$GGUF model.prompt_mode=chat task.mbpp_dir=.data/mbpp dist.precision=bf16
 models.policy.dtype=bf16 models.reference.dtype=bf16 models.guidance.dtype=bf16 sandbox.workers=5"
TRAIN="$COMMON task.train=mbpp task.train_split=train task.eval=mbpp task.eval_split=test task.eval_size=16
 evaluation.before=false log.every=1 log.progress=false prompts_per_step=8 num_generations=4 micro_batch_size=16
 sampling.max_completion_length=192 hint_max_tokens=48 lr=3e-6 guidance_lr=3e-6 beta1=0.01 alpha=10
 stage_schedule=I:4,II:* advantage=mc steps=1000 run.time_limit_s=$BUDGET"
for g in none frozen trained; do
  timeout $((BUDGET + 150)) python3 -m distlab.cli train score $TRAIN guidance=$g run.name=abl-$g --gpus 1 \
    > $OUT/train-$g.log 2>&1 &
done
wait; date -u
for g in none frozen trained; do
  tail -4 $OUT/train-$g.log; cp runs/abl-$g/metrics.jsonl $OUT/train-$g.jsonl; cp runs/abl-$g/summary.json $OUT/summary-$g.json
done
nvidia-smi --query-gpu=memory.used --format=csv
for g in none frozen trained; do
  for t in mbpp humaneval; do
    timeout 230 python3 -m distlab.cli eval runs/abl-$g $COMMON task.eval=$t task.eval_split=test task.eval_size=0 \
      sampling.chunk_prompts=64 --output $OUT/eval-$g-$t --gpus 1 > $OUT/eval-$g-$t.log 2>&1 &
  done
done
wait; date -u
for f in $OUT/eval-*.log; do echo "== $f"; tail -30 $f | grep -v "^\s*$" | tail -22; done
