#!/usr/bin/env bash
# Issue 19 after the SwiGLU split and TRM's positions-first layout: HRM and TRM 1-GPU throughput with the
# torch.profiler breakdown (as benchmarks/archive/gpu_perf.sh). Results under $OUT: profile summaries, top-kernel tables
# and the log. (HRM under max-autotune-no-cudagraphs did not finish compiling within one device command.)
set -uo pipefail
source benchmarks/device_setup.sh
exec > >(tee $OUT/log) 2>&1
date -u; nvidia-smi -L
DATA=data/sudoku-hard-1k-aug50
python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 200 --num-aug 50 --workers 16 2>&1 | tail -1
for preset in sudoku-extreme-1k trm-sudoku; do
  R=/tmp/b-$preset
  timeout 200 python3 -m distlab.cli bench scaling hrm --gpus 1 --config $preset --out $R data.path=$DATA \
    steps=100 lr_warmup_steps=10 log.every=10 dist.compile=true data.eval_limit=200 log.profile_steps=10 \
    log.profile_wait=70 2>&1 | grep -E "│ +1 │|rror"
  for f in $(find $R -name summary.json -path "*profile*"); do cp $f $OUT/prof-$preset-summary.json; done
  for f in $(find $R -name top_ops.txt); do cp $f $OUT/prof-$preset-top_ops.txt; done
  date -u
done
