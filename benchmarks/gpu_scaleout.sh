#!/usr/bin/env bash
# Issue 44, item 1: HRM/TRM strong and weak scaling on 1, 2 and 4 GPUs, the code before the change (.base/src,
# `git archive <commit> src | tar -x -C .base`), the code now (src/) and the reference HRM code (.refhrm/, see
# .refhrm/README.txt; never committed) in the same command, jobs side by side on separate GPUs where they fit.
# Run from the repo root on nvidia-h100-x4, one stage a call (each well inside 10 minutes):
#   bash benchmarks/gpu_scaleout.sh one    (carry .whl .base .refhrm): the 1-GPU points, four jobs side by side
#   bash benchmarks/gpu_scaleout.sh two    (carry .base .refhrm): the 2-GPU points, two jobs side by side at a time
#   bash benchmarks/gpu_scaleout.sh four   (carry .base .refhrm): the 4-GPU points, one job at a time, profiled
# Every job's JSON and log come back in $OUT/<stage>.tgz, the table at the end: benchmarks/scaleout_table.py.
set -uo pipefail
source benchmarks/device_setup.sh
STAGE=${1:?stage: one, two or four}
RES=/tmp/scaleout/$STAGE
mkdir -p $RES
[ -n "${OUT:-}" ] && exec > >(tee $OUT/log-$STAGE) 2>&1
date -u; nvidia-smi -L; git log -1 --format=%h 2>/dev/null
DATA=/tmp/data/sudoku-hard-1k-aug50
[ -f $DATA/test/dataset.json ] || python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 \
  --test-size 200 --num-aug 50 --workers 48 2>&1 | tail -1
STEPS=${STEPS:-200}
COMMON="data.path=$DATA steps=$STEPS lr_warmup_steps=10 log.every=10 dist.compile=true data.eval_limit=200"

point() {  # NAME CODE(src|.base/src) GPUS VISIBLE PRESET [overrides...]: one `bench scaling` point
  local name=$1 code=$2 n=$3 vis=$4 preset=$5
  shift 5
  CUDA_VISIBLE_DEVICES=$vis PYTHONPATH=$PWD/$code:/tmp/site timeout 420 python3 -m distlab.cli bench scaling hrm \
    --gpus $n --config $preset --out /tmp/b-$name $COMMON "$@" > $RES/$name.log 2>&1
  local rc=$?
  find /tmp/b-$name -maxdepth 1 -name "*.json" -exec cp {} $RES/$name.json \;
  for p in /tmp/b-$name/runs/*/profile/summary.json; do [ -f "$p" ] && cp "$p" $RES/$name.profile.json; done
  echo "[$name] exit $rc $(date -u +%T)"; grep -E "examples/s|rror" $RES/$name.log | tail -2
}

ref() {  # NAME GPUS VISIBLE GLOBAL_BATCH: the reference HRM code, median examples/s
  local name=$1 n=$2 vis=$3 gb=$4
  [ -d .refhrm ] || { echo "[$name] no .refhrm carried"; return; }
  CUDA_VISIBLE_DEVICES=$vis PYTHONPATH=$PWD/.refhrm/shims:$PWD/.refhrm/src:/tmp/site timeout 420 \
    torchrun --standalone --nproc-per-node $n .refhrm/bench_ref.py --data $DATA --global-batch $gb --steps $STEPS \
    > $RES/$name.log 2>&1
  echo "[$name] exit $? $(date -u +%T)"; grep -E '^\{' $RES/$name.log | tail -1 | tee $RES/$name.json
}

PROF="log.profile_steps=20 log.profile_wait=$((STEPS - 40))"
case $STAGE in
  one)
    point hrm-base-1 .base/src 1 0 sudoku-extreme-1k & point hrm-new-1 src 1 1 sudoku-extreme-1k $PROF &
    ref hrm-ref-1 1 2 768 & point trm-new-1 src 1 3 trm-sudoku &
    wait ;;
  two)
    point hrm-base-2 .base/src 2 0,1 sudoku-extreme-1k & point hrm-new-2 src 2 2,3 sudoku-extreme-1k $PROF &
    wait
    ref hrm-ref-2 2 0,1 768 & point trm-new-2 src 2 2,3 trm-sudoku &
    wait
    point hrm-weak-2 src 2 0,1 sudoku-extreme-1k global_batch_size=1536 &
    ref hrm-refweak-2 2 2,3 1536 &
    wait ;;
  four)
    point hrm-new-4 src 4 0,1,2,3 sudoku-extreme-1k $PROF
    ref hrm-ref-4 4 0,1,2,3 768
    point hrm-base-4 .base/src 4 0,1,2,3 sudoku-extreme-1k $PROF
    point trm-new-4 src 4 0,1,2,3 trm-sudoku
    point hrm-weak-4 src 4 0,1,2,3 sudoku-extreme-1k global_batch_size=3072 ;;
  *) echo "unknown stage $STAGE: one, two or four"; exit 2 ;;
esac
python3 benchmarks/scaleout_table.py /tmp/scaleout
[ -n "${OUT:-}" ] && tar czf $OUT/$STAGE.tgz -C $RES .  # every JSON and log of the stage, one file back
date -u
