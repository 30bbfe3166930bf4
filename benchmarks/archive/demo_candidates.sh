#!/usr/bin/env bash
# Issue 18: candidate CPU demos, each pinned to 2 cores of a many-core machine (taskset) with one thread per
# process, run side by side for the same wall budget, to choose how hard the 10-minute 2-core demo can be.
# Calibration: candidate "now" is today's demo (8 blanks), whose 2-core CI-machine figures are known.
set -uo pipefail
source benchmarks/device_setup.sh
export OMP_NUM_THREADS=1
BUDGET=${BUDGET:-420}
TRM="arch.name=trm arch.mlp_t=true arch.pos_encodings=none arch.L_layers=2 arch.H_cycles=3 arch.L_cycles=6 arch.act=halt_only ema=true eval_every=200"
HRM2="arch.H_cycles=2 arch.L_cycles=2 arch.halt_max_steps=4"
cands=(
  "now|"
  "b20-hrm11|data.blanks=20"
  "b20-hrm22|data.blanks=20 $HRM2"
  "b20-trm|data.blanks=20 $TRM"
  "b30-hrm22|data.blanks=30 $HRM2"
  "b30-trm|data.blanks=30 $TRM"
  "b14-hrm22|data.blanks=14 $HRM2"
)
date -u; i=0
for c in "${cands[@]}"; do
  name=${c%%|*}; extra=${c#*|}
  taskset -c $((2*i)),$((2*i+1)) timeout $((BUDGET + 120)) python3 -m distlab.cli train hrm --config demo-sudoku $extra \
    run.time_limit_s=$BUDGET log.progress=false run.name=$name > /tmp/demo-$name.log 2>&1 &
  i=$((i+1))
done
wait; date -u
for c in "${cands[@]}"; do
  name=${c%%|*}; echo "== $name: ${c#*|}"
  grep -E "eval @|time_limit" /tmp/demo-$name.log | sed 's/  */ /g' | tail -4
  python3 -c "import json;s=json.load(open('runs/$name/summary.json'));e=s.get('eval',{});print({k:round(v,4) if isinstance(v,float) else v for k,v in e.items() if 'acc' in k or 'baseline' in k}, 'step',s.get('step'))" 2>&1 | tail -1
done
