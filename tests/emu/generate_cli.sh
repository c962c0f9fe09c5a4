#!/usr/bin/env bash
# `minfer generate --backend cuda` (greedy, decode graphs on) prints the CPU
# backend's text on the default model, every token picked on the device, the
# first decode step recorded as a CUDA graph and every decode step (N - 1 for
# N tokens: the prefill gives the first) a replay of it (CTest
# emu_generate_cli; the token ids are checked by test_default_model's CUDA part):
#   - in bf16 (the CUDA default) for 32 tokens, on expected.json's prompts
#     (HF's smallest top-2 logit gap there is 0.006: bf16 keeps those choices;
#     longer runs reach ties that bf16 rounding breaks the other way);
#   - in f32 for 64 tokens.
#   generate_cli.sh MINFER MODEL_DIR
set -euo pipefail
minfer=$1 model=$2
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail=0
run() { # dtype n prompt
  local cpu cuda
  cpu=$("$minfer" generate -m "$model" -p "$3" -n "$2" --temp 0 --ignore-eos --backend cpu 2>/dev/null)
  cuda=$("$minfer" generate -m "$model" -p "$3" -n "$2" --temp 0 --ignore-eos --backend cuda --dtype "$1" 2>"$err")
  if ! grep -q "| cuda, llama, finish: length | picked on the device $2 of $2" "$err"; then
    echo "FAIL $1 \"$3\": not $2 tokens on cuda:"; cat "$err"; fail=1
  elif ! grep -q "^minfer: decode graphs: 1 recorded, $(($2 - 1)) replayed$" "$err"; then
    echo "FAIL $1 \"$3\": not 1 decode graph recorded and $(($2 - 1)) replays:"; cat "$err"; fail=1
  elif [[ "$cpu" != "$cuda" ]]; then
    printf 'FAIL %s "%s":\n  cpu:  %s\n  cuda: %s\n' "$1" "$3" "$cpu" "$cuda"; fail=1
  else
    printf 'ok   %s "%s" (1 graph, %d replays) ->%s\n' "$1" "$3" $(($2 - 1)) "$cuda"
  fi
}
for p in "In the beginning" "And the LORD said unto Moses," "Blessed are the" "Jesus answered and said unto them,"; do
  run bf16 32 "$p"
done
for p in "In the beginning" "And the LORD spake unto Moses, saying"; do
  run f32 64 "$p"
done
exit $fail
