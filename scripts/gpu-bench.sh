#!/usr/bin/env bash
# Every benchmark and peer of minfer in one call on the (air-gapped) GPU host,
# budgeted to finish within 10 minutes (MF_BENCH_BUDGET_S; not yet run on a GPU);
# results appended to docs/results/*.csv, plots redrawn into docs/plots/, and at
# most 4 files left in OUTDIR.
#
#   bash scripts/gpu-bench.sh OUTDIR             # build (via gpu-check.sh) + everything
#   bash scripts/gpu-bench.sh --dry-run OUTDIR   # print the commands, run nothing
#   bash scripts/gpu-bench.sh --only softmax,ncu OUTDIR   # a subset (split a long run)
#
# Rehearsal without a GPU, in a throwaway clone (it appends to that clone's
# docs/results): MF_BENCH_REBUILD=0 BUILD_DIR=<a CPU build> bash scripts/gpu-bench.sh
# --only softmax,attention,moe,topk OUTDIR. The benches run on the CPU, the
# peers fail (no CUDA), and the plots and report tables are drawn from the CPU
# rows alone (one device per plot and table): the script's plumbing checked
# end to end, no figure to keep.
#
# Steps, in this order (names for --only):
#   build      scripts/gpu-check.sh with MF_GPU_STAGES="deps configure build" (the
#              carried .debs unpacked into .gpu-prefix/, sm_90a); later steps source
#              .gpu-prefix/env.sh. Skipped when BUILD_DIR/minfer exists and
#              MF_BENCH_REBUILD=0.
#   ceilings   bench/results.py ceilings: copy GB/s and bf16 cuBLAS GEMM TFLOP/s (torch)
#   softmax    minfer bench softmax --format csv; bench/softmax_peers.py
#   attention  minfer bench attention --format csv; bench/attention_peers.py
#   moe        minfer bench moe --format csv; bench/moe_peers.py
#   topk       minfer bench topk --dtype f32,bf16 --format csv; bench/topk_peers.py (f32)
#   model      minfer bench model (small, medium: batch 1,4,16,32 x seq 128; flash and
#              classic), its per-op profile (medium, batch 8 x seq 2048, both paths)
#   ncu        ncu --clock-control none on the softmax row-length sweep (128 .. 131072
#              columns: short and long rows), the attention bench's prefill and decode
#              kernels (or, without it, one prefill and one decode step of the Small model),
#              one MoE layer's kernels (goal shape, prefill)
#   peers      bench/model_peers.py --minfer BUILD (HF eager/SDPA beside minfer flash and
#              classic; the quick subset; rows written as cases finish)
# A benchmark or peer script that does not exist in this tree or build is skipped
# with one line. Every step runs under `timeout`, capped by what is left of the
# budget (MF_BENCH_BUDGET_S, default 570 s from the start); a step with < 15 s
# left is skipped ("out of time"), so a run ends in time and keeps what it measured.
#
# Results: raw outputs go to a work folder; each is appended with
# bench/results.py (device, commit, date added where the tool omits them) to
#   docs/results/softmax_minfer_bench.csv  softmax_peers.csv  ceilings.csv
#   docs/results/attention_minfer_bench.csv  attention.csv (peers)
#   docs/results/moe_minfer_bench.csv  moe.csv (peers)
#   docs/results/topk_minfer_bench.csv  topk_peers.csv
#   docs/results/model_minfer_bench.csv  model_profile.csv  model_peers.csv  ncu.csv
# then bench/plot.py redraws docs/plots/ and bench/report.py the result tables
# of docs/REPORT.md (its <!-- report:NAME --> regions).
# OUTDIR holds: summary.txt (steps, states, times, notes), bench.log (every
# command and its stderr), results.tar.gz (docs/results/*.csv + docs/plots/*.png
# + docs/REPORT.md as updated: unpack at the repository root), raw.tar.gz (raw CSVs, ncu reports
# .ncu-rep, gpu-check logs).
#
# Environment knobs:
#   BUILD_DIR=build  MF_BENCH_BUDGET_S=570  MF_BENCH_REBUILD=1
#   MF_COMMIT=<git HEAD>   the commit written on every row: set it when the tree
#                          on the host is a copy without .git (else "unknown")
#   MF_NCU_ATTN_RE='(?i)attn|attention|flash'   kernels profiled in the attention step
#   MF_NCU_MOE_RE='(?i)moe|gemm|nvjet|xmma'   ... in the MoE step (moe_router/permute/gather/
#                          combine kernels and the cuBLASLt expert GEMMs; the first case's)
set -uo pipefail

dry=0 only=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --dry-run) dry=1; shift ;;
    --only) only=",${2:-},"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-bench: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [[ $# -ne 1 ]]; then
  echo "usage: bash scripts/gpu-bench.sh [--dry-run] [--only STEPS] OUTDIR  (--help for more)" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
work="$out/.work"                     # raw outputs; tarred into raw.tar.gz at the end
res="$root/docs/results"
build=${BUILD_DIR:-build}
[[ $build = /* ]] || build="$root/$build"
minfer="$build/minfer"
t0=$(date +%s)
budget=${MF_BENCH_BUDGET_S:-570}
commit=${MF_COMMIT:-$(git -C "$root" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)}
if [[ -z ${MF_COMMIT:-} && $commit != unknown && -n $(git -C "$root" status --porcelain -- src include tools bench CMakeLists.txt 2>/dev/null | head -n1) ]]; then
  commit="$commit+dirty"
fi
export MF_COMMIT=$commit # the build's stamp (cmake/build_info.cmake): minfer bench writes it on every row
attn_re=${MF_NCU_ATTN_RE:-'(?i)attn|attention|flash'}
moe_re=${MF_NCU_MOE_RE:-'(?i)moe|gemm|nvjet|xmma'}
log="$out/bench.log"
if ((dry)); then log=/dev/null; else rm -rf "$work"; mkdir -p "$work/raw" "$work/ncu"; : >"$log"; fi

names=() states=() times=() notes=()
failed=0
want() { [[ -z $only || $only == *",$1,"* ]]; }
left() { echo $((budget - ($(date +%s) - t0))); }
record() { names+=("$1") states+=("$2") times+=("$3") notes+=("$4"); echo "   $2${4:+  ($4)}"; }

# run NAME CAP OUTFILE CMD...: CMD under timeout min(CAP, budget left - 10 s), stdout to
# OUTFILE ('-': the log), stderr to the log. --dry-run prints it instead.
run() {
  local name=$1 cap=$2 o=$3 t rc s tmo
  shift 3
  if ((dry)); then
    printf '%s' "[$name] "; printf '%q ' "$@"; [[ $o != - ]] && printf '> %q' "${o#"$root"/}"; echo
    return 0
  fi
  tmo=$(( $(left) - 10 ))
  ((tmo > cap)) && tmo=$cap
  if ((tmo < 15)); then
    record "$name" SKIP 0s "out of time (budget ${budget}s)"
    return 2
  fi
  echo "== $name ($(date +%H:%M:%S), <= ${tmo}s)"
  { echo "===== $name $(date -u +%H:%M:%SZ) (timeout ${tmo}s)"; printf '%q ' "$@"; echo; } >>"$log"
  s=$(date +%s)
  if [[ $o == - ]]; then
    timeout "$tmo" "$@" >>"$log" 2>&1
  else
    timeout "$tmo" "$@" >"$o" 2>>"$log"
  fi
  rc=$?
  t="$(( $(date +%s) - s ))s"
  if ((rc == 0)); then record "$name" PASS "$t" ""
  elif ((rc == 124)); then record "$name" FAIL "$t" "timed out after ${tmo}s"; failed=1
  else record "$name" FAIL "$t" "exit $rc (see bench.log)"; failed=1
  fi
  return $rc
}

# skip NAME WHY: one line, no failure.
skip() { ((dry)) && { echo "[$1] skipped: $2"; return 0; }; record "$1" SKIP 0s "$2"; }

# add SRC DST [results.py append options]: append a raw CSV to docs/results (if it has rows).
add() {
  local src=$1 dst=$2
  shift 2
  if ((dry)); then echo "        python3 bench/results.py append ${src#"$root"/} ${dst#"$root"/} --commit $commit $*"; return 0; fi
  [[ -s $src ]] || { echo "no rows in $src" >>"$log"; return 0; }
  python3 "$root/bench/results.py" append "$src" "$dst" --commit "$commit" --device "$gpu" "$@" >>"$log" 2>&1
}

# has_bench OP: the built CLI knows `minfer bench OP` (dry run: assume yes).
has_bench() { ((dry)) || "$minfer" bench "$1" --help >/dev/null 2>&1; }
has_script() { [[ -f $root/bench/$1 ]]; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
gpu=${gpu:-unknown device}
echo "minfer gpu-bench $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $commit  device: $gpu  budget ${budget}s$( ((dry)) && echo '  (dry run)')"

# ---- build: gpu-check.sh's own deps/configure/build stages, nothing duplicated ----------------
if want build; then
  if [[ ${MF_BENCH_REBUILD:-1} == 0 && -x $minfer ]]; then
    skip build "MF_BENCH_REBUILD=0 and $minfer exists"
  else
    run build 240 - env MF_GPU_STAGES="deps configure build" bash "$root/scripts/gpu-check.sh" "$work/gpu-check"
  fi
fi
if [[ -f $root/.gpu-prefix/env.sh ]]; then
  # shellcheck disable=SC1091
  source "$root/.gpu-prefix/env.sh"
fi
if ((!dry)) && [[ ! -x $minfer ]]; then
  echo "gpu-bench: no $minfer: the build failed or was not run (see $log)" | tee -a "$log"
  record minfer FAIL 0s "no build"
  failed=1
fi
export MINFER_LIB="$build/libminfer.so"
py=(python3)

# ---- ceilings ------------------------------------------------------------------------------------------
if want ceilings; then
  run ceilings 60 - "${py[@]}" "$root/bench/results.py" ceilings "$res/ceilings.csv" --commit "$commit"
fi

# ---- op benches: `minfer bench OP` and bench/OP_peers.py -----------------------------------------------
# op_pair OP BENCH_SECS PEERS_SECS PEERS_CSV [bench args...]: the op's bench
# (appended to docs/results/OP_minfer_bench.csv) and its peers script (to
# docs/results/PEERS_CSV), each skipped with a reason when absent.
op_pair() {
  local op=$1 tb=$2 tp=$3 pcsv=$4
  shift 4
  if has_bench "$op"; then
    run "bench $op" "$tb" "$work/raw/${op}_minfer_bench.csv" "$minfer" bench "$op" "$@" --format csv &&
      add "$work/raw/${op}_minfer_bench.csv" "$res/${op}_minfer_bench.csv"
  else skip "bench $op" "minfer bench $op not in this build"; fi
  if has_script "${op}_peers.py"; then
    run "${op}_peers" "$tp" - "${py[@]}" "$root/bench/${op}_peers.py" --out "$work/raw/$pcsv"
    add "$work/raw/$pcsv" "$res/$pcsv"
  else skip "${op}_peers" "bench/${op}_peers.py not in this tree"; fi
}
if want softmax; then op_pair softmax 120 150 softmax_peers.csv; fi
if want attention; then op_pair attention 120 150 attention.csv; fi
if want moe; then op_pair moe 90 120 moe.csv; fi
if want topk; then op_pair topk 60 90 topk_peers.csv --dtype f32,bf16; fi # top-k / top-p candidates (mf_topk)

# ---- model: decode scaling with batch, both attention paths; per-op profile -------------------------------
if want model; then
  if has_bench model; then
    for attn in flash classic; do
      for cfg in small medium; do
        f="$work/raw/model_${cfg}_${attn}.csv"
        run "bench model $cfg $attn" 60 "$f" "$minfer" bench model --synthetic "$cfg" --attn "$attn" \
          --batch 1,4,16,32 --seq 128 --gen 16 --format csv && add "$f" "$res/model_minfer_bench.csv"
      done
      f="$work/raw/model_profile_${attn}.csv"
      run "profile medium $attn" 60 "$f" "$minfer" bench model --synthetic medium --attn "$attn" \
        --batch 8 --seq 2048 --gen 4 --iters 2 --profile --format csv &&
        add "$f" "$res/model_minfer_bench.csv" --table 0 &&
        add "$f" "$res/model_profile.csv" --table 1 --set "attn=$attn"
    done
    # the Medium prefill with our sm_90a attention kernel (opt-in until verified): attn=flash-wgmma
    f="$work/raw/model_profile_flash-wgmma.csv"
    MINFER_ATTN=wgmma run "profile medium flash-wgmma" 60 "$f" "$minfer" bench model --synthetic medium \
      --attn flash --batch 8 --seq 2048 --gen 4 --iters 2 --profile --format csv &&
      add "$f" "$res/model_minfer_bench.csv" --table 0 --set "attn=flash-wgmma" &&
      add "$f" "$res/model_profile.csv" --table 1 --set "attn=flash-wgmma"
  else skip "bench model" "minfer bench model not in this build"; fi
fi

# ---- ncu: DRAM throughput, occupancy, tensor pipes, bytes; clocks left alone -----------------------------------
if want ncu; then
  ncu_bin=$(command -v ncu || { [[ -x /usr/local/cuda/bin/ncu ]] && echo /usr/local/cuda/bin/ncu; })
  if [[ -z $ncu_bin ]] && ((!dry)); then
    skip ncu "ncu not found"
  else
    ncu_bin=${ncu_bin:-ncu}
    # metrics beyond the sections, kept only if this ncu knows them (the tensor-pipe
    # names differ between Ampere's HMMA and Hopper's GMMA)
    metrics="dram__bytes_read.sum,dram__bytes_write.sum"
    if ((!dry)); then
      known=$("$ncu_bin" --query-metrics 2>/dev/null | awk '{print $1}')
      for m in sm__pipe_tensor_op_hmma_cycles_active sm__pipe_tensor_op_gmma_cycles_active; do
        grep -qx "$m" <<<"$known" && metrics+=",$m.avg.pct_of_peak_sustained_active"
      done
    else
      metrics+=",sm__pipe_tensor_op_{hmma,gmma}_cycles_active.avg.pct_of_peak_sustained_active (those this ncu knows)"
    fi
    ncu_args=(--clock-control none --target-processes all --section SpeedOfLight --section Occupancy
              --section MemoryWorkloadAnalysis --section LaunchStats --metrics "$metrics")
    # ncu_case NAME REGEX COUNT CMD...: profile, export the details page as CSV, append tidy rows
    ncu_case() {
      local name=$1 re=$2 count=$3
      shift 3
      run "ncu $name" 90 - "$ncu_bin" "${ncu_args[@]}" -k "regex:$re" -c "$count" -f -o "$work/ncu/$name" "$@" || return
      if ((dry)); then
        echo "        $ncu_bin --import ncu/$name.ncu-rep --csv --page details > ncu/$name.csv"
        echo "        python3 bench/results.py ncu ncu/$name.csv docs/results/ncu.csv --case $name --commit $commit"
        return
      fi
      if ! "$ncu_bin" --import "$work/ncu/$name.ncu-rep" --csv --page details >"$work/ncu/$name.csv" 2>>"$log" ||
         ! python3 "$root/bench/results.py" ncu "$work/ncu/$name.csv" "$res/ncu.csv" --case "$name" \
           --commit "$commit" --device "$gpu" >>"$log" 2>&1; then
        echo "ncu $name: no report or no kernel matched $re" | tee -a "$log"
      fi
    }
    if has_bench softmax; then
      # the unmasked sweep: one launch per row length, 128 (short) .. 131072 (long) columns
      ncu_case softmax-sweep 'softmax' 30 "$minfer" bench softmax --cases sweep --variant fused \
        --warmup 0 --iters 1 --format csv
    else skip "ncu softmax" "minfer bench softmax not in this build"; fi
    if has_bench attention; then
      # every goal shape once (+ one warm-up): prefill kernels, decode split + merge kernels
      ncu_case attention "$attn_re" 150 "$minfer" bench attention --cases all --warmup 1 --iters 1 --format csv
      # our sm_90a prefill kernel (opt-in path): the first goal shapes; nothing matches
      # where the build or GPU lacks sm_90a
      MINFER_ATTN=wgmma ncu_case attention-wgmma 'attn_prefill_sm90' 8 "$minfer" bench attention \
        --cases prefill --warmup 0 --iters 1 --format csv
    elif has_bench model; then
      # without the attention bench: the first matches are one prefill's attention kernels,
      # then one decode step's (Small model, batch 8, seq 2048)
      ncu_case attention-prefill-decode "$attn_re" 100 "$minfer" bench model --synthetic small \
        --batch 8 --seq 2048 --gen 1 --iters 1 --no-graphs --format csv
    else skip "ncu attention" "neither minfer bench attention nor model in this build"; fi
    if has_bench moe; then
      # prefill of the goal shape (E 32) and of E 8, top-2, hidden 4096, 16 x 2048 tokens: router,
      # permutation, the expert GEMM loop, combine, dense GEMM
      ncu_case moe "$moe_re" 200 "$minfer" bench moe --mode prefill --routing even --experts 8,32 --top-k 2 \
        --hidden 4096 --batch 16 --warmup 1 --iters 1 --no-gemm-ceiling --format csv
      # our sm_90a grouped GEMMs (opt-in path): GEMM 1 (SwiGLU fused) and GEMM 2 of the first
      # case (E 8, top-2, 16 x 2048 tokens); nothing matches where the build or GPU lacks sm_90a
      MINFER_MOE_GEMM=wgmma ncu_case moe-wgmma 'moe_gemm_sm90' 2 "$minfer" bench moe --mode prefill \
        --routing even --experts 8 --top-k 2 --hidden 4096 --batch 16 --warmup 0 --iters 1 \
        --no-gemm-ceiling --format csv
    else skip "ncu moe" "minfer bench moe not in this build"; fi
  fi
fi

# ---- HF transformers beside minfer (flash and classic): the longest, last --------------------------------------
if want peers; then
  if has_script model_peers.py; then
    run "model_peers --minfer" 330 - "${py[@]}" "$root/bench/model_peers.py" --minfer "$build" \
      --out "$work/raw/model_peers.csv"
    add "$work/raw/model_peers.csv" "$res/model_peers.csv"
    # the strongest HF decode set-up (static cache + torch.compile), batch 1: issue 9's peer
    run "model_peers hf_static_compile" 150 - "${py[@]}" "$root/bench/model_peers.py" --impls hf_static_compile \
      --configs small,llama-7b --batch 1 --seq 128 --out "$work/raw/model_peers_compile.csv"
    add "$work/raw/model_peers_compile.csv" "$res/model_peers.csv"
  else skip model_peers "bench/model_peers.py not in this tree"; fi
fi

# ---- plots, archives, summary ------------------------------------------------------------------------------------
if ((dry)); then
  echo "[plots] python3 bench/plot.py"
  echo "[report] python3 bench/report.py   # REPORT.md's generated result tables"
  echo "[pack]  tar czf OUTDIR/results.tar.gz docs/results/*.csv docs/plots/*.png docs/REPORT.md; tar czf OUTDIR/raw.tar.gz -C OUTDIR/.work ."
  exit 0
fi
if python3 "$root/bench/plot.py" >>"$log" 2>&1; then
  record plots PASS 0s "$(grep -c '^plot: wrote' "$log") png"
else
  record plots FAIL 0s "bench/plot.py failed (matplotlib?)"
fi
if python3 "$root/bench/report.py" >>"$log" 2>&1; then
  record report PASS 0s "$(grep '^report:' "$log" | tail -n1 | sed 's/^report: //')"
else
  record report FAIL 0s "bench/report.py failed (see bench.log)"
fi
(cd "$root" && tar czf "$out/results.tar.gz" docs/results/*.csv docs/plots/*.png docs/REPORT.md 2>>"$log")
(cd "$work" && tar czf "$out/raw.tar.gz" . 2>>"$log") && rm -rf "$work"
{
  echo "minfer gpu-bench  $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit $commit  device: $gpu  total $(( $(date +%s) - t0 ))s"
  echo
  printf '%-28s %-5s %6s  %s\n' step state time notes
  for i in "${!names[@]}"; do
    printf '%-28s %-5s %6s  %s\n' "${names[$i]}" "${states[$i]}" "${times[$i]}" "${notes[$i]}"
  done
  echo
  echo "OUTDIR: summary.txt bench.log results.tar.gz (docs/results, docs/plots; tar xzf at the repo root) raw.tar.gz"
  echo "result: $([[ $failed -eq 0 ]] && echo PASS || echo FAIL)"
} >"$out/summary.txt"
echo
cat "$out/summary.txt"
exit $failed
