# Sourced by the benchmarks/gpu_*.sh stage scripts, on the device and in SMOKE runs alike: their environment
# (stage_env), and what a stage leaves under its results folder comes back as $OUT/<stage>.tgz, also when the call's time limit stops it. Long commands in the
# stages run as `cmd & wait $!`: bash runs a trap only once its foreground command returns, and a hung run once kept
# a 2026-11-28 call from packing anything. Runs cut short leave their rows so far as <run>.partial.jsonl.

stage_env() {  # SMOKE=1: the CPU, with MBPP from ../shared; else the device machine's environment and wheels
  if [ "${SMOKE:-0}" = 1 ]; then
    export MBPP_DIR=../shared/data/mbpp
  else
    source benchmarks/device_setup.sh
  fi
}

pack_at_exit() {  # STAGE RES [FOLDER...]: tee the stage's output to $OUT/log-STAGE; at exit pack RES (and FOLDERs)
  [ -n "${OUT:-}" ] || return 0
  PACK_STAGE=$1 PACK_RES=$2
  shift 2
  PACK_EXTRA="$*"
  exec > >(tee "$OUT/log-$PACK_STAGE") 2>&1
  trap _pack_results EXIT
  trap 'exit 143' TERM INT
}

_pack_results() {  # also stops the stage's background commands, so none outlives the stage
  local d e
  kill $(jobs -p) 2>/dev/null
  for d in "${PACK_RUNS:-/tmp/runs}"/*/; do cp "$d/metrics.jsonl" "$PACK_RES/$(basename "$d").partial.jsonl" 2>/dev/null; done
  for e in $PACK_EXTRA; do cp -r "$e" "$PACK_RES/" 2>/dev/null; done
  tar czf "$OUT/$PACK_STAGE.tgz" -C "$PACK_RES" . 2>/dev/null
}
