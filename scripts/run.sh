#!/usr/bin/env bash
# The main job: build minfer, generate text with a fixture model, then run the
# Small synthetic-model benchmark and the fused-softmax benchmark, on the CUDA
# backend when a GPU is usable, else on the CPU.
#
#   bash scripts/run.sh
#   BUILD_DIR=build-x MF_CMAKE_ARGS="-DMF_CUDA=OFF" bash scripts/run.sh
#
# The text comes from models/minfer-kjv-3m, a 2.8 M-parameter Llama trained here
# on the King James Bible (tools/train_tiny/train.py; see its README): English
# in the KJV's style, from a model small enough to commit. For a real checkpoint,
# use a Hugging Face GPT-2 or Llama folder (config.json, *.safetensors,
# tokenizer.json):
#   build/minfer generate -m PATH/TO/MODEL -p "Once upon a time" -n 64
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
gen=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
# shellcheck disable=SC2086  # MF_CMAKE_ARGS is a list of words on purpose
cmake -S . -B "$build" "${gen[@]}" ${MF_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs" >/dev/null
mf="$build/minfer"

echo "== minfer info"
"$mf" info

echo
echo "== minfer generate (models/minfer-kjv-3m: a tiny Llama trained on the KJV; greedy, best backend)"
prompt="And God said unto Noah,"
echo "prompt: $prompt"
"$mf" generate -m models/minfer-kjv-3m -p "$prompt" -n 48 --temp 0

echo
echo "== minfer bench model --synthetic small"
"$mf" bench model --synthetic small

echo
echo "== minfer bench softmax (fused vs unfused; subset)"
"$mf" bench softmax --cases grid

echo
echo "Next: build/minfer generate -m PATH/TO/HF/MODEL -p \"Once upon a time\" -n 64"
echo "      (GPT-2 or Llama checkpoints: config.json + model*.safetensors + tokenizer.json)"
