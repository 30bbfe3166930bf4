#!/usr/bin/env bash
# The GPU measurements behind docs/benchmarks.md: HRM and CLSTM-PPO scaling on 1 and 2 GPUs, then HRM and TRM
# trained side by side (one GPU each) for a fixed wall-time budget on generated hard Sudoku.
# Usage (repo root): [GPUS=1,2,4,8] bash benchmarks/archive/gpu_scaling.sh OUT_DIR [MARKET_DIR] [TRAIN_SECONDS]
set -uo pipefail
OUT=${1:-bench_out}; MARKET=${2:-../shared/data/market}; TRAIN_S=${3:-100}; GPUS=${GPUS:-1,2}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
D="python3 -m distlab.cli"
DATA=data/sudoku-hard-1k-aug50
stage() { echo "=== [$(date +%T)] $*"; }
stage data
timeout 90 $D data sudoku --output-dir $DATA --train-size 1000 --test-size 1000 --num-aug 50 --workers 30 | tail -n 3
HRM="--config sudoku-extreme-1k data.path=$DATA steps=100 lr_warmup_steps=10 log.every=10 dist.compile=true \
  data.eval_limit=768"
stage hrm scaling
timeout 190 $D bench scaling hrm --gpus $GPUS $HRM 2>&1 | grep -v Warning | tail -n 12
stage ppo scaling
timeout 80 $D bench scaling ppo --gpus $GPUS env=trading policy=clstm window=30 num_envs=16 num_steps=128 \
  total_timesteps=32768 log.every=1 trading_data=$MARKET/DJI_2009_2020.csv,$MARKET/SPY_2009_2020.csv \
  2>&1 | grep -v Warning | tail -n 12
stage "hrm + trm training (${TRAIN_S}s each, GPU0 / GPU1)"
COMMON="data.path=$DATA steps=20000 eval_every=0 lr_warmup_steps=100 dist.compile=true run.time_limit_s=$TRAIN_S \
  log.every=50 log.progress=false"
CUDA_VISIBLE_DEVICES=0 timeout 160 $D train hrm --config sudoku-extreme-1k $COMMON run.name=h200-hrm > "$OUT/hrm_train.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 160 $D train hrm --config trm-sudoku $COMMON run.name=h200-trm > "$OUT/trm_train.log" 2>&1 &
wait
for r in hrm trm; do echo "--- $r"; tail -n 4 "$OUT/${r}_train.log"; cp runs/h200-$r/summary.json "$OUT/${r}_summary.json"; done
cp distributed_results/*.json distributed_results/*.png "$OUT"/ 2>/dev/null
stage done; ls "$OUT"
