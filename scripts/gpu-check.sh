#!/usr/bin/env bash
# shellcheck disable=SC2317  # stage functions are called indirectly (stage NAME LOG FN)
# One run on the (air-gapped) GPU host: dependencies, build for sm_90a, CTest,
# compute-sanitizer memcheck of the CUDA op tests, the Python tests with torch,
# benchmarks; logs under OUTDIR and a short table printed last.
#
#   bash scripts/gpu-check.sh OUTDIR
#
# Files in OUTDIR (6 or 7; the device tool brings back 8 at most per call,
# and the script says so in summary.txt if OUTDIR ever holds more):
#   summary.txt  the table below plus device/commit/date, CTest's FAIL lines,
#                the sanitizer summaries and which GEMM path the cases took
#   pytest.log   pytest -v tests/python (torch CUDA tests included)
#   logs.tar.gz  build.log (dependency setup, configure, build), ctest.log
#                (ctest --output-on-failure), gemm_paths.log (test_ops gemm
#                cases with MF_GEMM_LOG=1), memcheck.log (compute-sanitizer
#                memcheck, racecheck, initcheck on test_ops --backend cuda:
#                all three must be clean), bench.log
#   bench_*.csv  only if `minfer bench` exists (called as `minfer bench --csv
#                FILE`, and `minfer bench gemm-host --csv FILE`) and/or
#                bench/*_peers.py exist (`python3 bench/NAME_peers.py --out FILE`)
#
# Dependencies: the host lacks OpenBLAS/cJSON/PCRE2/libmicrohttpd (-dev) and maybe
# pkg-config. For each one the host's pkg-config cannot find, the .debs that
# scripts/gpu-prepare.sh downloaded (take .debs/ along; with the device tool:
# carry [".debs"]) are unpacked with `dpkg -x` into .gpu-prefix/ (never /),
# the .pc files and absolute symlinks are redirected into the prefix, and
# PKG_CONFIG_PATH, CMAKE_PREFIX_PATH, LD_LIBRARY_PATH, LIBRARY_PATH and
# C_INCLUDE_PATH point there. `source .gpu-prefix/env.sh` repeats that by hand.
#
# Environment knobs:
#   BUILD_DIR=build            build folder
#   MF_CUDA_ARCHS=90a          CMAKE_CUDA_ARCHITECTURES
#   MF_CMAKE_ARGS="..."        extra configure arguments
#   MF_GPU_FORCE_PREFIX=1      unpack every package even if the host has it
#   MF_GPU_ISOLATE_PKGCONFIG=1 pkg-config sees only the prefix (PKG_CONFIG_LIBDIR):
#                              with FORCE, proves the prefix alone is enough
#   MF_GPU_STAGES="deps configure build ctest memcheck pytest bench"
#                              the stages to run (the rest show as SKIP): split a
#                              long check over two calls; a later call without
#                              deps/build reuses .gpu-prefix/env.sh and the build
#   MF_GPU_MEMCHECK_FILTER=S   only test_ops cases matching S under memcheck
#   MF_GPU_TIMEOUT=300         seconds per memcheck / per benchmark / per CTest test
#   MF_GPU_BUDGET_S=560        seconds for the whole run (the device tool stops a
#                              command at 600): every later command gets what is
#                              left, and one with under 15 s left is skipped (noted),
#                              so the summary always comes back
# Every stage runs (later ones are skipped only when the build is missing);
# the exit status is 1 if any stage failed.
set -uo pipefail

if [[ $# -ne 1 || $1 == -h || $1 == --help ]]; then
  sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
build=${BUILD_DIR:-build}
[[ $build = /* ]] || build="$root/$build"
prefix="$root/.gpu-prefix"
jobs=$(nproc 2>/dev/null || echo 4)
# Logs other than pytest.log are written here and packed into
# $out/logs.tar.gz at the end (the device tool brings back 8 files at most).
logs=$(mktemp -d "${TMPDIR:-/tmp}/minfer-gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$logs"' EXIT
: >"$logs/build.log"

names=() states=() times=() notes=()
failed=0
have_build=0 have_cuda=0

# stage NAME LOGFILE FUNCTION: run FUNCTION in this shell (its exports persist),
# output appended to LOGFILE; it sets $note and returns 0 (PASS), 1 (FAIL) or 2 (SKIP).
stages=" ${MF_GPU_STAGES:-deps configure build ctest memcheck pytest bench} "
tmo=${MF_GPU_TIMEOUT:-300}
budget=${MF_GPU_BUDGET_S:-560}
t_start=$(date +%s)
# limit CAP: seconds the next command may take, min(CAP, the budget left - 20 s for the summary).
limit() {
  local l=$(( budget - ($(date +%s) - t_start) - 20 ))
  ((l > $1)) && l=$1
  ((l < 1)) && l=1 # never 0: `timeout 0` would mean no limit
  echo "$l"
}
stage() {
  local name=$1 log=$2 fn=$3 t rc state
  note=""
  echo "== $name ($(date +%H:%M:%S))"
  t=$(date +%s)
  { echo "===== $name: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >>"$log"
  if [[ $stages == *" $name "* ]]; then
    "$fn" >>"$log" 2>&1 </dev/null
    rc=$?
  else
    note="not in MF_GPU_STAGES"
    rc=2
  fi
  case $rc in
    0) state=PASS ;;
    2) state=SKIP ;;
    *) state=FAIL; failed=1 ;;
  esac
  names+=("$name") states+=("$state") times+=("$(( $(date +%s) - t ))s") notes+=("$note")
  echo "   $state${note:+  ($note)}"
}

# ---- env: what ran where -----------------------------------------------------------------
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ $commit != unknown ]] && [[ -n $(git -C "$root" status --porcelain 2>/dev/null | head -n1) ]]; then
  commit="$commit+dirty"
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1)
nvcc_bin=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; })
nvcc_ver=$([[ -n $nvcc_bin ]] && "$nvcc_bin" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
torch_ver=$(python3 -c "import torch; print(torch.__version__, 'cuda', torch.version.cuda, 'gpu' if torch.cuda.is_available() else 'no-gpu')" 2>/dev/null)
header=$(cat <<EOF
minfer gpu-check  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $commit  host $(hostname)
device: ${gpu:-no nvidia-smi / no GPU}
nvcc: ${nvcc_ver:-none} ${nvcc_bin:-}   cmake: $(cmake --version 2>/dev/null | head -n1 | awk '{print $3}')   python: $(python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)   torch: ${torch_ver:-not importable}
EOF
)
echo "$header"
echo "$header" >>"$logs/build.log"

# ---- deps ---------------------------------------------------------------------------------------
host_pc() { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "$1" 2>/dev/null; }
cmake_extra=()

stage_deps() {
  echo "ldconfig -p | grep -E 'openblas|cjson|pcre2|gfortran':"
  ldconfig -p 2>/dev/null | grep -E 'openblas|cjson|pcre2|gfortran' || echo "  (none)"
  local force=${MF_GPU_FORCE_PREFIX:-0} want=() groups=()
  if [[ $force == 1 ]] || ! command -v pkg-config >/dev/null 2>&1; then
    groups+=(pkg-config); want+=(pkgconf pkgconf-bin libpkgconf3)
  fi
  if [[ $force == 1 ]] || ! host_pc openblas; then
    groups+=(openblas); want+=(libopenblas0-pthread libopenblas-pthread-dev)
    if [[ $force == 1 ]] || ! ldconfig -p 2>/dev/null | grep -q 'libgfortran\.so\.5'; then
      want+=(libgfortran5 libquadmath0)
    fi
  fi
  if [[ $force == 1 ]] || ! host_pc libcjson; then
    groups+=(cjson); want+=(libcjson1 libcjson-dev)
  fi
  if [[ $force == 1 ]] || ! host_pc libpcre2-8; then
    groups+=(pcre2); want+=(libpcre2-8-0 libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3)
  fi
  if [[ $force == 1 ]] || ! { host_pc libmicrohttpd || [[ -f /usr/include/microhttpd.h ]]; }; then
    groups+=(microhttpd); want+=(libmicrohttpd12 libmicrohttpd-dev)
  fi
  if [[ $force == 1 ]] || ! command -v ninja >/dev/null 2>&1; then
    groups+=(ninja); want+=(ninja-build)
  fi
  if ((${#groups[@]} == 0)); then
    note="host has OpenBLAS, cJSON, PCRE2, libmicrohttpd, pkg-config, ninja"
    return 0
  fi
  echo "to unpack into $prefix: ${groups[*]}"
  local arch debs=() p f
  arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
  for p in "${want[@]}"; do
    f=$(ls "$root/.debs/${p}_"*.deb 2>/dev/null | head -n1)
    if [[ -z $f ]]; then
      echo "missing .debs/${p}_*.deb: run scripts/gpu-prepare.sh on a networked Debian machine and bring .debs/"
      note="no .deb for $p (run scripts/gpu-prepare.sh, carry .debs)"
      return 1
    fi
    if [[ $(dpkg-deb -f "$f" Architecture) != "$arch" && $(dpkg-deb -f "$f" Architecture) != all ]]; then
      note="$(basename "$f") is not for $arch"
      return 1
    fi
    debs+=("$f")
  done
  rm -rf "$prefix" && mkdir -p "$prefix" || return 1
  for f in "${debs[@]}"; do
    echo "dpkg -x $(basename "$f")"
    dpkg -x "$f" "$prefix" || { note="dpkg -x $(basename "$f") failed"; return 1; }
  done
  # .pc files say /usr (prefix=/usr, libdir=/usr/lib/...): redirect into the prefix
  find "$prefix" -name '*.pc' -type f -print0 |
    xargs -0 -r sed -i -E "s#(^|[=[:space:]]|-I|-L)/usr(/|\$|[[:space:]])#\1$prefix/usr\2#g"
  # absolute symlinks would point into the host's /
  local l t
  while IFS= read -r -d '' l; do
    t=$(readlink "$l")
    if [[ $t == /* ]]; then ln -sfn "$prefix$t" "$l"; echo "relinked $l -> $prefix$t"; fi
  done < <(find "$prefix" -type l -print0)
  # the multiarch triplet dir (usr/lib/x86_64-linux-gnu)
  local ml
  ml=$(find "$prefix/usr/lib" -maxdepth 1 -type d -name '*-linux-gnu*' | head -n1)
  [[ -n $ml ]] || ml="$prefix/usr/lib"
  # what update-alternatives would have linked for OpenBLAS (dpkg -x runs no scripts)
  if [[ -d $ml/openblas-pthread ]]; then
    mkdir -p "$ml/pkgconfig"
    ln -sfn openblas-pthread/libopenblas.so.0 "$ml/libopenblas.so.0"
    ln -sfn openblas-pthread/libopenblas.so "$ml/libopenblas.so"
    ln -sfn ../openblas-pthread/pkgconfig/openblas.pc "$ml/pkgconfig/openblas.pc"
  fi
  local pcp="$ml/pkgconfig:$ml/openblas-pthread/pkgconfig:$prefix/usr/share/pkgconfig"
  {
    echo "# source this to build against the unpacked packages (written by scripts/gpu-check.sh)"
    if [[ ${MF_GPU_ISOLATE_PKGCONFIG:-0} == 1 ]]; then
      echo "export PKG_CONFIG_LIBDIR=\"$pcp\""
      echo "unset PKG_CONFIG_PATH"
    else
      echo "export PKG_CONFIG_PATH=\"$pcp\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}\""
    fi
    echo "export CMAKE_PREFIX_PATH=\"$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}\""
    echo "export LD_LIBRARY_PATH=\"$ml:$ml/openblas-pthread\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
    echo "export LIBRARY_PATH=\"$ml:$ml/openblas-pthread\${LIBRARY_PATH:+:\$LIBRARY_PATH}\""
    echo "export C_INCLUDE_PATH=\"$prefix/usr/include\${C_INCLUDE_PATH:+:\$C_INCLUDE_PATH}\""
    echo "export PATH=\"\$PATH:$prefix/usr/bin\""  # host tools first; ours fill gaps
  } >"$prefix/env.sh"
  cat "$prefix/env.sh"
  # shellcheck disable=SC1091
  source "$prefix/env.sh"
  local pc=pkg-config
  if [[ " ${groups[*]} " == *" pkg-config "* ]]; then  # the host has none (or FORCE): ours
    pc="$prefix/usr/bin/pkg-config"
    cmake_extra+=(-DPKG_CONFIG_EXECUTABLE="$pc")
  fi
  local m bad=0
  for m in openblas libcjson libpcre2-8; do
    if "$pc" --exists "$m"; then
      echo "$pc: $m $("$pc" --modversion "$m"): $("$pc" --cflags --libs "$m")"
    else
      echo "$pc cannot find $m"; bad=1
    fi
  done
  note="prefix: ${groups[*]}"
  return $bad
}
stage deps "$logs/build.log" stage_deps
if [[ $stages != *" deps "* && -f $prefix/env.sh ]]; then
  # shellcheck disable=SC1091
  source "$prefix/env.sh"
  [[ -x $prefix/usr/bin/pkg-config ]] && ! command -v pkg-config >/dev/null 2>&1 &&
    cmake_extra+=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkg-config")
  echo "   (using $prefix/env.sh from an earlier run)"
fi

# ---- configure + build ---------------------------------------------------------------------
stage_configure() {
  if [[ -z $(command -v nvcc) && -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  local gen=()
  [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_CUDA_ARCHITECTURES="${MF_CUDA_ARCHS:-90a}" \
    "${cmake_extra[@]}" ${MF_CMAKE_ARGS:-} || return 1
  grep -E '^(OPENBLAS|CJSON|PCRE2)_LINK_LIBRARIES:' "$build/CMakeCache.txt"
  note=$(grep -h -o -E 'minfer: (CUDA backend ON \([^)]*\)|no nvcc.*)' "$logs/build.log" | tail -n1)
}
stage configure "$logs/build.log" stage_configure

probe_build() {  # sets have_build/have_cuda from the built CLI
  local info
  info=$("$build/minfer" info 2>&1) || { echo "$info"; return 1; }
  echo "$info"
  have_build=1
  grep '^build:' <<<"$info" | grep -q cuda && have_cuda=1
  note=$(grep '^backend:' <<<"$info")
  return 0
}
stage_build() {
  cmake --build "$build" -j "$jobs" || return 1
  probe_build
}
stage build "$logs/build.log" stage_build
if [[ $stages != *" build "* && -x $build/minfer ]]; then
  probe_build >>"$logs/build.log" 2>&1 && echo "   (using the existing build in $build: $note)"
fi

# ---- tests ------------------------------------------------------------------------------------------
stage_ctest() {
  ((have_build)) || { note="no build"; return 2; }
  local t
  t=$(limit 100000)
  ((t < 15)) && { note="out of time (MF_GPU_BUDGET_S=$budget)"; return 2; }
  (cd "$build" && timeout "$t" ctest --output-on-failure -j "$jobs" --timeout "$tmo")
  local rc=$?
  note=$(grep -E 'tests passed|tests failed' "$logs/ctest.log" | tail -n1)
  ((rc == 124)) && note="stopped at the budget after ${t}s (MF_GPU_BUDGET_S=$budget)"
  if ((have_cuda)); then
    # Which GEMM path (fused epilogue, f32-scratch, in-place, plain) each case
    # took: test_ops prints one ".. path" line per epilogue case on CUDA, and
    # MF_GEMM_LOG=1 one line per cuBLASLt plan built.
    local test_ops
    test_ops=$(find "$build" -name test_ops -type f -perm -u+x | head -n1)
    t=$(limit "$tmo")
    if [[ -n $test_ops ]] && ((t >= 15)); then
      MF_GEMM_LOG=1 timeout "$t" "$test_ops" --backend cuda --filter 'gemm(' >"$logs/gemm_paths.log" 2>&1
      note+="; gemm paths: $(grep -o 'path [a-z0-9-]*$' "$logs/gemm_paths.log" | sort | uniq -c |
                             awk '{printf "%s %s, ", $3, $1}' | sed 's/, $//')"
    fi
  fi
  return $(( rc ? 1 : 0 ))
}
: >"$logs/ctest.log"
stage ctest "$logs/ctest.log" stage_ctest

stage_memcheck() {
  ((have_build)) || { note="no build"; return 2; }
  ((have_cuda)) || { note="CPU-only build"; return 2; }
  local cs test_ops
  cs=$(command -v compute-sanitizer || { [[ -x /usr/local/cuda/bin/compute-sanitizer ]] &&
                                         echo /usr/local/cuda/bin/compute-sanitizer; })
  [[ -n $cs ]] || { note="compute-sanitizer not found"; return 1; }
  test_ops=$(find "$build" -name test_ops -type f -perm -u+x | head -n1)
  [[ -n $test_ops ]] || { note="test_ops not built"; return 1; }
  local filt=()
  [[ -n ${MF_GPU_MEMCHECK_FILTER:-} ]] && filt=(--filter "$MF_GPU_MEMCHECK_FILTER")
  # One compute-sanitizer run over test_ops --backend cuda: LABEL TOOL [test_ops args...].
  local rc=0
  sanitize() {
    local label=$1 tool=$2 r summary extra=() t
    shift 2
    t=$(limit "$tmo")
    if ((t < 15)); then
      note+="$label$tool: skipped (out of time); "
      rc=1
      return
    fi
    echo "----- ${label}compute-sanitizer --tool $tool"
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    timeout "$t" "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 86 "$test_ops" --backend cuda "$@"
    r=$?
    summary=$(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$logs/memcheck.log" | tail -n1 | sed 's/^=* *//')
    ((r == 124)) && summary="timed out after ${t}s"
    note+="$label$tool: ${summary:-rc $r}; "
    ((r)) && rc=1
  }
  local tool
  # First the wgmma kernels only an environment variable selects (sm_90a; the
  # newest code, small case lists): the MoE expert GEMMs (TMA) and the prefill
  # attention (cp.async + mbarriers: racecheck too).
  if [[ -z ${MF_GPU_MEMCHECK_FILTER:-} ]]; then
    for tool in memcheck racecheck initcheck; do
      MINFER_ATTN=wgmma sanitize "attn-wgmma " "$tool" --filter 'attention('
    done
    for tool in memcheck initcheck; do
      MINFER_MOE_GEMM=wgmma sanitize "moe-wgmma " "$tool" --filter 'moe('
    done
  fi
  # Then memcheck over the op tests, racecheck (shared-memory hazards) and
  # initcheck (reads of uninitialised device memory) over the same cases.
  for tool in memcheck racecheck initcheck; do sanitize "" "$tool" "${filt[@]}"; done
  local passed
  passed=$(grep -E '[0-9]+ passed' "$logs/memcheck.log" | tail -n1)
  note+="$passed"
  return $rc
}
: >"$logs/memcheck.log"
stage memcheck "$logs/memcheck.log" stage_memcheck

stage_pytest() {
  ((have_build)) || { note="no build"; return 2; }
  export MINFER_LIB="$build/libminfer.so"
  local t
  t=$(limit 100000)
  ((t < 15)) && { note="out of time (MF_GPU_BUDGET_S=$budget)"; return 2; }
  timeout "$t" python3 -m pytest "$root/tests/python" -v -rs -p no:cacheprovider
  local rc=$?
  note=$(tail -n1 "$out/pytest.log" | sed 's/^=* *//; s/ *=*$//')
  ((rc)) && return 1
  if ((have_cuda)) && ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    note="torch with CUDA not importable: CUDA tests did not run; $note"
    return 1
  fi
  return 0
}
: >"$out/pytest.log"
stage pytest "$out/pytest.log" stage_pytest

# ---- benchmarks (optional hooks) --------------------------------------------------------------------
stage_bench() {
  ((have_build)) || { note="no build"; return 2; }
  local ran=0 bad=0 f name
  (( $(limit "$tmo") < 15 )) && { note="out of time (MF_GPU_BUDGET_S=$budget)"; return 2; }
  if "$build/minfer" --help 2>&1 | grep -qw bench; then
    ran=1
    echo "--- minfer bench --csv $out/bench_minfer.csv"
    timeout "$(limit "$tmo")" "$build/minfer" bench --csv "$out/bench_minfer.csv" || bad=1
    if "$build/minfer" bench gemm-host --help >/dev/null 2>&1; then
      echo "--- minfer bench gemm-host --csv $out/bench_gemm_host.csv"
      timeout "$(limit "$tmo")" "$build/minfer" bench gemm-host --csv "$out/bench_gemm_host.csv" || bad=1
    fi
  fi
  for f in "$root"/bench/*_peers.py; do
    [[ -f $f ]] || continue
    ran=1
    name=$(basename "$f" .py)
    echo "--- python3 bench/$name.py --out $out/bench_$name.csv"
    (( $(limit "$tmo") < 15 )) && { echo "--- out of time: $name and later peers skipped"; bad=1; break; }
    MINFER_LIB="$build/libminfer.so" timeout "$(limit "$tmo")" python3 "$f" --out "$out/bench_$name.csv" || bad=1
  done
  ((ran)) || { note="no minfer bench, no bench/*_peers.py"; return 2; }
  note="$(cd "$out" && ls bench_*.csv 2>/dev/null | tr '\n' ' ')"
  return $bad
}
stage bench "$logs/bench.log" stage_bench
[[ -s $logs/bench.log ]] || rm -f "$logs/bench.log"

# ---- summary (last) ------------------------------------------------------------------------------------
{
  echo "$header"
  echo
  printf '%-10s %-5s %6s  %s\n' stage state time notes
  for i in "${!names[@]}"; do
    printf '%-10s %-5s %6s  %s\n' "${names[$i]}" "${states[$i]}" "${times[$i]}" "${notes[$i]}"
  done
  if grep -q '^FAIL ' "$logs/ctest.log" 2>/dev/null; then
    echo
    echo "failing cases (ctest.log, first 40):"
    grep -h '^FAIL ' "$logs/ctest.log" | head -n 40 | cut -c1-400
  fi
  if grep -q -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/memcheck.log" 2>/dev/null; then
    echo
    echo "compute-sanitizer:"
    grep -h -E '^----- compute-sanitizer|ERROR SUMMARY|RACECHECK SUMMARY' "$logs/memcheck.log" | sed 's/^=* */  /'
  fi
  echo
  echo "logs: $out (logs.tar.gz: $(cd "$logs" && ls | tr '\n' ' '))   result: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL)"
} >"$out/summary.txt"
tar -czf "$out/logs.tar.gz" -C "$logs" . || echo "tar of the logs failed" >>"$out/summary.txt"
nfiles=$(find "$out" -type f | wc -l)
if ((nfiles > 8)); then
  echo "WARNING: $out holds $nfiles files; the device tool brings back 8: $(cd "$out" && find . -type f | tr '\n' ' ')" \
    >>"$out/summary.txt"
fi
echo
cat "$out/summary.txt"
exit $failed
