#!/usr/bin/env python3
"""docs/results/*.csv -> docs/plots/*.png (matplotlib, no other dependency).

    python3 bench/plot.py                       # docs/results -> docs/plots
    python3 bench/plot.py --results DIR --out DIR [--only softmax,model] [--device NAME]

Every plot is drawn only from rows that a benchmark wrote, of one device (the
newest minfer bench row's, or --device); a plot whose CSV is missing (or has
no usable rows) is skipped with one line on stderr. Titles
name the device and the commit(s); ceilings (copy bandwidth, GEMM) are drawn
from the figures measured in the same runs.

Plots (the column contract of each CSV is in docs/results/README.md):
  softmax.png       GB/s vs row length (unmasked sweep; causal attention grid),
                    every implementation, the copy ceiling; older commits of
                    minfer dashed ("before")
  attention_d{64,128}.png   TFLOP/s vs sequence length per implementation,
                    causal and not (attention.csv, phase prefill)
  decode.png        GB/s of KV read vs batch x context, the copy ceiling
                    (attention.csv, phase decode)
  moe.png           TFLOP/s vs experts x top-k with the dense-GEMM line (moe.csv)
  model_<config>.png   tokens/s and latency vs batch, prefill and decode,
                    minfer beside HF transformers (model_peers*.csv)
  profile.png       per-op time of one prefill and one decode step, classic vs flash
                    attention (model_profile.csv, minfer bench model --profile)
  roofline.png      every kernel row that has a FLOP and byte count, on the
                    copy and GEMM ceilings
"""

import argparse
import csv
import glob
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))

# Model shapes of src/model/synthetic.c (as bench/model_peers.py lists them), for
# the roofline's FLOP count of a forward: 2 FLOP per matmul weight per token.
CONFIGS = {
    "small": dict(layers=12, hidden=768, kv=768, ffn=3072, vocab=50257, gated=False),
    "medium": dict(layers=24, hidden=1024, kv=1024, ffn=4096, vocab=50257, gated=False),
    "large": dict(layers=32, hidden=4096, kv=4096, ffn=16384, vocab=50257, gated=False),
    "llama-7b": dict(layers=32, hidden=4096, kv=4096, ffn=11008, vocab=32000, gated=True),
}
# FLOP per element of the softmax for the roofline (scale, max, subtract, exp, sum,
# normalise): a count by convention, not a measurement.
SOFTMAX_FLOP_PER_ELEM = 5.0


def warn(msg):
    print(f"plot: {msg}", file=sys.stderr)


# ---- loading -------------------------------------------------------------------------------------

def fnum(v):
    """float of a CSV cell, or None for '', '-', 'nan', text."""
    if v is None:
        return None
    try:
        x = float(str(v).strip().rstrip("%"))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def short_device(d):
    return re.sub(r"\s*\(.*\)\s*$", "", (d or "").strip()) or "unknown device"


def short_commit(c):
    c = (c or "").strip()
    dirty = c.endswith("+dirty")
    c = c.replace("+dirty", "")
    return (c[:7] if re.fullmatch(r"[0-9a-f]{7,40}", c) else c or "unknown") + ("+dirty" if dirty else "")


# The one device the plots show (main() picks it): None draws every row.
DEVICE = None


def load(results, pattern):
    """Rows of every CSV matching pattern; device/commit/date normalised, _file added;
    only DEVICE's rows when one is set."""
    rows = []
    for path in sorted(glob.glob(os.path.join(results, pattern))):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                r = {(k or "").strip(): (v or "").strip() for k, v in r.items()}
                r["_file"] = os.path.basename(path)
                r["_device"] = short_device(r.get("device"))
                r["_commit"] = short_commit(r.get("commit"))
                r["_date"] = (r.get("date") or "")[:10]
                if DEVICE is None or r["_device"] == DEVICE:
                    rows.append(r)
    return rows


def newest_device(results):
    """The device of the newest row minfer's own benches wrote (*_minfer_bench*.csv), or None:
    a plot never sets two devices side by side (a CPU rehearsal beside H100 peers, or two GPUs)."""
    rows = [r for r in load(results, "*_minfer_bench*.csv") if r.get("date")]
    return max(rows, key=lambda r: r["date"])["_device"] if rows else None


def col(r, *names):
    """First present, numeric value among the column aliases names."""
    for n in names:
        if n in r:
            x = fnum(r[n])
            if x is not None:
                return x
    return None


def text(r, *names, default=""):
    for n in names:
        if r.get(n):
            return r[n]
    return default


def truthy(v):
    return str(v).strip().lower() in ("1", "true", "yes", "causal", "on")


def latest_commit(rows):
    """The commit of the newest row (by date)."""
    best = max(rows, key=lambda r: r.get("date", ""))
    return best["_commit"]


def provenance(rows):
    """'device, commit X, date' (or the list of commits) for a title."""
    devs = sorted({r["_device"] for r in rows})
    commits = []
    for r in sorted(rows, key=lambda r: r.get("date", "")):
        if r["_commit"] not in commits:
            commits.append(r["_commit"])
    dates = sorted({r["_date"] for r in rows if r["_date"]})
    d = dates[0] if len(dates) == 1 else (f"{dates[0]}..{dates[-1]}" if dates else "undated")
    return f"{' / '.join(devs)}, commit {', '.join(commits)}, {d}"


def copy_ceiling(rows):
    vals = [col(r, "copy_GB/s", "copy_gbps") for r in rows]
    vals += [fnum(r.get("value")) for r in rows if r.get("ceiling") == "copy"]
    vals = [v for v in vals if v]
    return max(set(vals), key=vals.count) if vals else None


def gemm_ceiling(results, devices=None):
    """Measured bf16 GEMM TFLOP/s from any CSV that records it (column gemm_TFLOP/s or
    gemm_tflops, or rows with impl cublas_gemm / dense_gemm), preferring ceilings*.csv
    rows (ceiling gemm_bf16), else None."""
    best = None
    for r in load(results, "ceilings*.csv"):
        if devices and r["_device"] not in devices:
            continue  # another GPU's ceiling
        if r.get("ceiling") == "gemm_bf16" and fnum(r.get("value")) is not None:
            v = fnum(r["value"])
            if best is None or v > best[0]:
                best = (v, r["_file"], r["_commit"])
    if best:
        return best
    for r in load(results, "*.csv"):
        if devices and r["_device"] not in devices:
            continue
        v = col(r, "gemm_TFLOP/s", "gemm_tflops")
        if v is None and text(r, "impl", "kernel") in ("cublas_gemm", "dense_gemm", "dense"):
            v = col(r, "tflops", "TFLOP/s")
        if v is not None and (best is None or v > best[0]):
            best = (v, r["_file"], r["_commit"])
    return best


# ---- drawing helpers -------------------------------------------------------------------------------

def plt_module():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9,
                         "axes.titlesize": 10, "legend.fontsize": 8})
    return plt


# Fixed colours for the names the peers scripts use, so a name looks the same in every
# plot and every run; other names take the next free colour.
_COLORS = {"minfer": "#1f77b4", "minfer_flash": "#1f77b4", "minfer_classic": "#17becf", "hf_sdpa": "#2ca02c",
           "hf_eager": "#d62728", "triton": "#9467bd", "torch_softmax": "#ff7f0e", "torch_eager": "#d62728",
           "torch_compile": "#8c564b", "sdpa_flash": "#2ca02c", "sdpa_cudnn": "#ff7f0e", "sdpa_efficient": "#8c564b",
           "torch_grouped_mm": "#ff7f0e", "torch_bmm": "#2ca02c", "torch_loop": "#d62728", "grouped_mm": "#ff7f0e",
           "hf_loop": "#d62728", "torch_naive": "#e377c2", "sdpa_math": "#7f7f7f", "minfer-wgmma": "#08306b",
           "cublas-grouped": "#bcbd22"}
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
            "#7f7f7f"]


def color_for(name):
    """One colour per implementation, the same in every panel and plot."""
    if name not in _COLORS:
        used = set(_COLORS.values())
        free = [c for c in _PALETTE if c not in used]
        _COLORS[name] = free[0] if free else _PALETTE[len(_COLORS) % len(_PALETTE)]
    return _COLORS[name]


def hline(ax, y, label, color="black"):
    ax.axhline(y, color=color, linestyle=":", linewidth=1.2)
    ax.annotate(label, xy=(1.0, y), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                textcoords="offset points", ha="right", va="bottom", fontsize=7, color=color)


def save(fig, out, name, made):
    path = os.path.join(out, name)
    fig.savefig(path, bbox_inches="tight")
    made.append(path)
    print(f"plot: wrote {os.path.relpath(path)}")


def log2_axis(ax, xs):
    ax.set_xscale("log", base=2)
    xs = sorted(set(xs))
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{int(x) // 1024}k" if x >= 1024 and int(x) % 1024 == 0 else f"{int(x)}" for x in xs],
                       rotation=0)
    ax.minorticks_off()


# ---- softmax ------------------------------------------------------------------------------------------

def plot_softmax(results, out, made):
    peers = load(results, "softmax_peers.csv")
    ours = load(results, "softmax_minfer_bench.csv")
    if not peers and not ours:
        warn("softmax.png skipped: no softmax_peers.csv or softmax_minfer_bench.csv in " + results)
        return
    plt = plt_module()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    all_rows = []
    head = latest_commit(peers) if peers else None
    # Peers: the newest commit's run only (one process, one device state). The peers'
    # own "minfer" row is dropped when minfer bench rows exist (same kernel).
    series = {}
    for r in peers:
        if r["_commit"] != head:
            continue
        impl = r.get("impl", "?")
        if impl == "minfer" and ours:
            continue
        series.setdefault((impl, r["_commit"], r.get("case")), []).append(r)
    for r in ours:
        series.setdefault(("minfer", r["_commit"], r.get("case")), []).append(r)
    ours_latest = latest_commit(ours) if ours else None
    labels = {"torch_eager": "torch eager chain (scale, mask, softmax)", "torch_softmax": "torch.softmax (no mask)",
              "torch_compile": "torch.compile", "triton": "our Triton kernel", "minfer": "minfer"}
    for ax, case in zip(axes, ("sweep", "grid")):
        pts_any = False
        for (impl, commit, c), rows in sorted(series.items()):
            if c != case:
                continue
            if case == "grid":  # the largest batch x heads of the grid, causal (or as measured)
                rows = [r for r in rows if (col(r, "batch"), col(r, "heads")) == (16, 12)]
            pts = sorted((col(r, "k_len"), col(r, "GB/s", "gbps")) for r in rows)
            pts = [(x, y) for x, y in pts if x and y]
            if not pts:
                continue
            pts_any = True
            all_rows += rows
            before = impl == "minfer" and commit != ours_latest
            lab = labels.get(impl, impl) + (f" @ {commit}" if impl == "minfer" else "")
            ax.plot(*zip(*pts), marker="o" if impl == "minfer" else ".", markersize=4,
                    linestyle="--" if before else "-", linewidth=2 if impl == "minfer" and not before else 1.2,
                    color="#7f7f7f" if before else color_for(impl), label=lab + (" (before)" if before else ""))
        if not pts_any:
            ax.set_visible(False)
            continue
        cp = copy_ceiling([r for rows in series.values() for r in rows])
        if cp:
            hline(ax, cp, f"device-to-device copy {cp:.0f} GB/s (read + write)")
        xs = [col(r, "k_len") for r in all_rows if r.get("case") == case]
        log2_axis(ax, [x for x in xs if x])
        ax.set_xlabel("row length k_len (columns)")
        ax.set_ylabel("GB/s (x read once + y written once)")
        ax.set_ylim(bottom=0)
        ax.set_title("row-length sweep: no mask, 256 MiB of bf16 per case" if case == "sweep"
                     else "attention scores 16 x 12 x T x T, causal\n(causal rows read only the visible keys: "
                     "can exceed the copy line)")
    handles = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, bbox_to_anchor=(0.5, -0.01))
    fig.suptitle(f"Softmax (bf16, p50): GB/s vs row length — {provenance(all_rows)}")
    fig.tight_layout(rect=(0, 0.12, 1, 0.97))
    save(fig, out, "softmax.png", made)
    plt.close(fig)


# ---- attention ----------------------------------------------------------------------------------------

def attn_rows(results):
    rows = load(results, "attention*.csv")
    for r in rows:
        r["_impl"] = text(r, "impl", "kernel", default="minfer")
        r["_phase"] = text(r, "phase", "case", default="prefill").lower()  # the peers and minfer bench: case
        r["_d"] = col(r, "head_dim", "d")
        r["_causal"] = truthy(text(r, "causal", "mask", default="0"))
        r["_q"] = col(r, "q_len", "seq", "seq_len")
        r["_k"] = col(r, "k_len", "context", "kv_len", "seq")
        r["_tflops"] = col(r, "tflops", "TFLOP/s")
        r["_gbps"] = col(r, "gbps", "GB/s")
        r["_b"] = col(r, "batch")
    # minfer bench attention also times the sm_90a kernel (MINFER_ATTN=wgmma) on the same data
    extra = []
    for r in rows:
        v = col(r, "wgmma_TFLOP/s")
        if v and r["_impl"] == "minfer":
            w = dict(r)
            w["_impl"], w["_tflops"] = "minfer-wgmma", v
            extra.append(w)
    return rows + extra


def plot_attention(results, out, made):
    rows = [r for r in attn_rows(results) if r["_phase"] == "prefill" and r["_tflops"]]
    if not rows:
        warn("attention_d*.png skipped: no attention*.csv with prefill TFLOP/s rows in " + results)
        return
    head = latest_commit(rows)
    rows = [r for r in rows if r["_commit"] == head]
    plt = plt_module()
    gm = gemm_ceiling(results, {r["_device"] for r in rows})
    for d in sorted({r["_d"] for r in rows if r["_d"]}):
        dr = [r for r in rows if r["_d"] == d]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        for ax, causal in zip(axes, (False, True)):
            cr = [r for r in dr if r["_causal"] == causal]
            if not cr:
                ax.set_title(("causal" if causal else "non-causal") + ": not measured")
                continue
            # one line per implementation; when several batch x heads share a length, the
            # largest total work is drawn (the others are in the CSV)
            for impl in sorted({r["_impl"] for r in cr}):
                best = {}
                for r in cr:
                    if r["_impl"] != impl or not r["_q"]:
                        continue
                    work = (r["_b"] or 1) * (col(r, "heads", "q_heads") or 1)
                    if r["_q"] not in best or work > best[r["_q"]][0]:
                        best[r["_q"]] = (work, r["_tflops"])
                pts = sorted((q, v[1]) for q, v in best.items())
                if pts:
                    ax.plot(*zip(*pts), marker="o" if impl.startswith("minfer") else ".", color=color_for(impl),
                            linewidth=2 if impl.startswith("minfer") else 1.2, label=impl)
            if gm:
                hline(ax, gm[0], f"GEMM ceiling {gm[0]:.3g} TFLOP/s (measured, {gm[1]})")
            log2_axis(ax, [r["_q"] for r in cr if r["_q"]])
            ax.set_xlabel("sequence length (q_len = k_len)")
            ax.set_ylabel("TFLOP/s (4·B·H·S²·D, halved when causal)")
            ax.set_ylim(bottom=0)
            ax.set_title("causal" if causal else "non-causal")
            ax.legend(loc="lower right")
        fig.suptitle(f"Attention prefill, head_dim {int(d)}, bf16: TFLOP/s vs sequence length — {provenance(dr)}")
        save(fig, out, f"attention_d{int(d)}.png", made)
        plt.close(fig)


def plot_decode(results, out, made):
    rows = [r for r in attn_rows(results) if r["_phase"] == "decode" and r["_gbps"]]
    if not rows:
        warn("decode.png skipped: no attention*.csv with decode GB/s rows in " + results)
        return
    head = latest_commit(rows)
    rows = [r for r in rows if r["_commit"] == head]
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for impl in sorted({r["_impl"] for r in rows}):
        by_x = {}  # (batch, context) pairs with the same product: their mean
        for r in rows:
            if r["_impl"] == impl and r["_k"]:
                by_x.setdefault((r["_b"] or 1) * r["_k"], []).append(r["_gbps"])
        pts = sorted((x, sum(v) / len(v)) for x, v in by_x.items())
        if pts:
            ax.plot(*zip(*pts), marker="o" if impl.startswith("minfer") else ".", label=impl,
                    color=color_for(impl), linewidth=2 if impl.startswith("minfer") else 1.2)
    cp = copy_ceiling(rows)
    if cp:
        hline(ax, cp, f"device-to-device copy {cp:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch × context (cached tokens read per call; equal products averaged)")
    ax.set_ylabel("GB/s of KV cache read")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right")
    ax.set_title(f"Decode attention (one query token): GB/s vs batch·context\n{provenance(rows)}")
    save(fig, out, "decode.png", made)
    plt.close(fig)


# ---- MoE ------------------------------------------------------------------------------------------------

def plot_moe(results, out, made):
    rows = load(results, "moe*.csv")
    tf = ("tflops", "TFLOP/s", "expert_TFLOP/s")
    rows = [r for r in rows if col(r, *tf) and text(r, "mode", default="prefill") == "prefill"]
    if not rows:
        warn("moe.png skipped: no moe*.csv with prefill TFLOP/s rows in " + results)
        return
    head = latest_commit(rows)
    rows = [r for r in rows if r["_commit"] == head]
    # one shape family per plot: the most common hidden size (the goal shape's 4096 when present)
    hs = [col(r, "hidden") for r in rows if col(r, "hidden")]
    hidden = 4096 if 4096 in hs else (max(set(hs), key=hs.count) if hs else None)
    if hidden:
        rows = [r for r in rows if col(r, "hidden") in (hidden, None)]
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    dense_names = ("dense_gemm", "dense", "cublas_gemm")

    def ek(r):
        return (col(r, "experts", "n_experts"), col(r, "top_k", "topk"))

    keys = sorted({ek(r) for r in rows if text(r, "impl", "kernel") not in dense_names and ek(r)[0]})
    idx = {k: i for i, k in enumerate(keys)}
    series, dense = {}, {}
    for r in rows:
        impl = text(r, "impl", "kernel", default="minfer")
        k = ek(r)
        if k not in idx:
            continue
        # per (E, k): the largest token count measured (the goal: batch 16 x 2048)
        t = col(r, "tokens") or 0
        if impl in dense_names:
            dense[k] = max(dense.get(k, (0, 0)), (t, col(r, *tf)))
            continue
        # minfer bench moe times the expert GEMMs alone; the peers time the whole layer
        what = "expert GEMMs" if col(r, "expert_TFLOP/s") is not None else "whole layer"
        name = impl + f" ({what}" + (f", {r['routing']} routing)" if r.get("routing") else ")")
        cur = series.setdefault(name, {}).get(k)
        if cur is None or t > cur[0]:
            series[name][k] = (t, col(r, *tf))
        # minfer bench moe also times the other expert paths on the same data
        for alt, alt_name in (("wgmma_TFLOP/s", "minfer-wgmma"), ("grouped_TFLOP/s", "cublas-grouped")):
            v = col(r, alt)
            if v:
                aname = alt_name + name[len(impl):]
                cur = series.setdefault(aname, {}).get(k)
                if cur is None or t > cur[0]:
                    series[aname][k] = (t, v)
        d = col(r, "dense_tflops", "dense_TFLOP/s")
        if d:
            dense[k] = max(dense.get(k, (0, 0)), (t, d))
    for name in sorted(series):
        pts = sorted((idx[k], v[1]) for k, v in series[name].items())
        base = name.split(" ")[0]
        ax.plot(*zip(*pts), marker="o" if base.startswith("minfer") else ".", label=name,
                color=color_for(base), linestyle=":" if "zipf" in name else "-",
                linewidth=2 if base.startswith("minfer") else 1.2)
    if dense:
        pts = sorted((idx[k], v[1]) for k, v in dense.items())
        ax.plot(*zip(*pts), color="black", linestyle="--", linewidth=1.2, marker="_",
                label="dense bf16 GEMM of the same FLOPs (measured)")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"E={int(e)}\nk={int(k) if k else '?'}" for e, k in keys])
    ax.set_xlabel("experts × top-k")
    ax.set_ylabel("TFLOP/s (FLOPs of the expert GEMMs, 2·T·k·3·H·I)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title(f"MoE expert layer, prefill{f', hidden {int(hidden)}' if hidden else ''}: TFLOP/s vs experts × top-k"
                 f"\n{provenance(rows)}")
    save(fig, out, "moe.png", made)
    plt.close(fig)


# ---- model ----------------------------------------------------------------------------------------------

def plot_model(results, out, made):
    rows = [r for r in load(results, "model_peers*.csv") if r.get("status", "ok") == "ok"]
    if not rows:
        warn("model_*.png skipped: no model_peers*.csv with status ok rows in " + results)
        return
    plt = plt_module()
    for cfg in sorted({r.get("config") for r in rows}):
        cr = [r for r in rows if r.get("config") == cfg]
        if len({col(r, "batch") for r in cr}) < 2:
            warn(f"model_{cfg}.png skipped: one batch size only")
            continue
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        panels = [(axes[0][0], "prefill_tok_s", "prefill tokens/s (batch·seq / p50)", "prefill throughput"),
                  (axes[0][1], "decode_tok_s", "decode tokens/s (all sequences)", "decode throughput"),
                  (axes[1][0], "prefill_ms_p50", "prefill latency p50 (ms)", "prefill latency"),
                  (axes[1][1], "decode_ms_step", "decode ms per step", "decode latency")]
        impls = sorted({r.get("impl") for r in cr})
        seqs = sorted({col(r, "seq") for r in cr})
        styles = ["-", "--", "-.", ":"]
        for ax, key, ylabel, title in panels:
            for impl in impls:
                # the newest commit of each implementation
                ir = [r for r in cr if r.get("impl") == impl]
                head = latest_commit(ir)
                for si, s in enumerate(seqs):
                    newest = {}  # a case measured twice: its newest row
                    for r in sorted(ir, key=lambda r: r.get("date", "")):
                        if r["_commit"] == head and col(r, "seq") == s and col(r, key) is not None:
                            newest[col(r, "batch")] = col(r, key)
                    pts = sorted(newest.items())
                    if not pts:
                        continue
                    ax.plot(*zip(*pts), marker="o", linestyle=styles[si % len(styles)],
                            color=color_for(impl), linewidth=2 if impl.startswith("minfer") else 1.2,
                            label=f"{impl} @ {head}, seq {int(s)}")
            ax.set_xscale("log", base=2)
            bs = sorted({col(r, "batch") for r in cr})
            ax.set_xticks(bs)
            ax.set_xticklabels([str(int(b)) for b in bs])
            ax.minorticks_off()
            ax.set_xlabel("batch (sequences)")
            ax.set_ylabel(ylabel)
            ax.set_yscale("log")
            ax.set_title(title)
        h, lab = axes[0][0].get_legend_handles_labels()
        fig.legend(h, lab, loc="lower center", ncol=min(4, len(lab)), bbox_to_anchor=(0.5, -0.02))
        fig.suptitle(f"Model '{cfg}' (synthetic weights, bf16): minfer vs HF transformers — {provenance(cr)}")
        fig.tight_layout(rect=(0, 0.06 + 0.025 * ((len(lab) - 1) // 4), 1, 0.96))
        save(fig, out, f"model_{cfg}.png", made)
        plt.close(fig)


def plot_profile(results, out, made):
    rows = load(results, "model_profile*.csv")
    rows = [r for r in rows if col(r, "ms") is not None and r.get("phase") in ("prefill", "decode")]
    if not rows:
        warn("profile.png skipped: no model_profile*.csv (minfer bench model --profile) in " + results)
        return
    head = latest_commit(rows)
    rows = [r for r in rows if r["_commit"] == head]
    bench_id = sorted({r.get("bench", "") for r in rows})[0]  # one model/batch/seq per plot
    rows = [r for r in rows if r.get("bench", "") == bench_id]
    plt = plt_module()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    paths = sorted({r.get("attn") or "?" for r in rows})
    for ax, phase in zip(axes, ("prefill", "decode")):
        pr = [r for r in rows if r["phase"] == phase]
        if not pr:
            ax.set_title(f"{phase}: not measured")
            continue
        tot = {(r.get("attn") or "?"): col(r, "ms") for r in pr if r.get("kind") == "total"}
        pr = [r for r in pr if r.get("kind", "op") in ("op", "")]  # not the family sums or the total
        top = {}
        for r in pr:
            top[r["op"]] = max(top.get(r["op"], 0), col(r, "ms"))
        ops = sorted(top, key=top.get)[-12:]
        hgt = 0.8 / len(paths)
        for i, path in enumerate(paths):
            ms = {r["op"]: col(r, "ms") for r in pr if (r.get("attn") or "?") == path}
            total = tot.get(path, sum(ms.values()))
            ax.barh([k + i * hgt for k in range(len(ops))], [ms.get(o, 0) for o in ops], height=hgt,
                    label=f"attn={path} (all ops {total:.2f} ms)")
        ax.set_yticks([k + 0.4 - hgt / 2 for k in range(len(ops))])
        ax.set_yticklabels(ops, fontsize=7)
        ax.set_xlabel("ms (CUDA events per op, one pass)")
        ax.set_title(f"{phase}: the 12 largest ops")
        ax.legend(loc="lower right")
    fig.suptitle(f"Where the time goes: {bench_id} — {provenance(rows)}")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, out, "profile.png", made)
    plt.close(fig)


# ---- roofline -------------------------------------------------------------------------------------------

def model_matmul_params(cfg):
    c = CONFIGS[cfg]
    h, f = c["hidden"], c["ffn"]
    mlp = (3 if c["gated"] else 2) * h * f
    return c["layers"] * (2 * h * h + 2 * h * c["kv"] + mlp) + c["vocab"] * h


def roofline_points(results):
    """(label, group, FLOP/byte, TFLOP/s, row) for every row with a FLOP and byte count."""
    pts = []
    # softmax: bytes = MB_moved (minfer) or 4 B/element (peers), FLOP by convention
    for r in load(results, "softmax_minfer_bench.csv"):
        us, mb = col(r, "p50_us"), col(r, "MB_moved")
        n = (col(r, "batch") or 0) * (col(r, "heads") or 0) * (col(r, "q_len") or 0) * (col(r, "k_len") or 0)
        if us and mb and n:
            fl = SOFTMAX_FLOP_PER_ELEM * n
            pts.append(("softmax (minfer)", "softmax", fl / (mb * 1e6), fl / (us * 1e-6) / 1e12, r))
    for r in attn_rows(results):
        if r["_tflops"] and r["_gbps"]:
            grp = "attention decode" if r["_phase"] == "decode" else "attention prefill"
            pts.append((f"{grp} ({r['_impl']})", grp, r["_tflops"] * 1e3 / r["_gbps"], r["_tflops"], r))
    for r in load(results, "moe*.csv"):
        t, g = col(r, "tflops", "TFLOP/s", "expert_TFLOP/s"), col(r, "gbps", "GB/s", "weight_GB/s")
        if t and g:
            pts.append((f"MoE ({text(r, 'impl', 'kernel', default='minfer')})", "moe", t * 1e3 / g, t, r))
    # model forwards: 2 FLOP per matmul weight per token (attention FLOPs not counted), bytes =
    # the bf16 weights once per forward (decode: per step; the KV cache not counted)
    for r in load(results, "model_peers*.csv"):
        cfg = r.get("config")
        if cfg not in CONFIGS or r.get("status", "ok") != "ok" or r.get("dtype", "bf16") != "bf16":
            continue
        p = model_matmul_params(cfg)
        b, s = col(r, "batch"), col(r, "seq")
        pre, dec = col(r, "prefill_ms_p50"), col(r, "decode_ms_step")
        impl = r.get("impl", "?")
        if pre and b and s:
            fl = 2.0 * p * b * s
            pts.append((f"model prefill ({impl})", "model prefill", fl / (2.0 * p), fl / (pre * 1e-3) / 1e12, r))
        if dec and b:
            fl = 2.0 * p * b
            pts.append((f"model decode ({impl})", "model decode", fl / (2.0 * p), fl / (dec * 1e-3) / 1e12, r))
    return pts


def plot_roofline(results, out, made):
    pts = roofline_points(results)
    if not pts:
        warn("roofline.png skipped: no CSV rows with FLOP and byte counts in " + results)
        return
    rows = [p[4] for p in pts]
    devs = {r["_device"] for r in rows}
    cp = copy_ceiling([r for r in load(results, "*.csv") if r["_device"] in devs])
    gm = gemm_ceiling(results, devs)
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    markers = {"softmax": "s", "attention prefill": "^", "attention decode": "v", "moe": "D",
               "model prefill": "o", "model decode": "P"}
    for lab in sorted({p[0] for p in pts}):
        ps = [p for p in pts if p[0] == lab]
        ax.scatter([p[2] for p in ps], [p[3] for p in ps], s=22, marker=markers.get(ps[0][1], "o"),
                   label=f"{lab} ({len(ps)})", alpha=0.8)
    xs = [p[2] for p in pts]
    lo, hi = min(xs) / 2, max(xs) * 2
    if cp:
        top = gm[0] if gm else None
        ridge = top * 1e3 / cp if top else hi
        x = [lo, min(ridge, hi)] if top else [lo, hi]
        ax.plot(x, [v * cp / 1e3 for v in x], color="black", linestyle=":", linewidth=1.2)
        xm = math.sqrt(x[0] * x[1])
        ax.annotate(f"copy bandwidth {cp:.0f} GB/s", xy=(xm, xm * cp / 1e3), xytext=(6, -10),
                    textcoords="offset points", fontsize=7, ha="left", va="top")
    if gm:
        ax.axhline(gm[0], color="black", linestyle="--", linewidth=1.2)
        ax.annotate(f"GEMM ceiling {gm[0]:.3g} TFLOP/s (measured, {gm[1]} @ {gm[2]})", xy=(hi, gm[0]),
                    ha="right", va="bottom", fontsize=7)
    else:
        ax.annotate("compute ceiling: not measured in these CSVs (GEMM row missing)", xy=(0.99, 0.98),
                    xycoords="axes fraction", ha="right", va="top", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title("Roofline: every measured kernel and forward pass\n" + provenance(rows) +
                 f"\nsoftmax: {SOFTMAX_FLOP_PER_ELEM:g} FLOP/element by convention; models: 2 FLOP per matmul "
                 "weight per token, weights read once per forward", fontsize=8)
    save(fig, out, "roofline.png", made)
    plt.close(fig)


PLOTS = {"softmax": plot_softmax, "attention": plot_attention, "decode": plot_decode, "moe": plot_moe,
         "model": plot_model, "profile": plot_profile, "roofline": plot_roofline}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "plots"))
    ap.add_argument("--only", help="comma-separated, of: " + ", ".join(PLOTS))
    ap.add_argument("--device", help="the device whose rows are drawn (default: that of the newest minfer bench row)")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device or newest_device(a.results)
    if DEVICE:
        print(f"plot: rows of {DEVICE}")
    try:
        plt_module()
    except ImportError:
        warn("matplotlib is not installed (pip install matplotlib); no plots")
        return 1
    os.makedirs(a.out, exist_ok=True)
    made = []
    for name in (a.only.split(",") if a.only else PLOTS):
        if name not in PLOTS:
            warn(f"unknown plot {name!r} (of: {', '.join(PLOTS)})")
            return 2
        PLOTS[name](a.results, a.out, made)
    print(f"plot: {len(made)} plot(s) in {os.path.relpath(a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
