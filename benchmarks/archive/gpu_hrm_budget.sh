#!/usr/bin/env bash
# Issue 33 on one GPU: one HRM-recipe preset trained for a fixed wall-time budget on generated hard Sudoku, then
# evaluated on the 1,000 generated test puzzles with test-time sampling (K trajectories, halting-head selection;
# the K=1 plain evaluation is reported beside it from the same pass), then again with majority-vote selection.
# One run per device call (a 380 s budget, its compilation and the evaluations fit one 10-minute command).
# Usage (repo root, on the device): bash benchmarks/archive/gpu_hrm_budget.sh PRESET SEED AUG [key=value ...]
#   AUG: augmented copies per training puzzle (50 or 1000); the test split is the same for every AUG and seed.
#   env: BUDGET_S (380), K (16), NOISE (init), NOISE_SCALE (0.1), VOTE (1; 0 skips the vote re-evaluation),
#   EXTRA_EVALS (more evaluations of the trained run, each SELECT:K:NOISE, e.g. "q:8:init q:16:latent")
set -uo pipefail
source benchmarks/device_setup.sh
PRESET=$1; SEED=$2; AUG=$3; shift 3
K=${K:-16}; BUDGET_S=${BUDGET_S:-380}
DATA=data/hard-1k-aug$AUG-t1000
TAG=$PRESET-aug$AUG-seed$SEED${TAG_SUFFIX:-}  # TAG_SUFFIX: e.g. -curriculum, a variant of the same seed
nvidia-smi --query-gpu=name --format=csv,noheader; git log --oneline -1 2>/dev/null; date -u
[ -d "$DATA" ] || python3 -m distlab.cli data sudoku --output-dir "$DATA" --train-size 1000 --test-size 1000 \
  --num-aug "$AUG" --workers 16 || exit 1
NAME=$TAG DATA=$DATA bash benchmarks/train_budget.sh "$PRESET" "$BUDGET_S" "$OUT/$TAG" run.seed="$SEED" \
  eval.samples="$K" eval.select=q eval.noise="${NOISE:-init}" eval.noise_scale="${NOISE_SCALE:-0.1}" "$@"
if [ "${VOTE:-1}" = 1 ]; then
  python3 -m distlab.cli eval "runs/$TAG" eval.samples="$K" eval.select=vote eval.noise="${NOISE:-init}" \
    eval.noise_scale="${NOISE_SCALE:-0.1}" --output "/tmp/vote-$TAG" > "$OUT/$TAG/vote.log" 2>&1
  echo "vote eval exit $?"
fi
cp "/tmp/vote-$TAG/eval.json" "$OUT/$TAG/vote_eval.json" 2>/dev/null  # at most 8 files come back
for extra in ${EXTRA_EVALS:-}; do  # e.g. "q:8:init q:16:latent": selection, K and noise of one more evaluation
  IFS=: read -r sel k noise <<< "$extra"
  python3 -m distlab.cli eval "runs/$TAG" eval.samples="$k" eval.select="$sel" eval.noise="$noise" \
    eval.noise_scale="${NOISE_SCALE:-0.1}" --output "/tmp/$sel-$k-$noise-$TAG" > "$OUT/$TAG/$sel-$k-$noise.log" 2>&1
  echo "eval $extra exit $?"
  cp "/tmp/$sel-$k-$noise-$TAG/eval.json" "$OUT/$TAG/${sel}_${k}_${noise}_eval.json" 2>/dev/null
done
python3 - "$OUT/$TAG" <<'EOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
def final(path):
    rows = [json.loads(x) for x in open(path)] if path.exists() else []
    evals = [r for r in rows if r.get("split") == "eval"]
    return evals[-1] if evals else {}
q = final(next(d.glob("*_metrics.jsonl"), d / "none"))
vote = json.loads((d / "vote_eval.json").read_text()) if (d / "vote_eval.json").exists() else {}
keys = ("exact_accuracy", "blank_accuracy", "sampled_exact_accuracy", "sampled_blank_accuracy",
        "sampled_oracle_exact_accuracy", "eval_time_s", "sampled_eval_time_s", "sampled_eval_cost", "step")
print("K=1 and K (q):", {k: q.get(k) for k in keys})
print("K (vote):", {k: vote.get(k) for k in keys})
EOF
date -u
