#!/usr/bin/env bash
# Issue 29 item 5 on one GPU: rollout throughput of our sampler (`static`: shared prefill, fixed-shape compiled
# decode) against transformers' `generate` (`hf`) and its static-cache compiled mode (`hf-static`), at 64 and 512
# sequences (8 or 64 prompts x G=8) and 256 or 512 new tokens. Usage (repo root, on the device):
#   bash benchmarks/archive/gpu_rollout_speed.sh SOURCE[,SOURCE...]    e.g. random:qwen2.5-0.5b,random:smollm2-135m
# Random-weight shapes run every completion to its token limit (equal work for every backend); a real model's
# completions stop at their own ends. One JSON per case in $OUT; the cases run in the order below, most wanted first,
# so a time limit cuts the least wanted. env: CASES (default "64:512 64:256 8:256 8:512"), BACKENDS, PROFILE=N (one
# more call per backend under torch.profiler: its N costliest kernels and the share of the wall time the GPU was busy).
set -uo pipefail
source benchmarks/device_setup.sh
nvidia-smi --query-gpu=name --format=csv,noheader; date -u +%FT%TZ
for case in ${CASES:-64:512 64:256 8:256 8:512}; do
  IFS=: read -r prompts tokens <<< "$case"
  for source in ${1//,/ }; do
    tag=$(echo "$source" | tr ':/' '__')_p${prompts}_n${tokens}
    python3 benchmarks/lm_generate.py --source "$source" --device cuda --dtype bf16 --prompts "$prompts" \
      --samples 8 --new-tokens "$tokens" --backends "${BACKENDS:-static,static-compact,hf-static,hf}" ${PROFILE:+--profile $PROFILE} --json "$OUT/$tag.json" 2>&1 \
      | grep -v "Loading\|de-quantizing" | tail -$((6 + ${PROFILE:-0} * 4))
  done
done
date -u +%FT%TZ
