#!/usr/bin/env bash
# Train one HRM-recipe preset on one GPU for a fixed wall-time budget, then evaluate on the whole test set.
# What a 10-minute device command allows (written for the HRM/TRM budget runs of issue 3; not yet run on a GPU).
# Usage (repo root): bash benchmarks/train_budget.sh PRESET SECONDS OUT_DIR [key=value ...]
#   data: DATA=data/sudoku-hard-1k-aug50 by default, built with
#   distlab data sudoku --output-dir data/sudoku-hard-1k-aug50 --train-size 1000 --test-size 1000 --num-aug 50
set -uo pipefail
PRESET=$1; SECONDS_BUDGET=$2; OUT=$3; shift 3
DATA=${DATA:-data/sudoku-hard-1k-aug50}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
mkdir -p "$OUT"
NAME=${NAME:-budget-$PRESET}
echo "=== [$(date +%T)] $PRESET for ${SECONDS_BUDGET}s on $DATA"
# constant lr after a 100-step warm-up (both presets decay nothing), so cutting the run at the time limit
# leaves the schedule as published; steps is only an upper bound
python3 -m distlab.cli train hrm --config "$PRESET" data.path="$DATA" steps=100000 lr_warmup_steps=100 \
  dist.compile=true run.time_limit_s="$SECONDS_BUDGET" log.every=100 log.progress=false ckpt.every=0 \
  run.name="$NAME" run.resume=never "$@" > "$OUT/$PRESET.log" 2>&1
echo "exit $?"
grep -E "eval @|time_limit|Error|error" "$OUT/$PRESET.log" | tail -n 5
cp "runs/$NAME/summary.json" "$OUT/${PRESET}_summary.json" 2>/dev/null
cp "runs/$NAME/metrics.jsonl" "$OUT/${PRESET}_metrics.jsonl" 2>/dev/null
python3 - "$OUT/${PRESET}_metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r.get("split") == "train" and r["step"] % 500 == 0 or r.get("split") == "eval":
        keys = ("loss", "accuracy", "exact_accuracy", "token_accuracy", "examples_per_s", "mfu")
        print(r["step"], r.get("split"), {k: round(r[k], 4) for k in keys if k in r})
EOF
