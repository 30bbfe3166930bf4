#!/usr/bin/env bash
# Issue 16, run 1: HRM and TRM strong scaling on 1 and 2 GPUs after the issue-19 step work (SwiGLU split, TRM's
# positions-first mixer and fused no-grad mixer kernel), as benchmarks/archive/gpu_scaling.sh's HRM stage. Run from the repo
# root on nvidia-h200-x2: bash benchmarks/archive/gpu_scaling_after_speedup.sh; result JSON and log under $OUT.
set -uo pipefail
source benchmarks/device_setup.sh
[ -n "${OUT:-}" ] && exec > >(tee $OUT/log) 2>&1
date -u; nvidia-smi -L
DATA=data/sudoku-hard-1k-aug50
python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 200 --num-aug 50 --workers 30 \
  2>&1 | tail -1
for preset in sudoku-extreme-1k trm-sudoku; do
  timeout 270 python3 -m distlab.cli bench scaling hrm --gpus 1,2 --config $preset --out /tmp/s-$preset \
    data.path=$DATA steps=80 lr_warmup_steps=10 log.every=10 dist.compile=true data.eval_limit=200 2>&1 \
    | grep -E "│ +[12] │|rror|^\[bench\] [12] "
  find /tmp/s-$preset -maxdepth 1 -name "*.json" -exec cp {} ${OUT:-/tmp}/scaling-$preset.json \;
  date -u
done
