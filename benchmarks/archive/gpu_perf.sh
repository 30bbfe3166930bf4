#!/usr/bin/env bash
# Issue 19 on one GPU (see docs/benchmarks.md): HRM and TRM step throughput with a torch.profiler breakdown
# (log.profile_steps), and CLSTM-PPO env-steps/s with the vectorised trading env. Results under $OUT (one tarball).
# Needs the carried wheels in .whl and the market CSVs in .data/market.
set -uo pipefail
source benchmarks/device_setup.sh
R=/tmp/perf; mkdir -p $R; date -u; nvidia-smi -L
DATA=data/sudoku-hard-1k-aug50
[ -d $DATA ] || python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 --test-size 1000 --num-aug 50 \
  --workers 16 2>&1 | tail -2
date -u
for preset in sudoku-extreme-1k trm-sudoku; do
  timeout 240 python3 -m distlab.cli bench scaling hrm --gpus 1 --config $preset --out $R/bench-$preset data.path=$DATA \
    steps=100 lr_warmup_steps=10 log.every=10 dist.compile=true data.eval_limit=768 log.profile_steps=10 \
    log.profile_wait=70 2>&1 | tail -4
  for f in $(find $R/bench-$preset -name summary.json -path "*profile*"); do echo "== $preset profile"; cat $f; done
  find $R/bench-$preset -name "trace.json.gz" -delete
  date -u
done
timeout 120 python3 -m distlab.cli bench scaling ppo --gpus 1 --out $R/bench-ppo env=trading policy=clstm window=30 \
  num_envs=16 num_steps=128 total_timesteps=32768 log.every=1 \
  trading_data=.data/market/DJI_2009_2020.csv,.data/market/SPY_2009_2020.csv 2>&1 | tail -4
date -u
OMP_NUM_THREADS=4 timeout 170 python3 benchmarks/ppo_env_speed.py --num-envs 16,64,256 --market-dir .data/market \
  2>&1 | tail -20
date -u
cd /tmp && tar czf $OUT/perf.tgz perf
