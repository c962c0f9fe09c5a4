#!/usr/bin/env bash
# The figures of the README's reliability section, measured now:
#   bad-input cases   the sum of the "bad-input cases: N" lines the CTest
#                     programs print (test_core: "bad inputs: N cases"): core,
#                     model_files, model, tokenizer, engine, faults, cli; and the
#                     allocation-failure points test_faults injects;
#   fuzzing           scripts/fuzz.sh SECONDS: executions per target, crashes in
#                     this run, and the crashes found before and fixed (each kept
#                     as a fuzz/corpus/<target>/regress_* reproducer, replayed by
#                     every run);
#   leaks             valgrind memcheck (--leak-check=full) of test_core and of a
#                     short `minfer generate` on the llama-tiny fixture: errors,
#                     definitely and indirectly lost bytes.
#
#   scripts/reliability-report.sh [FUZZ_SECONDS=60]     (0: no fuzzing)
#
# BUILD_DIR (default build-report) is configured CPU-only when it does not exist
# yet; the fuzz build is scripts/fuzz.sh's ($MF_FUZZ_BUILD). MF_REPORT_VALGRIND=0
# skips valgrind. Details go to stderr; the figures are the last block on stdout.
# Exit status 1 when a test failed, a fuzz target crashed or valgrind found
# something, so that a figure is never quoted from a broken run.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
secs=${1:-60}
build=${BUILD_DIR:-build-report}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
status=0
say() { echo "reliability-report: $*" >&2; }

# ---- build ----------------------------------------------------------------------------------
if [[ ! -f $build/CMakeCache.txt ]]; then
  gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DMF_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$log/cmake" 2>&1 ||
    { cat "$log/cmake" >&2; exit 1; }
fi
tests=(core model_files model tokenizer engine faults cli)
say "building $build"
cmake --build "$build" -j "$jobs" --target test_core test_model_files test_model test_tokenizer test_engine \
  test_faults minfer_cli >"$log/build" 2>&1 || { tail -n 30 "$log/build" >&2; exit 1; }

# ---- bad-input cases ------------------------------------------------------------------------------
bad_total=0 fault_points=0 bad_parts=""
for t in "${tests[@]}"; do
  say "ctest -R ^$t\$"
  if ! ctest --test-dir "$build" -R "^$t\$" -V >"$log/ctest_$t" 2>&1; then
    say "ctest $t FAILED (log follows)"
    tail -n 20 "$log/ctest_$t" >&2
    status=1
  fi
  # ctest -V prefixes each line of the program's output with "<test number>: ".
  n=$(sed -nE 's/^([0-9]+: )?bad-input cases: ([0-9]+)$/\2/p; s/^([0-9]+: )?bad inputs: ([0-9]+) cases.*/\2/p' \
        "$log/ctest_$t" | tail -n1)
  if [[ -z $n ]]; then
    say "$t printed no bad-input count"
    n=0
    status=1
  fi
  bad_total=$((bad_total + n))
  bad_parts+="${bad_parts:+, }$t $n"
  f=$(sed -nE 's/^([0-9]+: )?fault-injection points: ([0-9]+)$/\2/p' "$log/ctest_$t" | tail -n1)
  fault_points=$((fault_points + ${f:-0}))
done
cuda_faults=$(grep -q 'skipped: no CUDA device' "$log/ctest_faults" && echo "CPU only: no CUDA device" || echo "CPU and CUDA")

# ---- fuzzing ----------------------------------------------------------------------------------------
fuzz_lines=() fuzz_execs=0 fuzz_crash_now=0 regress_total=0
if [[ $secs -gt 0 ]]; then
  say "scripts/fuzz.sh $secs (every target)"
  scripts/fuzz.sh "$secs" >"$log/fuzz" 2>"$log/fuzz.err"
  rc=$?
  [[ $rc -ne 0 ]] && { say "fuzz.sh exit $rc"; cat "$log/fuzz.err" >&2; status=1; }
  while read -r name _time execs _rate _newc st; do
    [[ $name == fuzz_* ]] || continue
    tgt=${name#fuzz_}
    nreg=$(find "fuzz/corpus/$tgt" -maxdepth 1 -type f -name 'regress_*' 2>/dev/null | wc -l)
    regress_total=$((regress_total + nreg))
    [[ $execs =~ ^[0-9]+$ ]] && fuzz_execs=$((fuzz_execs + execs))
    crash=0
    [[ $st == ok ]] || { crash=1; fuzz_crash_now=$((fuzz_crash_now + 1)); }
    fuzz_lines+=("$(printf '  %-24s %12s executions in %ss, %s now; %d found before and fixed (regress_* seeds)' \
      "$name" "$execs" "$secs" "$([[ $crash == 0 ]] && echo "no crash" || echo "CRASH: $st")" "$nreg")")
  done <"$log/fuzz"
  [[ ${#fuzz_lines[@]} -gt 0 ]] || { say "no fuzz.sh table"; status=1; }
fi

# ---- leaks ----------------------------------------------------------------------------------------------
vg_lines=() vg_errors=0 vg_leaked=0
# vg NAME CMD...: memcheck; one summary line.
vg() {
  local name=$1 out="$log/vg_$1"
  shift
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE valgrind --tool=memcheck --leak-check=full \
    --errors-for-leak-kinds=definite,indirect --error-exitcode=99 "$@" >"$out.stdout" 2>"$out"
  local rc=$?
  local errs def ind
  errs=$(sed -nE 's/.*ERROR SUMMARY: ([0-9,]+) errors.*/\1/p' "$out" | tail -n1 | tr -d ,)
  def=$(sed -nE 's/.*definitely lost: ([0-9,]+) bytes.*/\1/p' "$out" | tail -n1 | tr -d ,)
  ind=$(sed -nE 's/.*indirectly lost: ([0-9,]+) bytes.*/\1/p' "$out" | tail -n1 | tr -d ,)
  errs=${errs:-?} def=${def:-0} ind=${ind:-0} # no leak summary: "All heap blocks were freed"
  if [[ $rc -ne 0 || $errs != 0 ]]; then
    say "valgrind $name: exit $rc"
    tail -n 40 "$out" >&2
    status=1
  fi
  [[ $errs =~ ^[0-9]+$ ]] && vg_errors=$((vg_errors + errs))
  vg_leaked=$((vg_leaked + def + ind))
  vg_lines+=("$(printf '  %-44s %s errors, definitely lost %s B, indirectly lost %s B' "$name" "$errs" "$def" "$ind")")
}
if [[ ${MF_REPORT_VALGRIND:-1} != 0 ]]; then
  if command -v valgrind >/dev/null 2>&1; then
    say "valgrind: test_core, minfer generate"
    vg "test_core" "$build/tests/test_core"
    vg "minfer generate -n 8 (llama-tiny, cpu)" "$build/minfer" generate -m tests/fixtures/models/llama-tiny \
      -p "Hello" -n 8 --seed 1 --backend cpu
  else
    say "valgrind not found: no leak figures"
    status=1
  fi
fi

# ---- the figures ---------------------------------------------------------------------------------------
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo "+local changes" || true)
echo
echo "minfer reliability figures: commit $commit$dirty, $(date -u +%Y-%m-%d), $(uname -m), build $build"
echo "bad-input cases tested: $bad_total ($bad_parts)"
echo "allocation failures injected: $fault_points points (test_faults, $cuda_faults); every one MF_ERR_OOM, the session usable after"
if [[ $secs -gt 0 ]]; then
  echo "fuzzing (scripts/fuzz.sh $secs: libFuzzer + ASan + UBSan, ${#fuzz_lines[@]} targets): $fuzz_execs executions," \
       "$fuzz_crash_now crashing now, $regress_total crashes found before and fixed"
  printf '%s\n' "${fuzz_lines[@]}"
fi
if [[ ${#vg_lines[@]} -gt 0 ]]; then
  echo "leaks (valgrind memcheck --leak-check=full): $vg_errors errors, $vg_leaked bytes definitely or indirectly lost"
  printf '%s\n' "${vg_lines[@]}"
fi
[[ $status -eq 0 ]] || echo "NOT CLEAN: see the messages above (stderr)"
exit $status
