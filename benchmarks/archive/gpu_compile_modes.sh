#!/usr/bin/env bash
# HRM and TRM 1-GPU throughput under dist.compile_mode=max_autotune_no_cudagraphs (not yet run through the trainer:
# its compilation outlasted 430 s for TRM in benchmarks/archive/hrm_step_variants.py on 2026-11-24). The default mode is
# benchmarks/archive/gpu_bench_hrm_trm.sh. The CUDA-graph modes are refused by the HRM recipe (the ACT carry).
set -uo pipefail
source benchmarks/device_setup.sh
DATA=data/sudoku-hard-1k-aug50
python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 200 --num-aug 50 --workers 16 2>&1 | tail -1
for mode in max_autotune_no_cudagraphs; do
  for preset in sudoku-extreme-1k trm-sudoku; do
    echo "=== $preset dist.compile_mode=$mode"
    timeout 280 python3 -m distlab.cli bench scaling hrm --gpus 1 --config $preset --out /tmp/b-$preset-$mode \
      data.path=$DATA steps=100 lr_warmup_steps=10 log.every=10 dist.compile=true dist.compile_mode=$mode \
      data.eval_limit=200 2>&1 | grep -E "│ +1 │|rror" | tail -n 2
  done
done
