#!/usr/bin/env bash
# The GPU measurements behind docs/benchmarks.md (issue 2/3/5): doctor, HRM and CLSTM-PPO scaling on 1 and 2 GPUs.
# Usage (on a machine with 2 GPUs, from the repo root): bash benchmarks/gpu_scaling.sh OUT_DIR [MARKET_DIR]
set -uo pipefail
OUT=${1:-bench_out}; MARKET=${2:-../shared/data/market}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
D="python3 -m distlab.cli"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
$D doctor --json --recipe hrm --config sudoku-extreme-1k > "$OUT/doctor.json"; $D doctor --no-bandwidth > "$OUT/doctor.txt" 2>&1
tail -n 30 "$OUT/doctor.txt"
SECONDS=0
$D data sudoku --output-dir data/sudoku-hard-1k-aug1000 --train-size 1000 --test-size 1000 --num-aug 1000 --workers 30 \
  | tail -n 4
echo "data built in ${SECONDS}s"
HRM="--config sudoku-extreme-1k data.path=data/sudoku-hard-1k-aug1000 steps=150 lr_warmup_steps=10 log.every=10 \
  dist.compile=true data.eval_limit=1536"
$D bench scaling hrm --gpus 1,2 --out distributed_results $HRM 2>&1 | grep -v Warning | tail -n 20
PPO="env=trading policy=clstm window=30 num_envs=16 num_steps=128 total_timesteps=65536 log.every=1 \
  trading_data=$MARKET/DJI_2009_2020.csv,$MARKET/SPY_2009_2020.csv"
$D bench scaling ppo --gpus 1,2 --out distributed_results $PPO 2>&1 | grep -v Warning | tail -n 20
cp distributed_results/*.json distributed_results/*.png "$OUT"/ 2>/dev/null
ls "$OUT"
