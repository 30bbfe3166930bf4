#!/usr/bin/env bash
# Issue 20 on one GPU (see docs/benchmarks.md): benchmarks/mem_options.py in two stages because the SmolLM2 GGUF
# is larger than one carry. Stage 1: stash the first GGUF piece; HRM cases; then the top kernels of a compiled
# HRM and TRM step (log.profile_steps) for the speed work. Stage 2: join the GGUF; the GRPO cases.
set -uo pipefail
source benchmarks/device_setup.sh
mkdir -p /tmp/mem
date -u
if [ "${1:?stage}" = 1 ]; then
  stash_gguf
  timeout 330 python3 benchmarks/mem_options.py --only hrm --steps 30 --timeout 90 --out /tmp/mem 2>&1 | tail -14
  date -u
  for preset in sudoku-extreme-1k trm-sudoku; do
    timeout 110 python3 -m distlab.cli train hrm --config $preset data.path=runs/mem-options/sudoku-data steps=60 \
      dist.compile=true eval_every=0 ckpt.every=0 log.every=10 log.progress=false data.eval_limit=32 \
      log.profile_steps=5 log.profile_wait=50 run.name=prof-$preset --gpus 1 > /tmp/mem/prof-$preset.log 2>&1
    cp runs/prof-$preset/profile/summary.json /tmp/mem/prof-$preset-summary.json
    cp runs/prof-$preset/profile/top_ops.txt /tmp/mem/prof-$preset-top_ops.txt
    head -28 runs/prof-$preset/profile/top_ops.txt | cut -c1-60,100-200
  done
else
  join_gguf
  timeout 540 python3 benchmarks/mem_options.py --only grpo --grpo-steps 3 --timeout 120 --gguf $GGUF \
    --mbpp-dir .data/mbpp --out /tmp/mem 2>&1 | tail -10
fi
date -u
find /tmp/mem -name "*.pickle" -size +20M -delete
cd /tmp && tar czf $OUT/mem-$1.tgz mem
