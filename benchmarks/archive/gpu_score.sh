#!/usr/bin/env bash
# SCoRe on one GPU (see docs/benchmarks.md): stage 1 stashes the first GGUF piece (as gpu_llm.sh 1);
# stage 2: peak memory and step time for four placements (PLACE_CAP seconds each), then base vs trained
# self-correction on MBPP test (skipped with PLACEMENTS_ONLY=1; benchmarks/archive/gpu_score_ablation.sh does more).
set -uo pipefail
source benchmarks/device_setup.sh
if [ "${1:?stage}" = 1 ]; then stash_gguf; exit 0; fi
join_gguf
date -u
BASE="model.source=$GGUF model.prompt_mode=chat task.mbpp_dir=.data/mbpp task.train=mbpp task.train_split=train
 task.eval=mbpp task.eval_split=test dist.precision=bf16 models.policy.dtype=bf16 models.reference.dtype=bf16
 sandbox.workers=16 log.every=1
 log.progress=false prompts_per_step=8 num_generations=4 micro_batch_size=16 sampling.max_completion_length=192
 beta1=0.01 lr=1e-6 guidance=none"
PLACE="$BASE advantage=critic steps=4 evaluation.before=false task.eval_size=8 sampling.backend=hf"
for p in "all-gpu:" "reference-cpu:models.reference.placement=cpu" "reference-offload:models.reference.placement=offload" \
         "target-critic-cpu:models.target_critic.placement=cpu"; do
  name=${p%%:*}; extra=${p#*:}
  timeout ${PLACE_CAP:-110} python3 -m distlab.cli train score $PLACE $extra run.name=place-$name --gpus 1 2>&1 | grep -E "error|Error" | tail -3
  cp runs/place-$name/metrics.jsonl $OUT/place-$name.jsonl 2>/dev/null
done
date -u
[ "${PLACEMENTS_ONLY:-0}" = 1 ] && exit 0
timeout 200 python3 -m distlab.cli train score $BASE advantage=mc stage_schedule=I:3,II:* steps=500 run.time_limit_s=90 \
  task.eval_size=100 evaluation.before=true run.name=score-mbpp --gpus 1 2>&1 | grep -v "step .*/" | tail -8
cp runs/score-mbpp/metrics.jsonl $OUT/score-mbpp.jsonl; cp runs/score-mbpp/summary.json $OUT/score-mbpp-summary.json
date -u
