#!/usr/bin/env bash
# Build minfer and run every test: CTest (C tests; CUDA cases run when a GPU
# is there, else they print "skipped: no CUDA device") and the Python binding's
# tests (pytest; torch CUDA tests run when torch sees a GPU).
#
#   scripts/test.sh                 # configure + build into build/, ctest, pytest
#   BUILD_DIR=build-x MF_CMAKE_ARGS="-DMF_CUDA=OFF" scripts/test.sh
#
# CUDA is compiled when nvcc is found (on PATH, or /usr/local/cuda/bin/nvcc);
# without it the build is CPU-only. What it needs (Debian packages, numpy,
# pytest, ml_dtypes, matplotlib) is installed first by scripts/deps.sh --python when
# missing (root, sudo, pip); without root or sudo it names them and exits 2.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

bash scripts/deps.sh --python

# nvcc is often installed off PATH; CMake's CUDA detection honours CUDACXX.
if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

gen=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then
  gen=(-G Ninja)
fi

# CMake's own output stays visible: a configure failure names the missing piece.
# shellcheck disable=SC2086  # MF_CMAKE_ARGS is a list of words on purpose
cmake -S . -B "$build" "${gen[@]}" ${MF_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"

# Both runners always run; the exit status says whether both passed.
echo "== ctest ($build)"
ctest_rc=0
(cd "$build" && ctest --output-on-failure -j "$jobs") || ctest_rc=$?

echo "== pytest tests/python (library: $build/libminfer.so)"
case $build in
  /*) export MINFER_LIB="$build/libminfer.so" ;;
  *) export MINFER_LIB="$root/$build/libminfer.so" ;;
esac
pytest_rc=0
python3 -m pytest tests/python -q -p no:cacheprovider || pytest_rc=$?
if [[ $pytest_rc -eq 5 ]]; then
  echo "scripts/test.sh: pytest collected no tests, which is a failure here" >&2
fi
if [[ $ctest_rc -ne 0 || $pytest_rc -ne 0 ]]; then
  echo "scripts/test.sh: FAILED (ctest exit $ctest_rc, pytest exit $pytest_rc)" >&2
  exit 1
fi
