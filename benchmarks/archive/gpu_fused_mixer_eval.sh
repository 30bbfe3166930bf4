#!/usr/bin/env bash
# Issue 19: does the fused mixer change what TRM learns or how it scores? trm-sudoku trained for 3,105 steps (the
# step count of the 66.0% budget run without the kernel, same seed and schedule) with the kernel, then its final
# checkpoint evaluated with arch.fused_mixer=true and =false on the same 1,000 hard test puzzles.
# Run from the repo root on a device machine; files under $OUT.
set -uo pipefail
source benchmarks/device_setup.sh
[ -n "${OUT:-}" ] && exec > >(tee $OUT/log) 2>&1
date -u; nvidia-smi -L
DATA=data/hard-1k-aug50-t1000
[ -d $DATA ] || python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 1000 \
  --num-aug 50 --workers 16 2>&1 | tail -1
python3 -m distlab.cli train hrm --config trm-sudoku data.path=$DATA steps=3105 lr_warmup_steps=100 \
  dist.compile=true log.every=100 log.progress=false run.name=trm-3105 run.resume=never > $OUT/train.log 2>&1
grep -E "eval @|Error" $OUT/train.log | tail -3
cp runs/trm-3105/metrics.jsonl $OUT/trm_3105_metrics.jsonl
for fused in true false; do
  timeout 120 python3 -m distlab.cli eval runs/trm-3105 -o /tmp/ev-$fused arch.fused_mixer=$fused dist.compile=false \
    > $OUT/eval-$fused.log 2>&1
  echo "fused_mixer=$fused: $(grep -E "exact" $OUT/eval-$fused.log | tail -1)"
  cp /tmp/ev-$fused/eval.json $OUT/eval-fused-$fused.json 2>/dev/null
done
date -u
