#!/usr/bin/env bash
# One lease of a one-GPU machine (nvidia-h200; 2026-11-28: no multi-GPU kind lent) for the LLM figures one GPU can
# give. The Qwen2.5-Coder-0.5B asset travels in 10 pieces over 10 back-to-back calls; meanwhile the GPU runs a
# detached job that needs no asset. Run from the repo root, one stage a call:
#   bash benchmarks/gpu_x1.sh wheels        carry .whl: installs them (TRL and datasets too) and starts the speed job:
#                                           the rollout factors (issue 47 item 4) then LoRA vs full (issue 49 item 3)
#   bash benchmarks/gpu_x1.sh piece K       carry .asset_qwen/pieceK (K = 01..10); one of them carries .data too
#   bash benchmarks/gpu_x1.sh trl SIDES     joins the asset, waits for the speed job, then trl_compare.py with
#                                           --frameworks SIDES (issue 47 item 3), e.g. distlab,trl:static,trl:plain
#   bash benchmarks/gpu_x1.sh offpolicy     GRPO synchronous vs one step off-policy, equal steps, MBPP test accuracy
#                                           after (issue 49 item 1); the arms share the GPU: accuracy, not speed
# Results come back as $OUT/<stage>.tgz plus the stage's log. `SMOKE=1 bash $0 speed|trl SIDES|offpolicy` runs the
# command lines on the CPU with the tiny model.
set -uo pipefail
STAGE=${1:?stage: wheels, piece K, trl SIDES, offpolicy or speed}
SMOKE=${SMOKE:-0}
source benchmarks/device_stage.sh
stage_env
RES=/tmp/x1/$STAGE; mkdir -p $RES
[ "$STAGE" = speed ] || pack_at_exit "$STAGE" "$RES" /tmp/x1/speed
date -u; nvidia-smi -L 2>/dev/null
SPEED=/tmp/x1/speed

case $STAGE in
  wheels)  # the speed job outlives this call, writing under /tmp while the next calls carry pieces
    setsid nohup bash benchmarks/gpu_x1.sh speed > /tmp/x1/speed.log 2>&1 < /dev/null &
    disown  # not one of the jobs that packing at exit stops
    echo "speed job started, pid $!" ;;
  piece)
    stash_asset .asset_qwen
    [ -d .data/mbpp ] && stash_mbpp
    tail -n 4 /tmp/x1/speed.log 2>/dev/null ;;
  speed)  # no asset needed: random-weight shapes
    mkdir -p $SPEED
    if [ "$SMOKE" = 1 ]; then R="--tiny --device cpu --backends hf-static,hf-static@grouped_sdpa,static@sdpa,static"
    else R="--source random:qwen2.5-0.5b --device cuda --dtype bf16 --prompts 64 --samples 8 --new-tokens 512 \
--backends hf-static,hf-static@grouped_sdpa,static@sdpa,static,static-compact --repeats 1"; fi
    # shellcheck disable=SC2086
    timeout 300 python3 benchmarks/lm_generate.py $R --json $SPEED/rollout_factors.json > $SPEED/rollout.log 2>&1
    echo "rollout factors exit $?"
    if [ "$SMOKE" = 1 ]; then A="--smoke"; else A=""; fi
    # shellcheck disable=SC2086
    timeout 330 python3 benchmarks/lm_shapes.py --only lora --steps 6 --timeout 150 --runs /tmp/lora-runs \
      --out $SPEED $A > $SPEED/lora.log 2>&1
    echo "lora exit $?"; touch $SPEED/done ;;
  trl)  # issue 47 item 3: TRL on each of its generation paths beside distlab, the same prompts step by step
    SIDES=${2:?sides, e.g. distlab,trl:static,trl:plain}
    for _ in $(seq "${SPEED_WAIT_S:-360}"); do [ -f $SPEED/done ] || [ "$SMOKE" = 1 ] && break; sleep 1; done
    [ -f $SPEED/done ] || [ "$SMOKE" = 1 ] || { echo "speed job still running: stopped"; pkill -f lm_shapes.py
      pkill -f lm_generate.py; pkill -f "distlab.cli train"; sleep 5; }
    if [ "$SMOKE" = 1 ]; then
      T="--model tiny:llama-2l --device cpu --steps 3 --warmup-steps 1 --prompts 2 --num-generations 2 \
--micro-batch 2 --max-completion-length 16 --train-size 8 --sandbox-workers 1"
    else
      join_qwen
      T="--model $ASSET --device cuda --dtype bf16 --steps ${STEPS:-22} --warmup-steps 2 --prompts 16 \
--num-generations 8 --micro-batch 32 --max-completion-length 256 --sandbox-workers 8"
    fi
    # shellcheck disable=SC2086
    python3 benchmarks/trl_compare.py $T --frameworks "$SIDES" --distlab-arg log.sync_phases=true \
      --json $RES/trl_compare.json & wait $! ;;
  offpolicy)  # issue 49 item 1: accuracy after equal steps; both arms on the one GPU at once
    if [ "$SMOKE" = 1 ]; then
      M="model.source=tiny:llama-2l model.prompt_mode=text dist.precision=fp32 prompts_per_step=4 num_generations=2
         sampling.max_completion_length=16 steps=3 task.eval_size=4"; L="--procs 1"
    else
      join_qwen; stash_mbpp
      M="model.source=$ASSET model.prompt_mode=chat dist.precision=bf16 models.policy.dtype=bf16
         models.reference.dtype=bf16 prompts_per_step=16 num_generations=8 micro_batch_size=32
         sampling.max_completion_length=384 steps=${STEPS:-40} sandbox.workers=7 task.eval_size=500"; L="--gpus 1"
    fi
    G="$M task.mbpp_dir=$MBPP_DIR task.train=mbpp task.train_split=train task.eval=mbpp task.eval_split=test
       lr=2e-6 beta=0.04 scale_rewards=group sampling.temperature=1.0 dynamic_sampling=false evaluation.before=true
       sandbox.timeout_s=5 ckpt.every=0 log.every=1 log.progress=false run.dir=/tmp/runs"
    arm() {  # NAME [overrides...]
      local name=$1; shift
      # shellcheck disable=SC2086
      timeout 560 python3 -m distlab.cli train grpo $G run.name=$name "$@" $L > $RES/$name.log 2>&1
      echo "[$name] exit $? $(date -u +%T)"; cp /tmp/runs/$name/metrics.jsonl $RES/$name.jsonl 2>/dev/null
      cp /tmp/runs/$name/summary.json $RES/$name.summary.json 2>/dev/null
      for f in /tmp/runs/$name/*_problems.json; do [ -f "$f" ] && cp "$f" "$RES/$name.$(basename "$f")"; done
    }
    arm sync async.off_policy_steps=0 & P0=$!
    arm offpolicy1 async.off_policy_steps=1 & P1=$!
    wait $P0 $P1
    evals() { echo "$RES/$1.eval_start_step000000_problems.json,$(ls $RES/$1.eval_step*_problems.json | tail -n 1)"; }
    # each arm base -> trained, and the off-policy arm's trained policy against the synchronous one's (exact McNemar)
    python3 benchmarks/paired_problems.py "offpolicy1=$(evals offpolicy1)" "sync=$(evals sync)" \
      --json $RES/paired.json ;;
  *) echo "unknown stage $STAGE: wheels, piece K, trl SIDES, offpolicy or speed"; exit 2 ;;
esac
date -u
