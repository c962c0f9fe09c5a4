#!/usr/bin/env bash
# CLI options through the real binary: each bad option must exit 2 with one
# stderr line "minfer: error: <command>: ..." that names the flag (and the
# value where there is one), and print nothing on stdout; --help exits 0; a
# short generate on a fixture model works. The parsers themselves are fuzzed
# by fuzz/fuzz_cli.c.
#
#   tests/test_cli.sh <minfer binary> <tests/fixtures>
set -uo pipefail

bin=${1:?usage: test_cli.sh <minfer binary> <fixtures dir>}
fix=${2:?usage: test_cli.sh <minfer binary> <fixtures dir>}
model=$fix/models/llama-tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0 nbad=0

# bad NEEDLE ARGS...: exit 2, stdout empty, exactly one stderr line with the prefix and NEEDLE.
bad() {
  local needle=$1
  shift
  nbad=$((nbad + 1))
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines why="" shown=${*//$'\n'/\\n}
  lines=$(wc -l <"$tmp/err")
  if [[ $rc -ne 2 ]]; then why="exit $rc (want 2)"
  elif [[ -s $tmp/out ]]; then why="wrote to stdout"
  elif [[ $lines -ne 1 ]]; then why="$lines stderr lines (want 1)"
  elif ! grep -q '^minfer: error: ' "$tmp/err"; then why="no 'minfer: error: ' prefix"
  elif ! grep -qF -- "$needle" "$tmp/err"; then why="message does not name '$needle'"
  fi
  if [[ -n $why ]]; then
    fail=$((fail + 1))
    echo "FAIL minfer $shown: $why: $(head -c 300 "$tmp/err")"
  else
    pass=$((pass + 1))
    echo "ok   minfer $shown: $(cat "$tmp/err")"
  fi
}

# good WHAT ARGS...: exit 0.
good() {
  local what=$1
  shift
  if "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then
    pass=$((pass + 1))
    echo "ok   $what"
  else
    fail=$((fail + 1))
    echo "FAIL $what: exit $?: $(tail -n 3 "$tmp/err")"
  fi
}

m=(-m "$model")
# ---- generate
bad "-n 99999999999999999999: not an integer in" generate "${m[@]}" -p Hi -n 99999999999999999999
bad "-n -1: not an integer" generate "${m[@]}" -p Hi -n -1
bad "-n 12abc" generate "${m[@]}" -p Hi -n 12abc
bad "-n needs a value" generate "${m[@]}" -p Hi -n
bad "--temp nan: not a finite number" generate "${m[@]}" -p Hi --temp nan
bad "--temp 1e999" generate "${m[@]}" -p Hi --temp 1e999
bad "--temp 1e39: beyond the float range" generate "${m[@]}" -p Hi --temp 1e39
bad "--temp -0.5: not >= 0" generate "${m[@]}" -p Hi --temp -0.5
bad "--top-p 1.5: not in [0, 1]" generate "${m[@]}" -p Hi --top-p 1.5
bad "--min-p x" generate "${m[@]}" -p Hi --min-p x
bad "--top-k 2147483648" generate "${m[@]}" -p Hi --top-k 2147483648
bad "--repeat-penalty -1" generate "${m[@]}" -p Hi --repeat-penalty -1
bad "--seed -1: not an integer in [0, 2^64)" generate "${m[@]}" -p Hi --seed -1
bad "--seed 18446744073709551616" generate "${m[@]}" -p Hi --seed 18446744073709551616
bad "--stop wants a non-empty string" generate "${m[@]}" -p Hi --stop ""
bad "more than 16 stop strings" generate "${m[@]}" -p Hi $(for i in $(seq 17); do echo --stop s$i; done)
bad "--backend gpu: not auto, cpu or cuda" generate "${m[@]}" -p Hi --backend gpu
bad "--dtype f8" generate "${m[@]}" -p Hi --dtype f8
bad "unknown option --frobnicate" generate "${m[@]}" -p Hi --frobnicate
bad "-p given twice" generate "${m[@]}" -p Hi -p again
bad "give the prompt with -p" generate "${m[@]}"
bad "give the model with -m" generate -p Hi
bad "unknown option ?x?" generate "${m[@]}" -p Hi $'\nx\n'
# ---- score
bad "--tokens: item 1 'x'" score "${m[@]}" --tokens 1,x,3
bad "--tokens: item 1 ''" score "${m[@]}" --tokens 1,,3
bad "--tokens: item 0 '-5'" score "${m[@]}" --tokens -5
bad "--tokens: item 0 '99999999999'" score "${m[@]}" --tokens 99999999999
bad "--tokens: item 2 ''" score "${m[@]}" --tokens 1,2,
bad "exactly one of -p TEXT and --tokens" score "${m[@]}" -p Hi --tokens 1
bad "exactly one of -p TEXT and --tokens" score "${m[@]}"
bad "--logits-out needs a value" score "${m[@]}" -p Hi --logits-out
bad "--seed 1x" score --synthetic tiny -p Hi --seed 1x
bad "unknown option --batch" score "${m[@]}" -p Hi --batch 2
# ---- info
bad "--batch 0: not an integer in [1, 2147483647]" info "${m[@]}" --batch 0
bad "--batch 2147483648" info "${m[@]}" --batch 2147483648
bad "--seq 12k" info "${m[@]}" --seq 12k
bad "--dtype int8" info "${m[@]}" --dtype int8
bad "--backend tpu" info "${m[@]}" --backend tpu
bad "give the model with -m DIR or --synthetic" info --batch 2
# ---- bench model
bad "--gen 0: not an integer in [1, 4096]" bench model --gen 0
bad "--gen 5000" bench model --gen 5000
bad "--iters -3" bench model --iters -3
bad "--batch 1,0" bench model --batch 1,0
bad "--seq 128,,512" bench model --seq 128,,512
bad "--batch 1,: ends with a comma" bench model --batch 1,
bad "--seq 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17" bench model --seq 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
bad "--format xml" bench model --format xml
bad "unknown option --full" bench model --full
# ---- bench softmax
bad "--iters abc: not an integer in [1, 1000000]" bench softmax --iters abc
bad "--iters 0" bench softmax --iters 0
bad "--warmup -1" bench softmax --warmup -1
bad "--scale inf: not a finite number" bench softmax --scale inf
bad "--max-mb -5: not >= 0" bench softmax --max-mb -5
bad "--variant both2" bench softmax --variant both2
bad "--cases none" bench softmax --cases none
bad "--mask upper" bench softmax --mask upper
bad "--format yaml" bench softmax --format yaml
bad "--csv needs a value" bench softmax --csv
bad "unknown option --bogus" bench softmax --bogus 1
bad "--seq 128,0: want up to 16 comma-separated integers in [1, 2147483647]" bench softmax --seq 128,0
bad "--full with --batch: the whole grid or the listed shapes" bench softmax --batch 1,4 --full
bad "--cases sweep with --batch/--heads/--seq" bench softmax --heads 12 --cases sweep
bad "unknown option --no-gemm-ceiling (see minfer bench softmax --help)" bench softmax --no-gemm-ceiling
# ---- bench moe
bad "unknown option --bogus (see minfer bench moe --help)" bench moe --bogus 1
bad "--iters 0: not an integer in [1, 1000000]" bench moe --iters 0
bad "--mode needs a value" bench moe --mode
bad "--mode both: not prefill, decode or all" bench moe --mode both
bad "--routing skew: not even, zipf or both" bench moe --routing skew
bad "--dtype f64: not bf16, f16 or f32" bench moe --dtype f64
bad "--hidden 100: not a multiple of 8" bench moe --hidden 4096,100
bad "--experts 300: want up to 16 comma-separated integers in [1, 256]" bench moe --experts 300
bad "--top-k 2,: ends with a comma" bench moe --top-k 2,
bad "--full with --experts" bench moe --experts 8 --full
# ---- bench attention
bad "--iters 0: not an integer in [1, 1000000]" bench attention --iters 0
bad "--dtype f8" bench attention --dtype f8
bad "--cases both" bench attention --cases both
bad "--num-splits 999" bench attention --num-splits 999
bad "--format yaml" bench attention --format yaml
bad "--max-mb -1: not >= 0" bench attention --max-mb -1
bad "--csv needs a value" bench attention --csv
bad "unknown option --bogus" bench attention --bogus 1
bad "--mask upper: not causal, none or both" bench attention --mask upper
bad "--kv-heads 0: want up to 16 comma-separated integers in [1, 65535]" bench attention --kv-heads 0
bad "--head-dim 64,x" bench attention --head-dim 64,x
bad "--full with --seq" bench attention --seq 512 --full
bad "--iters x" bench --iters x
bad "unknown benchmark 'gemm9'" bench gemm9
bad "--m 9: not an integer in [1, 8]" bench gemv --m 9
bad "--format xml: not table, csv or json" bench gemv --format xml
bad "--iters needs a value" bench gemv --iters
bad "unknown option --bogus (see minfer bench gemv --help)" bench gemv --bogus 1
bad "unknown option --dtype (see minfer bench gemv --help)" bench gemv --dtype f32
bad "unknown option --full" bench gemv --full
bad "--shapes llama: not tiny, tinyllama or smollm2" bench gemv --shapes llama
bad "--k 1025: want up to 16 comma-separated integers in [1, 1024]" bench topk --k 1025
bad "--vocab 1,,2" bench topk --vocab 1,,2
bad "--batch 8,: ends with a comma" bench topk --batch 8,
bad "--vocab 0: want up to 16 comma-separated integers in [1, 2147483647]" bench topk --vocab 0
bad "unknown option --max-mb (see minfer bench topk --help)" bench topk --max-mb 100
bad "--dtype f32,f64: want distinct f32, bf16 or f16" bench topk --dtype f32,f64
bad "--scale 0: not a finite number > 0" bench topk --scale 0
bad "--format xml: not table, csv or json" bench topk --format xml
bad "--iters needs a value" bench topk --iters
bad "unknown option --bogus (see minfer bench topk --help)" bench topk --bogus 1
bad "--m 0: not an integer in [1, 4096]" bench gemm-host --m 0
bad "--reps 5x: not an integer in [1, 100000]" bench gemm-host --reps 5x
bad "--backend tpu: not auto, cpu or cuda" bench gemm-host --backend tpu
bad "unknown option --bogus (see minfer bench gemm-host --help)" bench gemm-host --bogus
bad "unknown option --iters (see minfer bench gemm-host --help)" bench gemm-host --iters 3
# ---- the top level
bad "unknown command 'frob'" frob

good "minfer --help" --help
good "minfer generate --help" generate --help
good "minfer score --help" score --help
good "minfer info --help" info --help
good "minfer bench --help" bench --help
# every bench that minfer --help lists (from the one table, tools/bench.h) has a help of its own
benches=$("$bin" --help | awk '$1 == "bench" && $2 != "[NAME]" {print $2}')
[[ $(wc -w <<<"$benches") -eq 8 ]] || { fail=$((fail + 1)); echo "FAIL minfer --help lists $(wc -w <<<"$benches") benches (want 8)"; }
for b in $benches; do good "minfer bench $b --help" bench "$b" --help; done
good "minfer bench attention (cpu, decode, 1 iteration, csv)" bench attention --backend cpu --cases decode --warmup 0 --iters 1 --format csv
good "minfer generate (llama-tiny, 4 tokens, greedy, cpu)" generate "${m[@]}" -p Hello -n 4 --temp 0 --seed 1 --backend cpu
good "minfer score --tokens (llama-tiny, cpu)" score "${m[@]}" --tokens 1,5,7 --backend cpu
good "minfer info -m (llama-tiny, cpu)" info "${m[@]}" --batch 2 --seq 64 --backend cpu

# says WHAT NEEDLE ARGS...: exit 0 and NEEDLE on stdout.
says() {
  local what=$1 needle=$2
  shift 2
  if "$bin" "$@" >"$tmp/out" 2>"$tmp/err" && grep -qF -- "$needle" "$tmp/out"; then
    pass=$((pass + 1))
    echo "ok   $what: $(grep -F -- "$needle" "$tmp/out" | head -n 1)"
  else
    fail=$((fail + 1))
    echo "FAIL $what: no '$needle' on stdout: $(head -c 300 "$tmp/out") $(tail -n 2 "$tmp/err")"
  fi
}
q=(-m "$fix/models/qwen2-tiny" --backend cpu)
says "info: family (qwen2-tiny)" "family:       qwen2, Qwen2ForCausalLM" info "${q[@]}"
says "info: chat template (qwen2-tiny)" "a chat template is present" info "${q[@]}"
says "info: no chat template (llama-tiny)" "no chat template" info "${m[@]}" --backend cpu
says "info: backends (llama-tiny)" "cpu:  every op" info "${m[@]}" --backend cpu
# --dtype on the CPU: the weights' storage (auto keeps a bf16 checkpoint's; f32 stays f32)
b16=(-m "$fix/models/llama-tiny-bf16" --backend cpu)
says "info: --dtype auto (bf16 checkpoint)" "weights bf16, activations and KV cache f32" info "${b16[@]}"
says "info: --dtype f32 (bf16 checkpoint)" "weights f32, activations and KV cache f32" info "${b16[@]}" --dtype f32
says "info: --dtype auto (f32 checkpoint)" "weights f32" info "${m[@]}" --backend cpu --dtype auto
says "info: --dtype bf16 (f32 checkpoint)" "weights bf16" info "${m[@]}" --backend cpu --dtype bf16
says "info: family (mistral-window-tiny)" "family:       llama, MistralForCausalLM" info -m "$fix/models/mistral-window-tiny" --backend cpu

says "bench --help lists gemm-host" "bench gemm-host" bench --help
says "bench gemm-host (cpu, 1 burst)" "| cpu     | lm_head  |" bench gemm-host --backend cpu --reps 1
says "bench gemv (cpu, tiny shapes, csv)" ",tiny,a,2,64,128,0.02,cpu," bench gemv --backend cpu --m 2 --warmup 0 --iters 1 --format csv
# bench topk: the CSV header, then a row: vocab 1000, batch 2, k 5, f32; bytes to the host
# 2 (8 5 + 8) = 0.1 KB vs 2 1000 4 = 8.0 KB of logits (83.3x); the host check passed (ok)
tk=(bench topk --backend cpu --vocab 1000 --batch 2 --k 5 --warmup 0 --iters 1 --format csv)
says "bench topk (cpu, csv header)" \
  "backend,vocab,batch,k,dtype,p5_us,p50_us,p95_us,MB_read,GB/s,%copy,host_KB,logits_KB,host_saving,check,device,commit,date,copy_GB/s,gemm_TFLOP/s" \
  "${tk[@]}"
says "bench topk (cpu, vocab 1000, batch 2, k 5, csv row)" "cpu,1000,2,5,f32," "${tk[@]}"
says "bench topk (cpu, bytes to the host and the check)" ",0.1,8.0,83.3,ok," "${tk[@]}"
# the default format: a markdown table, number columns right-aligned
says "bench topk (cpu, markdown header)" "| backend | vocab | batch |" "${tk[@]:0:${#tk[@]}-2}"
says "bench topk (cpu, markdown alignment row)" "|---------|------:|------:|" "${tk[@]:0:${#tk[@]}-2}"

# bench serve: the engine offline on a fixture: one row per concurrency and per rate, every request done
sv=(bench serve "${m[@]}" --backend cpu --requests 6 --input-len 3:20 --output-len 2:6 --block-size 16 --format csv)
says "bench serve (csv header)" "model,backend,mode,value,requests,in_len,out_len,prefix,prefix_cache,dur_s,req/s,out_tok/s,ttft_p50_ms" \
  "${sv[@]}" --concurrency 1
says "bench serve (concurrency 3 row)" ",cpu,concurrency,3,6,3:20,2:6,0,on," "${sv[@]}" --concurrency 3
says "bench serve (Poisson rate row, shared prefix from the cache)" ",cpu,rate,50,6,3:20,2:6,16,on," "${sv[@]}" --rate 50 \
  --shared-prefix 16
bad "--rate 0: not a list of request rates >= 0.001" bench serve "${m[@]}" --rate 0
bad "--rate 1e-320: not a list" bench serve "${m[@]}" --rate 1e-320
bad "--rate 1,: not a list" bench serve "${m[@]}" --rate 1,
bad '--rate "": not a list of request rates >= 0.001' bench serve "${m[@]}" --rate ""
bad "more than 32 rates" bench serve "${m[@]}" --rate 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33
bad "--input-len 5:2: not LO:HI" bench serve "${m[@]}" --input-len 5:2
bad "--block-size 8: not an integer in [16, 1024]" bench serve "${m[@]}" --block-size 8
bad "unknown option --iters (see minfer bench serve --help)" bench serve "${m[@]}" --iters 2

# rows WHAT N NEEDLE ARGS...: exit 0, a CSV on stdout of exactly N rows under its header, and
# NEEDLE in it. The list flags of the op benches run the product of the lists, no more.
rows() {
  local what=$1 want=$2 needle=$3 got
  shift 3
  if "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then
    got=$(($(wc -l <"$tmp/out") - 1))
    if [[ $got -eq $want ]] && grep -qF -- "$needle" "$tmp/out"; then
      pass=$((pass + 1))
      echo "ok   $what: $got rows"
      return
    fi
    echo "FAIL $what: $got rows (want $want) or no '$needle': $(head -c 400 "$tmp/out")"
  else
    echo "FAIL $what: exit $?: $(tail -n 2 "$tmp/err")"
  fi
  fail=$((fail + 1))
}
one=(--backend cpu --warmup 0 --iters 1 --format csv)
rows "bench attention: 2 batches x 2 kv-head counts" 4 "prefill,2,4,2,16,16,64,causal,bf16," \
  bench attention "${one[@]}" --cases prefill --mask causal --batch 1,2 --seq 16 --heads 4 --kv-heads 2,4 --head-dim 64
rows "bench attention: decode, kv-heads 3 does not divide 4 (skipped)" 1 "decode,1,6,3,1,24,32,none," \
  bench attention "${one[@]}" --cases decode --seq 24 --heads 4,6 --kv-heads 3 --head-dim 32
rows "bench softmax: the listed grid, no sweep" 2 "grid,1,2,32,32,causal,bf16,cpu," \
  bench softmax "${one[@]}" --variant fused --batch 1 --heads 2 --seq 16,32
rows "bench moe: top-k 8 of 4 experts skipped" 1 "prefill,even,4,2,64,112,1,16,f32," \
  bench moe "${one[@]}" --mode prefill --routing even --experts 4 --top-k 2,8 --hidden 64 --batch 1
# Every op bench row names the commit the binary was built from (git's short HEAD, +dirty for
# an edited tree; "unknown" without git) after the device, and the ceilings measured first.
src=$(cd "$fix/../.." && pwd)
head=$(git -C "$src" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)
says "bench attention: commit column ($head)" ",$head" bench attention "${one[@]}" --cases prefill --mask none \
  --batch 1 --seq 16 --heads 2 --head-dim 64
says "bench attention: provenance columns" ",device,commit,date,copy_GB/s,gemm_TFLOP/s" bench attention "${one[@]}" \
  --cases prefill --mask none --batch 1 --seq 16 --heads 2 --head-dim 64
says "bench model: prefill TFLOP/s and % of the GEMM ceiling" "prefill_TFLOP/s,%gemm" bench model --synthetic tiny \
  --backend cpu --seq 8 --gen 2 --iters 1 --format csv
# --kv-dtype (the CPU's KV cache in f16/bf16): named in info and in bench model's kv_dtype column
bad "--kv-dtype f8: not auto, f32, f16 or bf16" bench model --kv-dtype f8
bad "--kv-dtype int8: not auto, f32, f16 or bf16" generate "${m[@]}" -p Hi --kv-dtype int8
says "info: --kv-dtype f16" "weights f32, activations f32, KV cache f16" info "${m[@]}" --backend cpu --kv-dtype f16
says "bench model: --kv-dtype bf16 column" ",bf16" bench model --synthetic tiny --backend cpu --seq 8 --gen 2 --iters 1 \
  --format csv --kv-dtype bf16
good "generate --kv-dtype f16 (llama-tiny)" generate "${m[@]}" -p Hi -n 4 --seed 1 --backend cpu --kv-dtype f16
# --mmap (the CPU's weights in place from the file instead of copied into huge pages): the same
# greedy text either way; taken by every model-loading command
"$bin" generate "${m[@]}" -p Hi -n 8 --temp 0 --backend cpu >"$tmp/copy.txt" 2>/dev/null
"$bin" generate "${m[@]}" -p Hi -n 8 --temp 0 --backend cpu --mmap >"$tmp/mmap.txt" 2>/dev/null
if [[ -s $tmp/copy.txt ]] && cmp -s "$tmp/copy.txt" "$tmp/mmap.txt"; then
  pass=$((pass + 1))
  echo "ok   generate --mmap: the same greedy text as the copied weights"
else
  fail=$((fail + 1))
  echo "FAIL generate --mmap: greedy text '$(head -c 100 "$tmp/mmap.txt")' vs copied '$(head -c 100 "$tmp/copy.txt")'"
fi
good "info --mmap" info "${m[@]}" --backend cpu --mmap
good "bench model --mmap" bench model "${m[@]}" --backend cpu --seq 8 --gen 2 --iters 1 --format csv --mmap
bad "unknown option --mmap=1" generate "${m[@]}" -p Hi --mmap=1
# Idle OpenMP threads sleep (minfer re-executes itself with OMP_WAIT_POLICY=PASSIVE unless the
# user chose a policy): spinning ones took the cores from OpenBLAS's threads and from other
# processes on a shared machine (docs/notes/cpu.md, "Threads").
if env -u OMP_WAIT_POLICY "$bin" info "${m[@]}" --backend cpu 2>/dev/null | grep -q "wait policy PASSIVE"; then
  pass=$((pass + 1))
  echo "ok   info: OpenMP wait policy PASSIVE by default"
else
  fail=$((fail + 1))
  echo "FAIL info: OpenMP wait policy not PASSIVE by default: $(env -u OMP_WAIT_POLICY "$bin" info "${m[@]}" --backend cpu 2>&1 | grep threads)"
fi
# The CPU roofline is a ceiling: a read stream on the decode's threads, best of rounds before and
# after the runs, against the bytes a step reads. A bf16 GPT-2 small decode streams 273 MB of
# weights a step at ~95% of that ceiling: %roof (column 15) must stay <= 100 (it printed 146-230
# against memcpy). Its roof_tok/s (column 14) counts the KV cache the steps attend over too:
# read_GB/s (the second-to-last column: the device's name has a comma) / (weights + KV bytes a
# token x the mean keys of the 4 steps after 128 tokens, 130.5), within the printed digits'
# rounding; without the cache it would be 3.5% higher.
if "$bin" bench model --synthetic small --dtype bf16 --backend cpu --seq 128 --gen 4 --iters 1 --format csv \
     >"$tmp/out" 2>"$tmp/err" && "$bin" info --synthetic small --dtype bf16 --backend cpu >"$tmp/info" 2>&1; then
  roof=$(awk -F, 'NR == 2 { print $15 }' "$tmp/out")
  if awk -v r="$roof" 'BEGIN { exit !(r + 0 > 0 && r + 0 <= 100) }'; then
    pass=$((pass + 1))
    echo "ok   bench model: bf16 small decode at ${roof}% of the read roof (<= 100)"
  else
    fail=$((fail + 1))
    echo "FAIL bench model: bf16 small decode at '${roof}'% of the read roof (want 0 < %roof <= 100): $(head -c 600 "$tmp/out")"
  fi
  wmb=$(awk '$1 == "weights" { print $2 }' "$tmp/info")
  kvt=$(awk '/KV cache per token/ { print $5 }' "$tmp/info")
  read -r tok gbps < <(awk -F, 'NR == 2 { print $14, $(NF - 1) }' "$tmp/out")
  want=$(awk -v g="$gbps" -v w="$wmb" -v k="$kvt" 'BEGIN { printf "%.2f", g * 1e9 / (w * 1e6 + k * 130.5) }')
  if awk -v t="$tok" -v w="$want" 'BEGIN { d = t / w - 1; exit !(w > 0 && d < 0.01 && d > -0.01) }'; then
    pass=$((pass + 1))
    echo "ok   bench model: roof ${tok} tok/s = ${gbps} GB/s over ${wmb} MB of weights + ${kvt} B x 130.5 keys of KV cache (${want})"
  else
    fail=$((fail + 1))
    echo "FAIL bench model: roof '${tok}' tok/s, want ${gbps} GB/s over ${wmb} MB + ${kvt} B x 130.5 keys = '${want}' (+-1%)"
  fi
else
  fail=$((fail + 1))
  echo "FAIL bench model --synthetic small: exit $?: $(tail -n 2 "$tmp/err")"
fi

echo "bad-input cases: $nbad"
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
