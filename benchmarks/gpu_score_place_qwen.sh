#!/usr/bin/env bash
# Issue 44 item 2: seed 004's placement (policy and critic on GPU 0, guidance and value on GPU 1, reference and
# target critic on the CPU) against everything on one GPU, on Qwen2.5-Coder-0.5B-Instruct's real weights (the
# 4-bit GGUF asset, dequantised to bf16): peak memory per device and seconds per step, both arms side by side
# (GPU 0; GPUs 1-2) on a machine of 3 GPUs or more, one after the other (GPU 0; GPUs 0-1) on a 2-GPU machine, the
# same MBPP prompts, STEPS steps each (default 6; step 1 includes start-up and is left out of the medians).
#   bash benchmarks/gpu_score_place_qwen.sh           (after the asset's pieces and MBPP: see benchmarks/device_setup.sh)
# `SMOKE=1 bash $0` runs both command lines on the CPU with the tiny model (placements on cpu).
set -uo pipefail
[ "${SMOKE:-0}" = 1 ] || source benchmarks/device_setup.sh  # the CPU smoke run needs no wheels
STEPS=${STEPS:-6}
RES=/tmp/score_place; mkdir -p $RES
[ -n "${OUT:-}" ] && trap 'for n in place-one-gpu place-seed004; do cp /tmp/runs/$n/metrics.jsonl $RES/$n.jsonl 2>/dev/null
  done; tar czf $OUT/score_place.tgz -C $RES . 2>/dev/null' EXIT && trap 'exit 143' TERM INT
COMMON="task.train=mbpp task.train_split=train evaluation.before=false log.every=1 log.progress=false steps=$STEPS
 prompts_per_step=8 num_generations=4 sampling.max_completion_length=192 guidance=trained advantage=critic
 ckpt.every=0 sandbox.workers=16 task.eval_size=${EVAL_N:-8}"
if [ "${SMOKE:-0}" = 1 ]; then
  MODEL="model.source=tiny:llama-2l model.prompt_mode=text task.train=synthetic task.train_size=16 steps=2
         prompts_per_step=2 num_generations=2 sampling.max_completion_length=16 hint_max_tokens=8 dist.precision=fp32"
  ONE="--procs 1"; SPLIT="--procs 1"; MAP=""
else
  join_qwen || exit 1
  stash_mbpp
  MODEL="model.source=$ASSET model.prompt_mode=chat dist.precision=bf16 task.mbpp_dir=$MBPP_DIR"
  ONE="--gpus 1"; SPLIT="--gpus 2 dist.devices_per_rank=2"
  MAP="models.policy.placement=cuda:0 models.critic.placement=cuda:0 models.guidance.placement=cuda:1
       models.value.placement=cuda:1 models.reference.placement=cpu models.target_critic.placement=cpu"
fi
run() {  # NAME VISIBLE LAUNCH [overrides...]
  local name=$1 vis=$2 launch=$3; shift 3
  CUDA_VISIBLE_DEVICES=$vis timeout 420 python3 -m distlab.cli train score $COMMON $MODEL "$@" run.dir=/tmp/runs \
    run.name=$name $launch > $RES/$name.log 2>&1
  echo "[$name] exit $? $(date -u +%T)"; cp /tmp/runs/$name/metrics.jsonl $RES/$name.jsonl 2>/dev/null
}
date -u; nvidia-smi -L 2>/dev/null
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 3 ] || [ "${SMOKE:-0}" = 1 ]; then
  run place-one-gpu 0 "$ONE" & P1=$!
  run place-seed004 1,2 "$SPLIT" $MAP & P2=$!
  wait $P1 $P2
else  # two GPUs: the arms one after the other (ONE_SIDE: a command for GPU 1 beside the one-GPU arm)
  [ -n "${ONE_SIDE:-}" ] && { CUDA_VISIBLE_DEVICES=1 bash -c "$ONE_SIDE" & PSIDE=$!; }
  run place-one-gpu 0 "$ONE" & wait $!  # `& wait`: a TERM at the time limit packs what exists (trap above)
  [ -n "${PSIDE:-}" ] && wait $PSIDE
  run place-seed004 0,1 "$SPLIT" $MAP & wait $!
fi
python3 benchmarks/step_rates.py $RES/*.jsonl --vs place-one-gpu
date -u
