#!/usr/bin/env bash
# GPU measurements for the LM recipes on one device-tool machine (see docs/benchmarks.md).
#   stage 1: install carried wheels, stash the first GGUF piece in /tmp (the model is larger than one carry)
#   stage 2: join the GGUF, then: generation tokens/s (HF vs ours), GRPO with base/after MBPP-test pass@1,
#            HumanEval pass@1 of the base and trained policy; results under $OUT
set -uo pipefail
STAGE=${1:?stage 1 or 2}
source benchmarks/device_setup.sh
if [ "$STAGE" = 1 ]; then
  stash_gguf
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
  which prlimit unshare setpriv; ls -la /usr/bin/python3
  python3 -m distlab.cli sandbox run benchmarks/sandbox_probe.py --tests benchmarks/sandbox_probe.py --json
  exit 0
fi
join_gguf
git rev-parse HEAD 2>/dev/null; date -u
python3 benchmarks/lm_generate.py --device cuda --dtype bf16 --source $GGUF --prompts 8 --samples 8 --new-tokens 256 \
  --repeats 3 --json $OUT/generate.json 2>&1 | tail -8
COMMON="model.source=$GGUF task.mbpp_dir=.data/mbpp models.policy.dtype=bf16 models.reference.dtype=bf16 dist.precision=bf16"
timeout 420 python3 -m distlab.cli train grpo --config gpu-smollm2-mbpp $COMMON run.name=grpo-gpu --gpus 1 2>&1 | grep -v "step .*/" | tail -25
cp runs/grpo-gpu/metrics.jsonl runs/grpo-gpu/summary.json $OUT/ 2>/dev/null
timeout 150 python3 -m distlab.cli eval runs/grpo-gpu task.eval=humaneval task.eval_split=test task.eval_size=0 --gpus 1 2>&1 | tail -6
cp runs/grpo-gpu/eval/*/eval.json $OUT/humaneval_eval.json 2>/dev/null
ls $OUT
