#!/usr/bin/env bash
# HRM and TRM 1-GPU throughput only (issue 19 before/after checks); see docs/benchmarks.md.
set -uo pipefail
source benchmarks/device_setup.sh
[ -n "${OUT:-}" ] && exec > >(tee $OUT/log) 2>&1
date -u
DATA=data/sudoku-hard-1k-aug50
python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 200 --num-aug 50 --workers 16 2>&1 | tail -1
for preset in sudoku-extreme-1k trm-sudoku; do
  timeout 125 python3 -m distlab.cli bench scaling hrm --gpus 1 --config $preset --out /tmp/b-$preset data.path=$DATA \
    steps=100 lr_warmup_steps=10 log.every=10 dist.compile=true data.eval_limit=200 2>&1 | grep -E "│ +1 │|rror"
done
date -u
