#!/usr/bin/env bash
# Issue 19: the fused-mixer check (wider autotune list) and TRM in a 380 s budget with the fused kernel, as the
# budget runs of docs/benchmarks.md. Run from the repo root on a device machine; files under $OUT.
set -uo pipefail
source benchmarks/device_setup.sh
[ -n "${OUT:-}" ] && exec > >(tee $OUT/log) 2>&1
date -u; nvidia-smi -L
python3 benchmarks/fused_mixer_check.py || exit 1
DATA=data/hard-1k-aug50-t1000
python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 1000 --num-aug 50 --workers 16 \
  2>&1 | tail -1
DATA=$DATA bash benchmarks/train_budget.sh trm-sudoku 380 $OUT
date -u
