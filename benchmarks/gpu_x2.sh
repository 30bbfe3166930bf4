#!/usr/bin/env bash
# One lease of a 2-GPU machine (nvidia-h100-x2) for the runs that 2 GPUs allow (2026-11-28: 4-GPU kinds withheld).
# The Qwen2.5-Coder-0.5B asset travels in 10 pieces over 10 back-to-back calls; the GPUs work meanwhile on a
# detached job that needs no asset (the GRPO fault drills on NCCL). Run from the repo root, one stage a call:
#   bash benchmarks/gpu_x2.sh piece 1     carry .whl .asset_qwen/piece01: the wheels, and starts the drills
#   bash benchmarks/gpu_x2.sh piece K     carry .asset_qwen/pieceK (K = 02..09), in one of them .data too (MBPP;
#                                          a piece with the wheels and MBPP would pass the 64 MiB a call carries)
#   bash benchmarks/gpu_x2.sh qwen-a      carry .asset_qwen/piece10: joins the asset; the drills' results; SCoRe's
#                                          placements (issue 44 item 2) with the EvalPlus base figures beside
#                                          (issue 47 item 5)
#                                          (EVALPLUS=0: the placements alone; DRILL_WAIT_S: how long to wait
#                                          for the drills' GPUs, 120 s)
#   bash benchmarks/gpu_x2.sh qwen-b      GRPO synchronous vs one step off-policy on one GPU vs rollout/trainer
#                                          ranks split over two (issue 49 item 1), equal steps
#   bash benchmarks/gpu_x2.sh lora        LoRA against full fine-tuning, Qwen2.5-1.5B shape (issue 49 item 3)
#   bash benchmarks/gpu_x2.sh split-random  carry .whl: the rank split on NCCL with random weights, beside the
#                                          synchronous one-GPU run (no asset needed)
# Results come back as $OUT/<stage>.tgz plus the stage's log. `SMOKE=1 bash $0 qwen-b|lora|drills` runs the command
# lines on the CPU with the tiny model.
set -uo pipefail
STAGE=${1:?stage: piece K, qwen-a, qwen-b, lora, split-random or drills}
SMOKE=${SMOKE:-0}
source benchmarks/device_stage.sh
stage_env
RES=/tmp/x2/$STAGE; mkdir -p $RES
[ "$STAGE" = drills ] || pack_at_exit "$STAGE" "$RES"
date -u; nvidia-smi -L 2>/dev/null

DRILLS=/tmp/x2/drills
case $STAGE in
  piece)
    K=${2:?piece number}
    stash_asset .asset_qwen
    [ -d .data/mbpp ] && stash_mbpp
    if [ "$K" = 1 ] || [ "$K" = 01 ]; then
      # the drills outlive this call (a new session), writing under /tmp while the next calls carry pieces
      setsid nohup bash benchmarks/gpu_x2.sh drills > /tmp/x2/drills.log 2>&1 < /dev/null &
      disown  # not one of the jobs that packing at exit stops
      echo "drills started, pid $!"
    fi ;;
  drills)  # issue 44 item 3 on 2 GPUs: GRPO (random-weight Qwen2.5-0.5B shape) kill -9 of rank 1 and SIGSTOP of
    # rank 0 under NCCL, each resumed on 2 GPUs and on 1, beside the uninterrupted run
    mkdir -p $DRILLS
    if [ "$SMOKE" = 1 ]; then L="--procs 2"; H="--procs 1"; SET="--set model.source=tiny:llama-2l dist.precision=fp32"
    else L="--gpus 2"; H="--gpus 1"; SET=""; fi
    # shellcheck disable=SC2086
    timeout 560 python3 benchmarks/fault_drills.py --recipe grpo --launch "$L" --half "$H" --drills kill9,stop0 \
      --uninterrupted --timeout-s 30 --steps 30 --root /tmp/gdrills $SET > $DRILLS/grpo-drills.json
    echo "drills exit $?"; touch $DRILLS/done ;;
  qwen-a)
    [ "$SMOKE" = 1 ] || join_qwen
    [ "$SMOKE" = 1 ] || stash_mbpp
    for _ in $(seq "${DRILL_WAIT_S:-120}"); do [ -f $DRILLS/done ] && break; sleep 1; done  # the drills' GPUs
    [ -f $DRILLS/done ] || { echo "drills still running: stopped"; pkill -f fault_drills.py; sleep 5
                             pkill -f "distlab.cli train grpo"; }
    cp -r $DRILLS /tmp/x2/drills.log $RES/ 2>/dev/null; cat $DRILLS/grpo-drills.json 2>/dev/null | tail -5
    # EvalPlus's harness, base model, greedy: MBPP sanitized (427) and HumanEval (164), on GPU 1 beside the
    # one-GPU placement arm on GPU 0; then the seed-004 placement on GPUs 0-1
    EP="python3 benchmarks/base_passk.py $ASSET --harness evalplus --max-new-tokens 768 --dtype bfloat16 \
--device cuda --workers 12 --mbpp-dir $MBPP_DIR"
    SIDE="$EP --task mbpp --split sanitized --json $RES/qwen_base_mbpp_evalplus.json > $RES/ep-mbpp.log 2>&1; \
$EP --task humaneval --split test --json $RES/qwen_base_humaneval_evalplus.json > $RES/ep-he.log 2>&1"
    [ "${EVALPLUS:-1}" = 0 ] && SIDE=""  # measured 2026-11-28: EVALPLUS=0 runs the placements alone
    ONE_SIDE="$SIDE" STEPS=6 bash benchmarks/gpu_score_place_qwen.sh & wait $!
    cp /tmp/score_place/* $RES/ 2>/dev/null
    tail -n 3 $RES/ep-*.log ;;
  qwen-b)  # equal steps, the same prompts and settings; step time is the median gap between logged steps
    if [ "$SMOKE" = 1 ]; then
      M="model.source=tiny:llama-2l model.prompt_mode=text dist.precision=fp32 prompts_per_step=4 num_generations=2
         sampling.max_completion_length=16 steps=3"
      ONE="--procs 1"; TWO="--procs 2"; V0=""; V1=""; V01=""
    else
      join_qwen; stash_mbpp
      M="model.source=$ASSET model.prompt_mode=chat dist.precision=bf16 models.policy.dtype=bf16
         models.reference.dtype=bf16 prompts_per_step=16 num_generations=8 micro_batch_size=32
         sampling.max_completion_length=384 steps=${STEPS:-12} sandbox.workers=14"
      ONE="--gpus 1"; TWO="--gpus 2"; V0=0; V1=1; V01=0,1
    fi
    G="$M task.mbpp_dir=$MBPP_DIR task.train=mbpp task.train_split=train task.eval=mbpp task.eval_split=test
       task.eval_size=8 lr=2e-6 beta=0.04 scale_rewards=group sampling.temperature=1.0 dynamic_sampling=false
       evaluation.before=false sandbox.timeout_s=5 ckpt.every=0 log.every=1 log.progress=false run.dir=/tmp/runs"
    arm() {  # NAME VISIBLE LAUNCH [overrides...]
      local name=$1 vis=$2 launch=$3; shift 3
      # shellcheck disable=SC2086
      CUDA_VISIBLE_DEVICES=$vis timeout 300 python3 -m distlab.cli train grpo $G run.name=$name "$@" $launch \
        > $RES/$name.log 2>&1
      echo "[$name] exit $? $(date -u +%T)"; cp /tmp/runs/$name/metrics.jsonl $RES/$name.jsonl 2>/dev/null
      cp /tmp/runs/$name/summary.json $RES/$name.summary.json 2>/dev/null
    }
    arm sync-1gpu "$V0" "$ONE" async.off_policy_steps=0 & P0=$!
    arm offpolicy1-1gpu "$V1" "$ONE" async.off_policy_steps=1 & P1=$!
    wait $P0 $P1
    arm split-2gpu "$V01" "$TWO" async.off_policy_steps=1 async.rollout_ranks=1 & wait $!
    python3 benchmarks/step_rates.py $RES/*.jsonl --vs sync-1gpu ;;
  split-random)  # the rank split on NCCL after the fix of dbbf0b4 (it hung at start on 2026-11-28), beside the
    # synchronous one-GPU run in the same call: random Qwen2.5-0.5B weights and synthetic tasks (no asset, no MBPP;
    # every reward is 0, so this shows the split runs and its step time, not learning)
    if [ "$SMOKE" = 1 ]; then
      M="model.source=tiny:llama-2l model.prompt_mode=text dist.precision=fp32 prompts_per_step=4 num_generations=2
         sampling.max_completion_length=16 steps=3"; ONE="--procs 1"; TWO="--procs 2"
    else
      M="model.source=random:qwen2.5-0.5b model.prompt_mode=text dist.precision=bf16 models.policy.dtype=bf16
         models.reference.dtype=bf16 prompts_per_step=16 num_generations=8 micro_batch_size=32
         sampling.max_completion_length=256 steps=${STEPS:-10} sandbox.workers=14"; ONE="--gpus 1"; TWO="--gpus 2"
    fi
    R="$M task.train=synthetic task.eval_size=2 lr=2e-6 beta=0.04 evaluation.before=false ckpt.every=0
       ckpt.at_end=false log.every=1 log.progress=false run.dir=/tmp/runs run.resume=fresh"
    for arm in "sync-1gpu|$ONE|async.off_policy_steps=0" "split-2gpu|$TWO|async.off_policy_steps=1 async.rollout_ranks=1"; do
      IFS='|' read -r name launch extra <<< "$arm"
      # shellcheck disable=SC2086
      timeout 150 python3 -m distlab.cli train grpo $R run.name=$name $extra $launch > $RES/$name.log 2>&1 & wait $!
      echo "[$name] exit $? $(date -u +%T)"; cp /tmp/runs/$name/metrics.jsonl $RES/$name.jsonl 2>/dev/null
      tail -n 2 $RES/$name.log
    done
    python3 benchmarks/step_rates.py $RES/*.jsonl --vs sync-1gpu ;;
  lora)  # issue 49 item 3: peak memory and step time, 1.5B shape, random weights, one GPU
    if [ "$SMOKE" = 1 ]; then A="--smoke"; else A=""; fi
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES=0 timeout 500 python3 benchmarks/lm_shapes.py --only lora --steps 6 --timeout 160 \
      --runs /tmp/lora-runs --out $RES $A | tail -8 ;;
  *) echo "unknown stage $STAGE: piece K, qwen-a, qwen-b, lora or drills"; exit 2 ;;
esac
date -u
