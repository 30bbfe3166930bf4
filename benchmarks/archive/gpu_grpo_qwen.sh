#!/usr/bin/env bash
# Issue 29 item 3: does GRPO train Qwen2.5-Coder-0.5B-Instruct (the 4-bit GGUF benchmark asset) on MBPP train, and
# is the gain the reward's? Two arms with the same settings and seed: `grpo` and `control` (shuffle_rewards=true:
# each step's rewards permuted across its completions). Each arm's run scores greedy pass@1 on MBPP test (500)
# before training and at its end, paired; `eval` then scores base and trained policy on HumanEval (164).
#
# One device-tool call per stage, back to back (the machine keeps /tmp about 30 s after a call):
#   stash K    K = 1..8, carry [".asset_qwen/pieceK"]: check piece K and keep it in /tmp (no wheels needed)
#   train ARM  carry [".whl", ".asset_qwen/piece9"]: join and check the GGUF (once per machine; skipped when ASSET
#              names the joined file already), then train ARM (grpo | control) for STEPS steps (default 64) in
#              /tmp/runs/qwen-ARM. Both arms make the same updates (issue 47: matched on wall time they made 69 and
#              57 steps): GUARD_S (default 600; TRAIN_S, its old name, still read) is only a guard that ends the
#              call in time, and a run it cuts resumes from its checkpoint when the same stage runs again (issue 29
#              item 2); the closing table (benchmarks/arm_updates.py) says steps done, skipped and updates made. The
#              run's own end evaluation is a quick look at EVAL_N MBPP test problems
#   eval ARM SET  base vs the run's last checkpoint, paired, greedy, on SET = mbpp (the 500 test problems) or
#              humaneval (164)
# On a multi-GPU machine benchmarks/gpu_jobs.sh runs both arms side by side, one GPU each, train then eval.
# Make the pieces here first (benchmarks/device_setup.sh has the commands); `SMOKE=1 bash $0 train grpo` runs the
# same command line on this CPU with the tiny model, to catch a bad setting before device time is spent.
set -uo pipefail
STAGE=${1:?stage: stash K | train ARM | eval ARM}
ARG=${2:?piece number or arm (grpo | control)}
GUARD_S=${GUARD_S:-${TRAIN_S:-600}}  # a guard, not the budget: the budget is STEPS
STASH=/tmp/asset_stash/asset_qwen
if [ "$STAGE" = stash ]; then  # before device_setup.sh: these calls carry no wheels
  python3 benchmarks/model_asset.py stash ".asset_qwen/piece$ARG" --to "$STASH" || exit 1
  exit 0
fi
case "$ARG" in
  grpo) CONTROL=false ;;
  control) CONTROL=true ;;
  *) echo "arm must be grpo or control, not $ARG"; exit 2 ;;
esac
RUN=qwen-$ARG${SEED:+-seed$SEED}  # SEED: another seed of the same arm (run.seed; the data order and the sampling)
if [ "${SMOKE:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/qwen_smoke_out}; mkdir -p "$OUT"
  MODEL="model.source=tiny:llama-2l model.prompt_mode=text task.train=synthetic task.train_size=16 task.eval=synthetic
         task.eval_split=train task.eval_size=4"
  SIZE="steps=${STEPS:-2} prompts_per_step=2 num_generations=4 micro_batch_size=8 sampling.max_completion_length=16"
  DEVICE="dist.precision=fp32 models.policy.dtype=fp32 models.reference.dtype=fp32"
  LAUNCH="--procs 1"
  RUNS=${RUNS:-/tmp/qwen_smoke_runs}
else
  source benchmarks/device_setup.sh
  if [ "$STAGE" = train ]; then join_qwen; fi
  ASSET=${ASSET:-$QWEN}
  MODEL="model.source=$ASSET model.prompt_mode=chat task.mbpp_dir=${MBPP_DIR:-.data/mbpp} task.train=mbpp task.train_split=train task.eval=mbpp
         task.eval_split=test task.eval_size=${EVAL_N:-32}"
  SIZE="steps=${STEPS:-64} prompts_per_step=16 num_generations=8 micro_batch_size=32 sampling.max_completion_length=384"
  DEVICE="dist.precision=bf16 models.policy.dtype=bf16 models.reference.dtype=bf16 sandbox.workers=14"
  LAUNCH="--gpus 1"
  RUNS=/tmp/runs
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
git rev-parse --short HEAD 2>/dev/null; date -u +%FT%TZ
if [ "$STAGE" = train ]; then
  # shellcheck disable=SC2086
  python3 -m distlab.cli train grpo $MODEL $SIZE lr=${LR:-2e-6} beta=0.04 scale_rewards=group \
    sampling.temperature=1.0 dynamic_sampling=true max_refill_rounds=2 shuffle_rewards=$CONTROL \
    evaluation.before=false sandbox.timeout_s=5 ckpt.every=${CKPT_EVERY:-0} log.every=1 log.progress=false \
    run.dir=$RUNS run.name=$RUN run.time_limit_s=$GUARD_S ${SEED:+run.seed=$SEED} $DEVICE $LAUNCH 2>&1 \
    | grep -v "^step \|Loading\|de-quantizing\|Writing model" | tail -30
  cp $RUNS/$RUN/metrics.jsonl "$OUT/${RUN}_metrics.jsonl" 2>/dev/null
  cp $RUNS/$RUN/summary.json "$OUT/${RUN}_summary.json" 2>/dev/null
  for f in $RUNS/$RUN/eval*_problems.json; do [ -f "$f" ] && cp "$f" "$OUT/${RUN}_$(basename "$f")"; done
  python3 benchmarks/arm_updates.py "$ARG=$RUNS/$RUN"  # steps of STEPS, cut by the guard or not, skipped, updates
elif [ "$STAGE" = eval ]; then
  # shellcheck disable=SC2086
  SET=${3:-humaneval}
  case "$SET" in mbpp) N=500 ;; humaneval) N=164 ;; *) echo "eval set must be mbpp or humaneval, not $SET"; exit 2 ;; esac
  # shellcheck disable=SC2086
  python3 -m distlab.cli eval $RUNS/$RUN task.eval=$SET task.eval_split=test task.eval_size=$N -o /tmp/${SET}_$RUN \
    $LAUNCH 2>&1 | grep -v "Loading\|de-quantizing\|Writing model" | tail -16
  cp /tmp/${SET}_$RUN/eval.json "$OUT/${RUN}_${SET}_eval.json" 2>/dev/null
  cp /tmp/${SET}_$RUN/problems.json "$OUT/${RUN}_${SET}_problems.json" 2>/dev/null  # per problem, base and trained
fi
ls "$OUT"
