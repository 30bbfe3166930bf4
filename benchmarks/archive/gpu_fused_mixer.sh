#!/usr/bin/env bash
# Issue 19: TRM's fused sequence-mixer kernel on one GPU. Default: its check and sub-block time, then the training
# step with and without it (each variant in its own process). With "bench": the TRM bench as in
# gpu_bench_hrm_trm.sh, then the same with the profiler as in gpu_issue19_after.sh (files under $OUT).
# Run from the repo root on a device machine: bash benchmarks/archive/gpu_fused_mixer.sh [bench]
set -uo pipefail
source benchmarks/device_setup.sh
[ -n "${OUT:-}" ] && exec > >(tee $OUT/log) 2>&1
date -u; nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if [ "${1:-}" != bench ]; then
  python3 benchmarks/fused_mixer_check.py || exit 1
  python3 benchmarks/archive/hrm_step_variants.py --preset trm-sudoku --variants base,nofused --timeout 200
  exit
fi
DATA=data/sudoku-hard-1k-aug50
python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 200 --num-aug 50 --workers 16 \
  2>&1 | tail -1
ARGS="data.path=$DATA steps=100 lr_warmup_steps=10 log.every=10 dist.compile=true data.eval_limit=200"
timeout 170 python3 -m distlab.cli bench scaling hrm --gpus 1 --config trm-sudoku --out /tmp/b-trm $ARGS 2>&1 \
  | grep -E "│ +1 │|rror"
date -u
R=/tmp/b-trm-prof
timeout 170 python3 -m distlab.cli bench scaling hrm --gpus 1 --config trm-sudoku --out $R $ARGS \
  log.profile_steps=10 log.profile_wait=70 2>&1 | grep -E "│ +1 │|rror"
for f in $(find $R -name summary.json -path "*profile*"); do cp $f ${OUT:-/tmp}/prof-fused-trm-sudoku-summary.json; done
for f in $(find $R -name top_ops.txt); do cp $f ${OUT:-/tmp}/prof-fused-trm-sudoku-top_ops.txt; done
date -u
