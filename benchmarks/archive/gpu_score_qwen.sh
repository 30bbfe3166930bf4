#!/usr/bin/env bash
# Issue 29 item 4: SCoRe on Qwen2.5-Coder-0.5B-Instruct (the 4-bit GGUF asset), one arm per GPU. Arms at an equal
# number of steps (STEPS, default 16; issue 47: matched on updates, not wall time; GUARD_S, or its old name TRAIN_S,
# only a guard, and a run it cuts goes on when the stage runs again): `none` (no guidance), `trained` (a trained
# guidance model whose hint sees only y1: intrinsic) and `extrinsic` (the same, `hint_sees_execution=true`: the
# hint also sees turn 1's test result).
#   train ARM      join/check the asset unless ASSET names it, then train ARM on MBPP train into /tmp/runs/score-ARM
#                  (the same stage again resumes from the checkpoint)
#   eval ARM SET   base vs trained, greedy, paired: Acc@t1, Acc@t2, delta(t1,t2), delta(i->c), delta(c->i) with
#                  intervals on SET = mbpp (500 test problems) or humaneval (164)
# Run detached on a multi-GPU machine with benchmarks/gpu_jobs.sh (see gpu_x4_batch.sh); MBPP_DIR should be under
# /tmp there. `SMOKE=1 bash $0 train none` runs the same command line on the CPU with the tiny model.
set -uo pipefail
STAGE=${1:?stage: train ARM | eval ARM SET}
ARM=${2:?arm: none | trained | extrinsic}
case "$ARM" in
  none) GUIDE="guidance=none" ;;
  trained) GUIDE="guidance=trained hint_sees_execution=false" ;;
  extrinsic) GUIDE="guidance=trained hint_sees_execution=true" ;;
  *) echo "arm must be none, trained or extrinsic, not $ARM"; exit 2 ;;
esac
RUN=score-$ARM
if [ "${SMOKE:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/score_qwen_smoke_out}; mkdir -p "$OUT"
  MODEL="model.source=tiny:llama-2l model.prompt_mode=text task.train=synthetic task.train_size=16 task.eval=synthetic
         task.eval_split=train task.eval_size=4"
  SIZE="steps=${STEPS:-2} prompts_per_step=2 num_generations=2 micro_batch_size=4 sampling.max_completion_length=16
        hint_max_tokens=8"
  DEVICE="dist.precision=fp32 models.policy.dtype=fp32 models.reference.dtype=fp32 models.guidance.dtype=fp32"
  LAUNCH="--procs 1"; RUNS=/tmp/score_qwen_smoke_runs; N=4; SPLIT=${SPLIT:-eval}
else
  source benchmarks/device_setup.sh
  if [ "$STAGE" = train ]; then join_qwen; fi
  ASSET=${ASSET:-$QWEN}
  MODEL="model.source=$ASSET model.prompt_mode=chat task.mbpp_dir=${MBPP_DIR:-.data/mbpp} task.train=mbpp
         task.train_split=train task.eval=mbpp task.eval_split=test task.eval_size=${EVAL_N:-32}"
  # micro-batch 32 without checkpointing ran out of memory on an H100 (2026-11-26: 67 GiB at step 24 without
  # guidance, the first step with it; the doctor estimated 75.9 GiB); 8 with checkpointing peaked at 26 GiB
  SIZE="steps=${STEPS:-16} prompts_per_step=16 num_generations=4 micro_batch_size=8 dist.activation_checkpointing=blocks
        sampling.max_completion_length=384 hint_max_tokens=64"
  DEVICE="dist.precision=bf16 models.policy.dtype=bf16 models.reference.dtype=bf16 models.guidance.dtype=bf16
          sandbox.workers=14"
  LAUNCH="--gpus 1"; RUNS=/tmp/runs
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
fi
git rev-parse --short HEAD 2>/dev/null; date -u +%FT%TZ
if [ "$STAGE" = train ]; then
  # shellcheck disable=SC2086
  python3 -m distlab.cli train score $MODEL $SIZE $GUIDE lr=${LR:-2e-6} guidance_lr=${LR:-2e-6} beta1=0.01 alpha=10 \
    stage_schedule=I:4,II:* advantage=mc sampling.temperature=1.0 evaluation.before=false \
    sandbox.timeout_s=${TIMEOUT_S:-3} ckpt.every=${CKPT_EVERY:-0} log.every=1 log.progress=false run.dir=$RUNS \
    run.name=$RUN run.time_limit_s=${GUARD_S:-${TRAIN_S:-600}} $DEVICE ${EXTRA:-} $LAUNCH > "$OUT/${RUN}_train.log" 2>&1
  grep -v "^step \|Loading\|de-quantizing\|Writing model" "$OUT/${RUN}_train.log" | tail -30  # kept whole if cut
  cp $RUNS/$RUN/metrics.jsonl "$OUT/${RUN}_metrics.jsonl" 2>/dev/null
  cp $RUNS/$RUN/summary.json "$OUT/${RUN}_summary.json" 2>/dev/null
  python3 benchmarks/arm_updates.py "$ARM=$RUNS/$RUN"  # steps of STEPS, cut by the guard or not, skipped, updates
elif [ "$STAGE" = eval ]; then
  SET=${3:?set: mbpp | humaneval}
  if [ "${SMOKE:-0}" != 1 ]; then
    case "$SET" in mbpp) N=500 ;; humaneval) N=164 ;; *) echo "eval set must be mbpp or humaneval, not $SET"; exit 2 ;; esac
  else SET=synthetic; fi
  # shellcheck disable=SC2086
  # evaluation generates in calls of a training step's rows (64 here; all 500 MBPP prompts in one call ran out
  # of an H100's memory on 2026-11-26); CHUNK overrides it
  python3 -m distlab.cli eval $RUNS/$RUN task.eval=$SET task.eval_split=${SPLIT:-test} task.eval_size=$N \
    sandbox.timeout_s=5 ${CHUNK:+sampling.chunk_prompts=$CHUNK} -o /tmp/${SET}_$RUN $LAUNCH > "$OUT/${RUN}_${SET}.log" 2>&1
  grep -v "Loading\|de-quantizing\|Writing model" "$OUT/${RUN}_${SET}.log" | tail -30
  cp /tmp/${SET}_$RUN/eval.json "$OUT/${RUN}_${SET}_eval.json" 2>/dev/null
  cp /tmp/${SET}_$RUN/problems.json "$OUT/${RUN}_${SET}_problems.json" 2>/dev/null
fi
ls "$OUT"
