#!/usr/bin/env bash
# Issue 44, item 1: HRM/TRM strong and weak scaling on 1, 2 and 4 GPUs, the code before the change (.base/src,
# `git archive <commit> src | tar -x -C .base`), the code now (src/) and the reference HRM code (.refhrm/, see
# .refhrm/README.txt; never committed) in the same command, jobs side by side on separate GPUs where they fit.
# Run from the repo root on nvidia-h100-x4, one stage a call (each well inside 10 minutes):
#   bash benchmarks/gpu_scaleout.sh one    (carry .whl .base .refhrm): the 1-GPU points, four jobs side by side
#   bash benchmarks/gpu_scaleout.sh two    (carry .base .refhrm): the 2-GPU points, two jobs side by side at a time
#   bash benchmarks/gpu_scaleout.sh four   (carry .base .refhrm): the 4-GPU points, one job at a time, profiled
#   bash benchmarks/gpu_scaleout.sh four-more: TRM and weak scaling (768 per GPU) on 4 GPUs
#   bash benchmarks/gpu_scaleout.sh graphs: 1, 2, 4 GPUs under CUDA graphs, the reference beside
#   bash benchmarks/gpu_scaleout.sh graphs-more: TRM and weak scaling under CUDA graphs, the default mode at 4 GPUs
#   bash benchmarks/gpu_scaleout.sh grpo | faults: GRPO strong/weak scaling; fault drills and two launchers
#   bash benchmarks/gpu_scaleout.sh graphs-a | graphs-b: TRM 1/2/4 GPUs, HRM profiled at 1/2/4 GPUs, weak scaling at
#     2/4 GPUs, a second same-call pair with the reference at 4 GPUs (2026-11-28)
#   bash benchmarks/gpu_scaleout.sh grpo-more: GRPO strong scaling, a GRPO kill -9 drill, a suite laid out two ways
#   bash benchmarks/gpu_scaleout.sh pair-overlap: reference/distlab pairs at 1 and 4 GPUs (reference before and after
#     at 4), and CUDA graphs split at DDP's buckets (all-reduce overlapped with backward) beside the whole-step graph
# .whl must hold a distlab wheel (`pip wheel --no-deps -w .whl .`): its entry points name the recipes; the code
# itself comes from src/ or .base/src, first on PYTHONPATH.
# Every job's JSON and log come back in $OUT/<stage>.tgz, the table at the end: benchmarks/scaleout_table.py.
set -uo pipefail
source benchmarks/device_setup.sh
STAGE=${1:?stage: one, two or four}
RES=/tmp/scaleout/$STAGE
mkdir -p $RES
[ -n "${OUT:-}" ] && exec > >(tee $OUT/log-$STAGE) 2>&1
date -u; nvidia-smi -L; git log -1 --format=%h 2>/dev/null
DATA=/tmp/data/sudoku-hard-1k-aug50
[ -f $DATA/test/dataset.json ] || python3 -m distlab.cli data sudoku --output-dir $DATA --train-size 1000 \
  --test-size 200 --num-aug 50 --workers 48 2>&1 | tail -1
STEPS=${STEPS:-150}
COMMON="data.path=$DATA steps=$STEPS lr_warmup_steps=10 log.every=10 dist.compile=true data.eval_limit=200"

point() {  # NAME CODE(src|.base/src) GPUS VISIBLE PRESET [overrides...]: one `bench scaling` point
  local name=$1 code=$2 n=$3 vis=$4 preset=$5
  shift 5
  CUDA_VISIBLE_DEVICES=$vis PYTHONPATH=$PWD/$code:/tmp/site timeout 420 python3 -m distlab.cli bench scaling hrm \
    --gpus $n --config $preset --out /tmp/b-$name $COMMON "$@" > $RES/$name.log 2>&1
  local rc=$?
  find /tmp/b-$name -maxdepth 1 -name "*.json" -exec cp {} $RES/$name.json \;
  for p in /tmp/b-$name/runs/*/profile/summary.json; do [ -f "$p" ] && cp "$p" $RES/$name.profile.json; done
  echo "[$name] exit $rc $(date -u +%T)"; grep -E "examples/s|rror" $RES/$name.log | tail -2
  [ $rc = 0 ] || tail -n 4 $RES/$name.log
}

ref() {  # NAME GPUS VISIBLE GLOBAL_BATCH: the reference HRM code, median examples/s
  local name=$1 n=$2 vis=$3 gb=$4
  [ -d .refhrm ] || { echo "[$name] no .refhrm carried"; return; }
  CUDA_VISIBLE_DEVICES=$vis PYTHONPATH=$PWD/.refhrm/shims:$PWD/.refhrm/src:/tmp/site OMP_NUM_THREADS=8 \
    timeout 420 python3 -m torch.distributed.run --standalone --nproc-per-node $n .refhrm/bench_ref.py --data $DATA \
    --global-batch $gb --steps $STEPS > $RES/$name.log 2>&1
  local rc=$?
  echo "[$name] exit $rc $(date -u +%T)"; grep -E '^\{' $RES/$name.log | tail -1 | tee $RES/$name.json
  [ $rc = 0 ] || tail -n 6 $RES/$name.log
}

# pydantic-core (the reference's config) needs a typing_extensions newer than the image may hold
[ -d .refhrm ] && { PYTHONPATH=/tmp/site python3 -c "import pydantic" 2>/dev/null || python3 -m pip install -q \
  --no-index --no-deps --no-compile --upgrade --target /tmp/site .refhrm/fallback_whl/*.whl; }
PROF="log.profile_steps=20 log.profile_wait=$((STEPS - 40))"
bg() { "$@" & PIDS+=($!); }  # a job side by side; `wait` alone would also wait for the log's tee
PIDS=()
# the stage's JSONs and logs come back even when the call's time limit ends it early
[ -n "${OUT:-}" ] && trap 'tar czf $OUT/$STAGE.tgz -C $RES . 2>/dev/null' EXIT && trap 'exit 143' TERM INT
case $STAGE in
  one)
    bg point hrm-new-1 src 1 0 sudoku-extreme-1k; bg ref hrm-ref-1 1 1 768; bg point hrm-new-2 src 2 2,3 sudoku-extreme-1k
    wait "${PIDS[@]}"; PIDS=()
    bg ref hrm-ref-2 2 0,1 768; bg point trm-new-1 src 1 2 trm-sudoku; bg point hrm-base-1 .base/src 1 3 sudoku-extreme-1k
    wait "${PIDS[@]}" ;;
  two)
    bg point hrm-base-2 .base/src 2 0,1 sudoku-extreme-1k; bg point trm-new-2 src 2 2,3 trm-sudoku
    wait "${PIDS[@]}"; PIDS=()
    bg point hrm-weak-2 src 2 0,1 sudoku-extreme-1k global_batch_size=1536; bg ref hrm-refweak-2 2 2,3 1536
    wait "${PIDS[@]}" ;;
  four)
    point hrm-new-4 src 4 0,1,2,3 sudoku-extreme-1k $PROF
    ref hrm-ref-4 4 0,1,2,3 768
    point hrm-base-4 .base/src 4 0,1,2,3 sudoku-extreme-1k $PROF ;;
  variants)  # the 4-GPU step's host time: one compiled graph instead of DDP's per-bucket split, then CUDA graphs
    bg point hrm-new-1 src 1 0 sudoku-extreme-1k; bg ref hrm-ref-1 1 1 768
    bg point hrm-nosplit-2 src 2 2,3 sudoku-extreme-1k dist.compile_split_ddp=false
    wait "${PIDS[@]}"; PIDS=()
    point hrm-nosplit-4 src 4 0,1,2,3 sudoku-extreme-1k dist.compile_split_ddp=false $PROF
    point hrm-graphs-4 src 4 0,1,2,3 sudoku-extreme-1k dist.compile_split_ddp=false dist.compile_mode=reduce_overhead
    ref hrm-ref-4 4 0,1,2,3 768 ;;
  graphs)  # the host-bound 4-GPU step under CUDA graphs (dist.compile_mode=reduce_overhead), the reference beside it
    RO="dist.compile_split_ddp=false dist.compile_mode=reduce_overhead"
    export TORCH_LOGS=perf_hints  # names any graph CUDA graphs skip ("skipping cudagraphs due to ...")
    bg point hrm-graphs-1 src 1 0 sudoku-extreme-1k $RO; bg ref hrm-ref-1 1 1 768
    bg point hrm-graphs-2 src 2 2,3 sudoku-extreme-1k $RO
    wait "${PIDS[@]}"; PIDS=()
    grep -h "skipping cudagraphs" $RES/*.log | sort | uniq -c | head -5
    point hrm-graphs-4 src 4 0,1,2,3 sudoku-extreme-1k $RO $PROF
    ref hrm-ref-4 4 0,1,2,3 768 ;;  # ~7.5 minutes with start-up (2026-11-27)
  graphs-more)  # TRM and weak scaling (768 per GPU) under CUDA graphs, the default mode and the reference beside
    RO="dist.compile_split_ddp=false dist.compile_mode=reduce_overhead"
    point trm-graphs-4 src 4 0,1,2,3 trm-sudoku $RO
    point hrm-graphsweak-4 src 4 0,1,2,3 sudoku-extreme-1k $RO global_batch_size=3072
    ref hrm-refweak-4 4 0,1,2,3 3072
    point hrm-new-4 src 4 0,1,2,3 sudoku-extreme-1k $PROF ;;
  graphs-a)  # TRM strong scaling under CUDA graphs; HRM's 1- and 2-GPU steps profiled; weak scaling at 2 GPUs
    RO="dist.compile_split_ddp=false dist.compile_mode=reduce_overhead"
    bg point trm-graphs-1 src 1 0 trm-sudoku $RO; bg point hrm-graphs-1 src 1 1 sudoku-extreme-1k $RO $PROF
    bg point trm-graphs-2 src 2 2,3 trm-sudoku $RO
    wait "${PIDS[@]}"; PIDS=()
    bg point hrm-graphs-2 src 2 0,1 sudoku-extreme-1k $RO $PROF
    bg point hrm-graphsweak-2 src 2 2,3 sudoku-extreme-1k $RO global_batch_size=1536
    wait "${PIDS[@]}"; PIDS=()
    point trm-graphs-4 src 4 0,1,2,3 trm-sudoku $RO ;;
  graphs-c)  # what graphs-a's time limit cut (TRM at 4 GPUs), HRM at 4 GPUs profiled, weak scaling at 4 (2026-11-28)
    RO="dist.compile_split_ddp=false dist.compile_mode=reduce_overhead"
    point trm-graphs-4 src 4 0,1,2,3 trm-sudoku $RO
    point hrm-graphs-4 src 4 0,1,2,3 sudoku-extreme-1k $RO $PROF
    point hrm-graphsweak-4 src 4 0,1,2,3 sudoku-extreme-1k $RO global_batch_size=3072 ;;
  graphs-b)  # a second same-call pair at 4 GPUs (profiled), HRM weak scaling at 4 GPUs (768 per GPU)
    RO="dist.compile_split_ddp=false dist.compile_mode=reduce_overhead"
    point hrm-graphs-4 src 4 0,1,2,3 sudoku-extreme-1k $RO $PROF
    ref hrm-ref-4 4 0,1,2,3 768
    point hrm-graphsweak-4 src 4 0,1,2,3 sudoku-extreme-1k $RO global_batch_size=3072 ;;
  pair-overlap)  # same-call pairs with the reference, ABBA at 4 GPUs, and the overlap arm: CUDA graphs with
    # DDPOptimizer's bucket split (compile_split_ddp=true: one graph per bucket, the all-reduce of a bucket runs while
    # the next bucket's backward replays) against the one whole-step graph
    RO="dist.compile_split_ddp=false dist.compile_mode=reduce_overhead"
    RS="dist.compile_split_ddp=true dist.compile_mode=reduce_overhead"
    bg ref hrm-ref-1 1 0 768; bg point hrm-graphs-1 src 1 1 sudoku-extreme-1k $RO
    bg point hrm-split-1 src 1 2 sudoku-extreme-1k $RS
    wait "${PIDS[@]}"; PIDS=()
    ref hrm-ref-4a 4 0,1,2,3 768
    point hrm-graphs-4 src 4 0,1,2,3 sudoku-extreme-1k $RO
    point hrm-split-4 src 4 0,1,2,3 sudoku-extreme-1k $RS
    ref hrm-ref-4b 4 0,1,2,3 768 ;;
  grpo-more)  # GRPO strong scaling (16 prompts x 8 in all), a GRPO fault drill, a seed-000 suite laid out two ways
    G="model.source=random:qwen2.5-0.5b prompts_per_step=16 num_generations=8 sampling.max_completion_length=128 \
steps=12 log.every=1 evaluation.before=false ckpt.every=0"
    grpo_point() {  # NAME GPUS VISIBLE: one `bench scaling grpo` point
      CUDA_VISIBLE_DEVICES=$3 timeout 240 python3 -m distlab.cli bench scaling grpo --gpus $2 --out /tmp/b-$1 $G \
        > $RES/$1.log 2>&1
      echo "[$1] exit $? $(date -u +%T)"; find /tmp/b-$1 -maxdepth 1 -name "*.json" -exec cp {} $RES/$1.json \;
    }
    bg grpo_point grpo-strong-1 1 0; bg grpo_point grpo-strong-2 2 1,2
    wait "${PIDS[@]}"; PIDS=()
    grpo_point grpo-strong-4 4 0,1,2,3
    grep -h "examples/s" $RES/grpo-*.log
    timeout 200 python3 benchmarks/fault_drills.py --recipe grpo --launch "--gpus 4" --half "--gpus 2" --drills kill9 \
      --uninterrupted --timeout-s 30 --steps 30 --root /tmp/gdrills | tee $RES/grpo-drills.json
    # equal work in both layouts (scale.batch=none: global batch 256 whether a run has 1 GPU or 4)
    S="steps=300 run.time_limit_s=0 data.path=$DATA data.test_size=200 data.num_aug=50 scale.batch=none scale.lr=none"
    for mode in "4 --parallel 4" "4 --parallel 1"; do
      t0=$(date +%s)
      timeout 200 python3 -m distlab.cli suite run hierarchical --scale h200 --seeds 1 --only H1xL1,H2xL2,H2xL4,H4xL2 \
        --no-report --gpus $mode --root "/tmp/suite-${mode// /}" --logs "/tmp/suitelogs-${mode// /}" $S \
        > "$RES/suite-${mode// /}.log" 2>&1
      echo "{\"suite_mode\": \"--gpus $mode\", \"exit\": $?, \"wall_s\": $(( $(date +%s) - t0 ))}" | tee -a $RES/suites.json
    done ;;
  grpo)  # issue 44 item 2: strong (16 prompts x 8) and weak (16 prompts a GPU) scaling, random-weight Qwen-0.5B shape
    G="model.source=random:qwen2.5-0.5b prompts_per_step=16 num_generations=8 sampling.max_completion_length=128 \
steps=12 log.every=1 evaluation.before=false ckpt.every=0"
    timeout 400 python3 -m distlab.cli bench scaling grpo --gpus 1,2,4 --out /tmp/b-grpo-strong $G > $RES/grpo-strong.log 2>&1
    find /tmp/b-grpo-strong -maxdepth 1 -name "*.json" -exec cp {} $RES/grpo-strong.json \;
    for n in 2 4; do
      timeout 150 python3 -m distlab.cli bench scaling grpo --gpus $n --out /tmp/b-grpo-weak$n $G \
        prompts_per_step=$((16 * n)) > $RES/grpo-weak-$n.log 2>&1
      find /tmp/b-grpo-weak$n -maxdepth 1 -name "*.json" -exec cp {} $RES/grpo-weak-$n.json \;
    done
    grep -h "examples/s" $RES/grpo-*.log ;;
  faults)  # issue 44 item 3 and 4: the drills on NCCL, then two launchers of 2 GPUs against one of 4
    timeout 420 python3 benchmarks/fault_drills.py --launch "--gpus 4" --half "--gpus 2" --timeout-s 30 --steps 200 \
      | tee $RES/drills.json
    T="train hrm data.build=sudoku data.train_size=256 data.test_size=64 data.workers=4 global_batch_size=64 \
arch.hidden_size=128 arch.num_heads=4 arch.H_layers=2 arch.L_layers=2 arch.puzzle_emb_ndim=128 steps=30 \
data.eval_limit=64 run.dir=/tmp/nodes"
    CUDA_VISIBLE_DEVICES=0,1 python3 -m distlab.cli $T run.name=two --gpus 2 --nodes 2 --node-rank 0 \
      --master-addr 127.0.0.1 --master-port 29733 --rdzv-backend c10d > $RES/node0.log 2>&1 &
    CUDA_VISIBLE_DEVICES=2,3 python3 -m distlab.cli $T run.name=two --gpus 2 --nodes 2 --node-rank 1 \
      --master-addr 127.0.0.1 --master-port 29733 --rdzv-backend c10d > $RES/node1.log 2>&1
    wait $!
    python3 -m distlab.cli $T run.name=one --gpus 4 > $RES/one.log 2>&1
    grep -h param_checksum /tmp/nodes/*/summary.json ;;
  four-more)
    point trm-new-4 src 4 0,1,2,3 trm-sudoku
    point hrm-weak-4 src 4 0,1,2,3 sudoku-extreme-1k global_batch_size=3072 ;;
  *) echo "unknown stage $STAGE: one, two, four, four-more, variants, graphs, graphs-more, graphs-a, graphs-b, graphs-c,"\
       "grpo,"\
       "grpo-more, pair-overlap or faults"; exit 2 ;;
esac
python3 benchmarks/scaleout_table.py /tmp/scaleout
date -u
