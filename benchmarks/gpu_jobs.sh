#!/usr/bin/env bash
# Jobs that outlive one device call: started detached (setsid), so they run on while the next calls carry an asset
# piece by piece, and a later call waits for them and collects their files. The machine stays warm only while calls
# follow each other within its idle window (about 30 s), so keep calling `wait` until every job has ended.
#   bash benchmarks/gpu_jobs.sh start NAME GPU "CMD"   CMD runs with CUDA_VISIBLE_DEVICES=GPU and OUT=/tmp/jobs/NAME
#   bash benchmarks/gpu_jobs.sh wait SECONDS           returns when every job has ended or SECONDS have passed;
#                                                      packs every job's files so far into $OUT/results.tgz
#   bash benchmarks/gpu_jobs.sh collect                every job's files packed into $OUT/results.tgz
# Each job's folder holds command, log and (once it ended) exit; CMD may chain stages with && or ;.
# A job reads its data from /tmp, never from a carried ignored path: each call's copy of the working tree removes
# the ignored paths that call does not carry, under the feet of jobs still running.
set -uo pipefail
JOBS=/tmp/jobs
case "${1:?start NAME GPU CMD | wait SECONDS | collect}" in
  start)
    name=${2:?job name}; gpu=${3:?GPU index}; cmd=${4:?command}
    dir=$JOBS/$name; rm -rf "$dir"; mkdir -p "$dir"
    echo "$cmd" > "$dir/command"
    CUDA_VISIBLE_DEVICES=$gpu OUT=$dir setsid nohup bash -c "( $cmd ); echo \$? > $dir/exit" > "$dir/log" 2>&1 < /dev/null &
    echo "started $name on GPU $gpu (pid $!)" ;;
  wait)
    end=$(( $(date +%s) + ${2:?seconds} ))
    while [ "$(date +%s)" -lt "$end" ]; do
      running=0
      for d in "$JOBS"/*/; do [ -f "$d/exit" ] || running=$((running + 1)); done
      [ "$running" = 0 ] && break
      sleep 5
    done
    for d in "$JOBS"/*/; do
      name=$(basename "$d")
      if [ -f "$d/exit" ]; then echo "== $name: exit $(cat "$d/exit")"; else echo "== $name: running"; fi
      tail -n "${TAIL:-4}" "$d/log" | cut -c1-300
    done
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader
    # every wait also brings back what the jobs have written so far: a machine released between two calls (idle
    # past its window) takes /tmp with it, which lost a finished SmolLM2 run on 2026-11-26
    if [ -n "${OUT:-}" ]; then tar czf "$OUT/results.tgz" -C "$JOBS" .; fi ;;
  collect)
    tar czf "$OUT/results.tgz" -C "$JOBS" . && ls -la "$OUT" ;;
  *) echo "unknown verb $1: start | wait | collect"; exit 2 ;;
esac
