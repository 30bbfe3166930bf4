#!/usr/bin/env bash
# Issue 51 in one 10-minute device call: build the presets' data and the two holdouts, train PRESET for its 380 s on
# N GPUs, score the generated test, the generated holdout and top95 with the run's own test-time sampling, print one
# table, and pack everything into $OUT, also when the call's limit cuts it short. Written on the CPU; not yet run on
# a GPU (the phase times below are estimates until the first run replaces them).
#
#   bash benchmarks/ten_minutes.sh [--gpus N] [PRESET [SEED [key=value ...]]]
#     --gpus 4 (default): the 4-GPU figure. --gpus 1: the 1-GPU figure (trains on GPU 0; scoring uses every GPU, so
#     run it on the 4-GPU machine too: on a 1-GPU machine the three evaluations may not fit in the call)
#     PRESET: trm-sudoku-4gpu-380s (default) or hrm-sudoku-380s; SEED: run.seed (default 0); key=value: overrides
# On nvidia-h100-x4, carrying .whl (a distlab wheel: its entry points name the recipes) and data/holdout-src (top95
# is not in the repo and ../shared does not travel; make it here first, /data/ is git-ignored):
#   mkdir -p data/holdout-src && cp ../shared/data/sudoku/top95.txt data/holdout-src/
#   run(kind="nvidia-h100-x4", carry=[".whl", "data/holdout-src"], command="bash benchmarks/ten_minutes.sh")
#   run(..., command="bash benchmarks/ten_minutes.sh --gpus 1")                  # the 1-GPU figure
#   run(..., command="bash benchmarks/ten_minutes.sh hrm-sudoku-380s")           # HRM beside TRM at equal wall time
# Phases (estimates): wheels and training data ~30 s; the holdouts are generated on half the cores while the run
# trains; training 380 s plus start-up, compilation and its final evaluation of the generated test (all of it on
# 4 GPUs; the first EVAL_LIMIT puzzles, 200, with --gpus 1, where one GPU would spend minutes on it); then one
# `distlab eval` on every GPU scores the holdout and top95 (eval.also; with --gpus 1 the whole test first), stopped
# at DEADLINE_S (570) after the start so that the table and the files always come back.
# EVAL_SET: more overrides for that `distlab eval` only, e.g. dist.compile_mode=default if the sampled evaluation
# (noise drawn from a torch.Generator between replays) proves slow under CUDA graphs; never run on a GPU so far.
# SMOKE=1 runs the same command lines on this CPU: 2 processes, a tiny model, tiny data, a 6-puzzle holdout spec.
set -uo pipefail
T0=$(date +%s)
GPUS=4
if [ "${1:-}" = --gpus ]; then GPUS=${2:?--gpus needs a number}; shift 2; fi
PRESET=${1:-trm-sudoku-4gpu-380s}; SEED=${2:-0}; shift $(( $# < 2 ? $# : 2 ))
TAG=$PRESET-${GPUS}gpu-seed$SEED
WORK=${WORK:-/tmp/ten_minutes}
RES=$WORK/$TAG; RUNS=$WORK/runs
mkdir -p "$RES" "$RUNS"
DATA=data/sudoku-n1000-t1000-aug50-s0  # what both presets build on first use (1,000 x 50 augmentations, 1,000 test)
DATA_ARGS="--train-size 1000 --test-size 1000 --num-aug 50 --seed 0"
HOLDOUT_SPEC=sudoku-gen-holdout; HOLDOUT=data/holdout-sudoku-gen; TOP95=data/holdout-top95
TOP95_SRC=${TOP95_SRC:-data/holdout-src/top95.txt}
if [ "${SMOKE:-0}" = 1 ]; then
  OUT=${OUT:-$WORK/out}; mkdir -p "$OUT"; export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
  DATA=$WORK/data/smoke-train; DATA_ARGS="--train-size 64 --test-size 24 --blanks 10 --seed 0"
  HOLDOUT_SPEC=tests/recipes/hrm/data/holdout_tiny.yaml; HOLDOUT=$WORK/data/smoke-holdout; TOP95=$WORK/data/smoke-top95
  [ -f "$TOP95_SRC" ] || TOP95_SRC=../shared/data/sudoku/top95.txt
  CORES=2; VISIBLE=4; TRAIN_LAUNCH="--procs 2"; EVAL_LAUNCH="--procs 2"; EVAL_LIMIT=${EVAL_LIMIT:-8}
  SIZE="global_batch_size=8 steps=4 lr_warmup_steps=2 dist.compile=false dist.compile_mode=default \
dist.compile_split_ddp=true arch.hidden_size=32 arch.num_heads=2 arch.H_layers=1 arch.L_layers=1 arch.H_cycles=2 \
arch.L_cycles=2 arch.halt_max_steps=3 arch.puzzle_emb_ndim=32 arch.puzzle_emb_len=2 arch.expansion=2 \
arch.forward_dtype=float32 eval.samples=3"
else
  : "${OUT:?OUT must name the folder whose files come back (the device tool sets it)}"
  source benchmarks/device_setup.sh
  VISIBLE=$(nvidia-smi -L | wc -l)
  [ "$GPUS" -le "$VISIBLE" ] || { echo "--gpus $GPUS but this machine has $VISIBLE GPUs"; exit 2; }
  CORES=$(nproc); TRAIN_LAUNCH="--gpus $GPUS"; EVAL_LAUNCH="--gpus $VISIBLE"; SIZE=""
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | uniq -c
fi
IN_RUN_LIMIT=$([ "$GPUS" -lt "$VISIBLE" ] && echo "${EVAL_LIMIT:-200}" || echo 0)
exec > >(tee "$OUT/ten_minutes-$TAG.log") 2>&1
pack() {  # everything small the call made, in one file (at most 8 files come back); run again after each phase
  tar czf "$OUT/ten_minutes-$TAG.tgz" -C "$WORK" "$TAG" \
    $(cd "$WORK" && ls -d runs/"$TAG"/*.json runs/"$TAG"/*.jsonl runs/"$TAG"/*.log runs/"$TAG"/*.md 2>/dev/null) \
    2>/dev/null
}
trap pack EXIT
trap 'exit 143' TERM INT
say() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
git rev-parse --short HEAD 2>/dev/null; date -u +%FT%TZ
say "data: $DATA"
[ -f "$DATA/test/dataset.json" ] || python3 -m distlab.cli data sudoku --output-dir "$DATA" $DATA_ARGS \
  --workers "$CORES" 2>&1 | tail -1
[ -f "$DATA/test/dataset.json" ] || { echo "the training data was not built"; exit 1; }
# the holdouts, checked against the training data, while the run trains (generation needs only CPUs; niced so the
# ranks' host threads come first)
HALF=$(( CORES > 1 ? CORES / 2 : 1 ))
( nice -n 10 python3 -m distlab.cli data sudoku --holdout "$HOLDOUT_SPEC" --output-dir "$HOLDOUT" \
    --disjoint-from "$DATA" --workers "$HALF" > "$RES/holdout-build.log" 2>&1
  nice -n 10 python3 -m distlab.cli data sudoku --holdout top95 --source "$TOP95_SRC" --output-dir "$TOP95" \
    --disjoint-from "$DATA" --workers 1 > "$RES/top95-build.log" 2>&1 ) &
BUILDS=$!
say "train $PRESET on $TRAIN_LAUNCH, seed $SEED"
# shellcheck disable=SC2086
python3 -m distlab.cli train hrm --config "$PRESET" data.path="$DATA" run.seed="$SEED" run.dir="$RUNS" \
  run.name="$TAG" run.resume=never ckpt.every=0 log.progress=false data.eval_limit="$IN_RUN_LIMIT" $SIZE "$@" \
  $TRAIN_LAUNCH > "$RES/train.log" 2>&1
RC=$?
echo "train exit $RC"; grep -E "eval @|time limit|rror" "$RES/train.log" | tail -4
pack
[ -d "$RUNS/$TAG/checkpoints" ] || { echo "no checkpoint to score"; exit 1; }
say "holdouts"
wait "$BUILDS"; tail -n 2 "$RES/holdout-build.log" "$RES/top95-build.log"
if [ "$IN_RUN_LIMIT" = 0 ]; then FIRST="data.path=$HOLDOUT"; ALSO="[$TOP95]"  # the test was scored in the run
else FIRST="data.eval_limit=0"; ALSO="[$HOLDOUT,$TOP95]"; fi                 # the whole test, on every GPU
LEFT=$(( ${DEADLINE_S:-570} - ($(date +%s) - T0) ))
say "distlab eval ($FIRST, eval.also=$ALSO) on $EVAL_LAUNCH, at most $LEFT s"
# shellcheck disable=SC2086
timeout "$(( LEFT > 10 ? LEFT : 10 ))" python3 -m distlab.cli eval "$RUNS/$TAG" $FIRST "eval.also=$ALSO" \
  ${EVAL_SET:-} -o "$RES/eval" $EVAL_LAUNCH > "$RES/eval.log" 2>&1
echo "eval exit $?"; tail -n 2 "$RES/eval.log"
python3 benchmarks/ten_minutes_table.py "$RUNS/$TAG" "$RES/eval/eval.json" --markdown "$RES/table.md"
cp "$RES/table.md" "$OUT/ten_minutes-$TAG.md" 2>/dev/null
say "done"
