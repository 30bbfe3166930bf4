#!/usr/bin/env bash
# Issue 51 in one 10-minute device call: build the presets' data and the two holdouts, train PRESET for its 380 s on
# N GPUs, score the generated test, the generated holdout and top95 with the run's own test-time sampling, print one
# table, and pack everything into $OUT, also when the call's limit cuts it short. Written on the CPU; not yet run on
# a GPU (the phase times below are estimates until the first run replaces them).
#
#   bash benchmarks/ten_minutes.sh [--gpus N] [PRESET [SEED [key=value ...]]]
#     --gpus 4 (default): the 4-GPU figure. --gpus 1: the 1-GPU figure (trains on GPU 0; scoring uses every GPU, so
#     run it on the 4-GPU machine too: on a 1-GPU machine the three evaluations may not fit in the call)
#     PRESET: trm-sudoku-4gpu-380s (default), hrm-sudoku-380s or trm-maze-4gpu-380s (item 4: the generated 30x30
#     hard mazes; no holdouts, so only its test is scored; on one GPU it needs dist.grad_accum=4
#     dist.compile_mode=default, see the preset); SEED: run.seed (default 0); key=value: overrides
# On nvidia-h100-x4, carrying .whl (a distlab wheel: its entry points name the recipes) and data/holdout-src (top95
# is not in the repo and ../shared does not travel; make it here first, /data/ is git-ignored):
#   mkdir -p data/holdout-src && cp ../shared/data/sudoku/top95.txt data/holdout-src/
#   run(kind="nvidia-h100-x4", carry=[".whl", "data/holdout-src"], command="bash benchmarks/ten_minutes.sh")
#   run(..., command="bash benchmarks/ten_minutes.sh --gpus 1")                  # the 1-GPU figure
#   run(..., command="bash benchmarks/ten_minutes.sh hrm-sudoku-380s")           # HRM beside TRM at equal wall time
#   run(kind="nvidia-h100-x4", carry=[".whl"], command="bash benchmarks/ten_minutes.sh trm-maze-4gpu-380s")  # Maze-Hard
# Phases (estimates): wheels and training data ~30 s; the holdouts are generated on half the cores while the run
# trains; training 380 s plus start-up, compilation and its final evaluation of the generated test (all of it on
# 4 GPUs; the first EVAL_LIMIT puzzles, 200, with --gpus 1, where one GPU would spend minutes on it); then one
# `distlab eval` on every GPU scores the holdout and top95 (eval.also; with --gpus 1 the whole test first), stopped
# at DEADLINE_S (570) after the start so that the table and the files always come back.
# EVAL_SET: more overrides for that `distlab eval` only, e.g. dist.compile_mode=default if the sampled evaluation
# (noise drawn from a torch.Generator between replays) proves slow under CUDA graphs; never run on a GPU so far.
# SMOKE=1 runs the same command lines on this CPU: 2 processes, a tiny model, tiny data, a 6-puzzle holdout spec.
# The task (sudoku or maze) is the preset's data.build; a maze preset builds its mazes (~10 s on one core for 2,000)
# and skips the holdouts: with --gpus 4 its in-run evaluation of the whole test is the only one.
set -uo pipefail
T0=$(date +%s)
GPUS=4
if [ "${1:-}" = --gpus ]; then GPUS=${2:?--gpus needs a number}; shift 2; fi
PRESET=${1:-trm-sudoku-4gpu-380s}; SEED=${2:-0}; shift $(( $# < 2 ? $# : 2 ))
PRESET_FILE=src/distlab/recipes/hrm/presets/$PRESET.yaml
[ -f "$PRESET_FILE" ] || { echo "no preset $PRESET: $PRESET_FILE does not exist"; exit 2; }
TASK=$(sed -n 's/^  build: *\([a-z]*\).*/\1/p' "$PRESET_FILE")
case $TASK in
  sudoku)  # what the Sudoku presets build on first use (1,000 x 50 augmentations, 1,000 test), and the holdouts
    DATA=data/sudoku-n1000-t1000-aug50-s0; DATA_ARGS="--train-size 1000 --test-size 1000 --num-aug 50 --seed 0"
    SMOKE_DATA_ARGS="--train-size 64 --test-size 24 --blanks 10 --seed 0";;
  maze)  # what the maze preset builds on first use (1,000 hard mazes x 8 symmetries, 1,000 test); no holdouts
    DATA=data/maze-n1000-t1000-aug8-s0; DATA_ARGS="--train-size 1000 --test-size 1000 --aug --seed 0"
    SMOKE_DATA_ARGS="--train-size 16 --test-size 24 --aug --seed 0";;
  *) echo "$PRESET_FILE builds ${TASK:-no data} (data.build): this script runs sudoku and maze presets"; exit 2;;
esac
TAG=$PRESET-${GPUS}gpu-seed$SEED
WORK=${WORK:-/tmp/ten_minutes}
RES=$WORK/$TAG; RUNS=$WORK/runs
mkdir -p "$RES" "$RUNS"
HOLDOUT_SPEC=sudoku-gen-holdout; HOLDOUT=data/holdout-sudoku-gen; TOP95=data/holdout-top95
TOP95_SRC=${TOP95_SRC:-data/holdout-src/top95.txt}
if [ "${SMOKE:-0}" = 1 ]; then
  OUT=${OUT:-$WORK/out}; mkdir -p "$OUT"; export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
  DATA=$WORK/data/smoke-$TASK; DATA_ARGS=$SMOKE_DATA_ARGS
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
if [ "$TASK" = sudoku ]; then WORKERS="--workers $CORES"; else WORKERS=""; fi  # the maze builder runs on one core
# shellcheck disable=SC2086
[ -f "$DATA/test/dataset.json" ] || python3 -m distlab.cli data "$TASK" --output-dir "$DATA" $DATA_ARGS $WORKERS \
  2>&1 | tail -1
[ -f "$DATA/test/dataset.json" ] || { echo "the training data was not built"; exit 1; }
# the holdouts, checked against the training data, while the run trains (generation needs only CPUs; niced so the
# ranks' host threads come first)
HALF=$(( CORES > 1 ? CORES / 2 : 1 ))
BUILDS=""
if [ "$TASK" = sudoku ]; then
  ( nice -n 10 python3 -m distlab.cli data sudoku --holdout "$HOLDOUT_SPEC" --output-dir "$HOLDOUT" \
      --disjoint-from "$DATA" --workers "$HALF" > "$RES/holdout-build.log" 2>&1
    nice -n 10 python3 -m distlab.cli data sudoku --holdout top95 --source "$TOP95_SRC" --output-dir "$TOP95" \
      --disjoint-from "$DATA" --workers 1 > "$RES/top95-build.log" 2>&1 ) &
  BUILDS=$!
fi
say "train $PRESET on $TRAIN_LAUNCH, seed $SEED"
# shellcheck disable=SC2086
python3 -m distlab.cli train hrm --config "$PRESET" data.path="$DATA" run.seed="$SEED" run.dir="$RUNS" \
  run.name="$TAG" run.resume=never ckpt.every=0 log.progress=false data.eval_limit="$IN_RUN_LIMIT" $SIZE "$@" \
  $TRAIN_LAUNCH > "$RES/train.log" 2>&1
RC=$?
echo "train exit $RC"; grep -E "eval @|time limit|rror" "$RES/train.log" | tail -4
pack
[ -d "$RUNS/$TAG/checkpoints" ] || { echo "no checkpoint to score"; exit 1; }
if [ -n "$BUILDS" ]; then
  say "holdouts"
  wait "$BUILDS"; tail -n 2 "$RES/holdout-build.log" "$RES/top95-build.log"
  if [ "$IN_RUN_LIMIT" = 0 ]; then FIRST="data.path=$HOLDOUT"; ALSO="eval.also=[$TOP95]"  # test scored in the run
  else FIRST="data.eval_limit=0"; ALSO="eval.also=[$HOLDOUT,$TOP95]"; fi            # the whole test, every GPU
elif [ "$IN_RUN_LIMIT" != 0 ]; then FIRST="data.eval_limit=0"; ALSO=""  # no holdouts: the whole test, every GPU
else FIRST=""; fi                                                      # no holdouts, and the run scored the test
EVALS=""
if [ -n "$FIRST" ]; then
  LEFT=$(( ${DEADLINE_S:-570} - ($(date +%s) - T0) ))
  say "distlab eval ($FIRST${ALSO:+, $ALSO}) on $EVAL_LAUNCH, at most $LEFT s"
  # shellcheck disable=SC2086
  timeout "$(( LEFT > 10 ? LEFT : 10 ))" python3 -m distlab.cli eval "$RUNS/$TAG" $FIRST $ALSO \
    ${EVAL_SET:-} -o "$RES/eval" $EVAL_LAUNCH > "$RES/eval.log" 2>&1
  echo "eval exit $?"; tail -n 2 "$RES/eval.log"
  EVALS=$RES/eval/eval.json
fi
# shellcheck disable=SC2086
python3 benchmarks/ten_minutes_table.py "$RUNS/$TAG" $EVALS --markdown "$RES/table.md"
cp "$RES/table.md" "$OUT/ten_minutes-$TAG.md" 2>/dev/null
say "done"
