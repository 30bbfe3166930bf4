#!/usr/bin/env bash
# CLSTM-PPO env-steps/s on 1 and 2 GPUs (trading env, DJI+SPY), plus a longer HRM / TRM training pair.
# Usage (2-GPU machine, repo root): bash benchmarks/gpu_ppo.sh OUT_DIR [MARKET_DIR] [TRAIN_SECONDS]
set -uo pipefail
OUT=${1:-bench_out}; MARKET=${2:-../shared/data/market}; TRAIN_S=${3:-120}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
D="python3 -m distlab.cli"
echo "=== [$(date +%T)] ppo scaling"
timeout 80 $D bench scaling ppo --gpus 1,2 env=trading policy=clstm window=30 num_envs=16 num_steps=128 \
  total_timesteps=32768 log.every=1 trading_data=$MARKET/DJI_2009_2020.csv,$MARKET/SPY_2009_2020.csv \
  2>&1 | grep -v Warning | tail -n 12
cp distributed_results/*.json distributed_results/*.png "$OUT"/ 2>/dev/null
echo "=== [$(date +%T)] done"
