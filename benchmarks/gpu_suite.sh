#!/usr/bin/env bash
# One HRM-recipe suite on one GPU inside a 10-minute device command (issue 17): build the generated hard Sudoku
# data once on all cores, run every experiment x seed side by side on the GPU, and pack the results (no
# checkpoints) under OUT. The report is built afterwards with `distlab suite report` from the unpacked folder.
# Usage (repo root): bash benchmarks/gpu_suite.sh SUITE PARALLEL OUT [suite run options and key=value ...]
set -uo pipefail
SUITE=$1; PARALLEL=$2; OUT=$3; shift 3
source benchmarks/device_setup.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 15 > "$OUT/gpu_usage.csv" &
SMI=$!
echo "=== [$(date +%T)] data"
python3 -m distlab.cli data sudoku --output-dir data/sudoku-n1000-t1000-aug1000-s0 --train-size 1000 \
  --test-size 1000 --num-aug 1000 --workers 16 2>&1 | tail -n 1
echo "=== [$(date +%T)] suite $SUITE, $PARALLEL runs at a time"
python3 -m distlab.cli suite run "$SUITE" --parallel "$PARALLEL" --no-report "$@" 2>&1 | tail -n 30
echo "=== [$(date +%T)] done"
kill $SMI 2>/dev/null
tar czf "$OUT/results.tgz" --exclude=checkpoints --exclude='*.pt' --exclude='*.distcp' experiment_results logs
ls -la "$OUT"
