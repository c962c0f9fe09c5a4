#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for SECONDS
# on its seed corpus, then prints executions per target.
#
#   bash scripts/fuzz.sh [SECONDS=60] [TARGET...]     (default: every fuzz/fuzz_*.c)
#
# Build dir: $MF_FUZZ_BUILD (default build-fuzz); new corpus entries, logs and
# crash reproducers go to $MF_FUZZ_OUT (default build-fuzz/fuzz-out), never into
# the seed corpus. MF_FUZZ_SEED fixes libFuzzer's seed (CI: 1, so that a CI
# failure replays elsewhere with the same seed and an empty MF_FUZZ_OUT: the
# same inputs in the same order, as far as the machine's speed takes them in
# the time); unset, each run explores anew. A crash's report and its
# reproducer in base64 go to stderr and to $MF_FUZZ_OUT/failures.txt.
# Exits non-zero when a target crashes, leaks or times out:
# copy the reproducer into fuzz/corpus/<name>/regress_<what> (the name that
# scripts/reliability-report.sh counts as found and fixed) and add a case to the tests.
# fuzz_server_request: the first byte picks the route (completions, chat, tokenize,
# detokenize), the rest is the body, through src/server/oai_request.c.
# fuzz_cli splits its input at NUL bytes into the argument vector of the CLI's
# option parsers: generate, score, info (tools/cli_args.c) and every bench of tools/bench.h.
# fuzz_tokenizer_encode loads tests/fixtures/tokenizers/{gpt2,llama2} from this
# checkout ($MF_FUZZ_TOKENIZERS overrides the folder). The seed corpora of the
# tokenizer targets are made by fuzz/make_tokenizer_seeds.py.
set -euo pipefail

secs=${1:-60}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MF_FUZZ_BUILD:-$root/build-fuzz}
out=${MF_FUZZ_OUT:-$build/fuzz-out}

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$root"/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi

mkdir -p "$out"
rm -f "$out/failures.txt"
# Every way this script fails leaves its story in failures.txt (CI prints it last).
fail_setup() {
  { echo "==== fuzz.sh: $1"; if [ -n "${2:-}" ]; then tail -n 40 "$2"; echo; fi; } | tee -a "$out/failures.txt" >&2
  exit 2
}
command -v clang >/dev/null || fail_setup "clang not found (apt-get install clang libclang-rt-dev)"
# fuzz_cli links libminfer: baseline CPU loops only (MF_CPU_NO_CLONES, as CI's ASan
# build), since clang 14 does not resolve a target_clones function called from another file.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DMF_FUZZ=ON -DMF_CUDA=OFF \
  -DMF_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS=-DMF_CPU_NO_CLONES >"$out/configure.log" 2>&1 ||
  fail_setup "configure failed ($out/configure.log)" "$out/configure.log"
cmake --build "$build" --target "${targets[@]}" -j2 >"$out/build.log" 2>&1 ||
  fail_setup "build failed ($out/build.log)" "$out/build.log"
echo "fuzz.sh: configured and built in ${SECONDS}s" >&2

failed=0
rows=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  seeds="$root/fuzz/corpus/$name"
  dir="$out/$t"
  rm -rf "$dir/crashes"
  mkdir -p "$dir/corpus" "$dir/crashes"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$dir/crashes/")
  [ -f "$root/fuzz/$name.dict" ] && args+=(-dict="$root/fuzz/$name.dict")
  [ -n "${MF_FUZZ_SEED:-}" ] && args+=(-seed="$MF_FUZZ_SEED")
  echo "fuzz.sh: $t for ${secs}s (log: $dir/log)" >&2
  rc=0
  "$build/fuzz/$t" "${args[@]}" "$dir/corpus" "$seeds" >"$dir/log" 2>&1 || rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$dir/log" | tail -1)
  rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$dir/log" | tail -1)
  ncorp=$(find "$dir/corpus" -type f | wc -l)
  status=ok
  if [ "$rc" -ne 0 ]; then
    crash=$(ls "$dir/crashes" | head -1)
    status="CRASH (rc $rc): ${crash:-no reproducer}"
    failed=1
    # What a CI log must show to reproduce it elsewhere: the report and the input's bytes.
    {
      echo "==== $t: rc $rc, log $dir/log"
      grep -m1 -n -E "ERROR: |runtime error|==ERROR|deadly signal|timeout after|out-of-memory" "$dir/log" |
        cut -d: -f1 | { read -r l && sed -n "$((l > 5 ? l - 5 : 1)),$((l + 40))p" "$dir/log"; } || tail -n 40 "$dir/log"
      if [ -n "$crash" ]; then
        echo "---- reproducer $crash ($(stat -c %s "$dir/crashes/$crash") bytes), base64:"
        head -c 4096 "$dir/crashes/$crash" | base64
      fi
    } | tee -a "$out/failures.txt" >&2
  fi
  rows+=("$(printf '%-20s %6ss %12s %10s %8s  %s' "$t" "$secs" "${execs:-?}" "${rate:-?}" "$ncorp" "$status")")
done

printf '%-20s %7s %12s %10s %8s  %s\n' target time executions exec/s new-corp status
for r in "${rows[@]}"; do echo "$r"; done
echo "fuzz.sh: ${SECONDS}s in all"
exit $failed
