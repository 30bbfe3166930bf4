#!/usr/bin/env bash
# Issue 30 on one GPU (see docs/benchmarks.md): the seeds' model sizes with random weights. Stage grpo: the GRPO
# step of the Qwen2.5-1.5B shape under the memory options; stage score: the SCoRe step of the Llama-3.2-3B shape
# with its other models, including the seed's 44.5 GiB card imitated by a memory fraction. No model file travels.
set -uo pipefail
source benchmarks/device_setup.sh
date -u
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
# $1: grpo | score | precision | a comma list | both; PICK: e.g. "grpo:0,1,3,6,7;score:0,3" (one 10-minute call for both)
only=${1:?grpo|score|precision|both}; [ "$only" = both ] && only=""
timeout ${BUDGET:-560} python3 benchmarks/lm_shapes.py ${only:+--only $only} --pick "${PICK:-}" --extra "${EXTRA:-}" --steps ${STEPS:-3} \
  --timeout ${CASE_S:-100} --out $OUT 2>&1 | tail -40
date -u
