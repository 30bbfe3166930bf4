#!/usr/bin/env bash
# Several benchmark commands at once on a multi-GPU device machine, one GPU each, so one 10-minute call does the
# work of several (device time counts the whole machine). Usage, from the repo root on the device:
#   bash benchmarks/gpu_parallel.sh "CMD for GPU 0" "CMD for GPU 1" ...      (env JOB_S: each job's limit, 560 s)
# Each job sees CUDA_VISIBLE_DEVICES=<its index> and its own OUT folder; its output goes to <its OUT>/log, whose
# tail is printed when all have ended. The device tool returns at most 8 files, so everything the jobs wrote is
# packed into one $OUT/results.tgz (unpack it under docs/results/ to keep what matters).
set -uo pipefail
source benchmarks/device_setup.sh
[ $# -ge 1 ] || { echo "give one command per GPU"; exit 2; }
GPUS=$(nvidia-smi -L | wc -l)
[ $# -le "$GPUS" ] || { echo "$# commands for $GPUS GPUs: give at most one command per GPU"; exit 2; }
STAGE=/tmp/parallel_out; rm -rf "$STAGE"; mkdir -p "$STAGE"
FINAL_OUT=$OUT
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
git log --oneline -1 2>/dev/null; date -u +%FT%TZ
pids=()
for i in $(seq 0 $(($# - 1))); do
  j=$((i + 1)); cmd=${!j}
  mkdir -p "$STAGE/job$i"
  echo "$cmd" > "$STAGE/job$i/command"
  (export CUDA_VISIBLE_DEVICES=$i OUT=$STAGE/job$i; timeout "${JOB_S:-560}" bash -c "$cmd") > "$STAGE/job$i/log" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; echo "job $i exit $?" | tee -a "$STAGE/job$i/log"
done
for i in "${!pids[@]}"; do
  echo "=== job $i: $(cat "$STAGE/job$i/command")"; tail -n "${TAIL:-25}" "$STAGE/job$i/log"
done
date -u +%FT%TZ
tar czf "$FINAL_OUT/results.tgz" -C "$STAGE" . && ls -la "$FINAL_OUT"
