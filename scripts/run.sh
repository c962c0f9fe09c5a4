#!/usr/bin/env bash
# The main job: build minfer, generate text with the default model, then run
# the Small synthetic-model benchmark and the fused-softmax benchmark, on the
# CUDA backend when a GPU is usable, else on the CPU.
#
#   bash scripts/run.sh
#   BUILD_DIR=build-x MF_CMAKE_ARGS="-DMF_CUDA=OFF" bash scripts/run.sh
#
# Set-up first (scripts/deps.sh): missing Debian packages are installed as
# root or through sudo; without either, one line names them (exit 2).
#
# The text comes from models/minfer-kjv-3m, a 2.8 M-parameter Llama trained here
# on the King James Bible (tools/train_tiny/train.py; see its README): English
# in the KJV's style, from a model small enough to commit. For a real checkpoint,
# use a Hugging Face folder (GPT-2, Llama, Mistral, Qwen2; config.json,
# *.safetensors, tokenizer.json):
#   build/minfer generate -m PATH/TO/MODEL -p "Once upon a time" -n 64
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# Set-up: installs the missing Debian packages (root or sudo) or names them and exits 2.
bash scripts/deps.sh

# nvcc is often installed off PATH; CMake's CUDA detection honours CUDACXX.
if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
gen=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
# Quiet on success; on failure CMake's (or the compiler's) own output.
mkdir -p "$build"
# shellcheck disable=SC2086  # MF_CMAKE_ARGS is a list of words on purpose
if ! cmake -S . -B "$build" "${gen[@]}" ${MF_CMAKE_ARGS:-} >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  echo "scripts/run.sh: configure failed (CMake's output above, also in $build/configure.log)" >&2
  exit 1
fi
grep -h '^-- minfer: ' "$build/configure.log" | sed 's/^-- //' || true # CUDA on, or CPU only: one line
echo "minfer: building in $build/ ..."
if ! cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1; then
  cat "$build/build.log" >&2
  echo "scripts/run.sh: build failed (output above, also in $build/build.log)" >&2
  exit 1
fi
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
echo "      (GPT-2, Llama, Mistral, Qwen2 checkpoints: config.json + model*.safetensors + tokenizer.json)"
