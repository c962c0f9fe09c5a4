"""docs/results/*.csv -> the result tables of docs/REPORT.md, in place.

    python3 bench/report.py                      # rewrite REPORT.md's marked regions
    python3 bench/report.py --print              # print the tables instead
    python3 bench/report.py --results DIR --report FILE

REPORT.md marks each generated table with a pair of HTML comments,
<!-- report:NAME --> ... <!-- /report:NAME -->; everything between them is
replaced, everything outside is left alone. Tables (NAME):
  softmax     minfer bench softmax (causal grid, p50, % of copy) beside our Triton kernel
  attention   prefill TFLOP/s per shape: minfer's default path, the sm_90a kernel
              (wgmma_TFLOP/s), SDPA flash and cuDNN, ratios, % of the GEMM ceiling measured in the same run
  decode      decode GB/s and % of copy beside SDPA flash
  moe         expert GEMM TFLOP/s (default path, wgmma, grouped) beside the torch peers
  model       minfer bench model: prefill and decode per attention path, HF beside
  ncu         DRAM throughput, occupancy, tensor-pipe use, DRAM bytes per profiled kernel
Every table takes the newest commit that has rows for it (minfer's and the peers'
separately) and says device, commit, date and the command under it; a table
without rows says "(not measured yet: produced by scripts/gpu-bench.sh)".
Numbers come from the CSVs only: nothing is typed in.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot import ROOT, attn_rows, col, gemm_ceiling, latest_commit, load, provenance, text  # noqa: E402

NOT_YET = "(not measured yet: produced by scripts/gpu-bench.sh)"


def newest(rows):
    """The rows of the newest commit among rows."""
    if not rows:
        return []
    c = latest_commit(rows)
    return [r for r in rows if r["_commit"] == c]


def on_devices_of(rows, mine):
    """rows measured on a device that minfer's rows were measured on: a table never
    sets two devices side by side (a CPU rehearsal beside H100 peers, or two GPUs)."""
    devs = {r["_device"] for r in mine}
    return [r for r in rows if r["_device"] in devs]


def f(v, prec=1):
    return "–" if v is None else f"{v:.{prec}f}"


def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def source(rows, command):
    return f"*{provenance(rows)}; `{command}`.*"


def finish(header, rows, mine, command, peers=(), peer_command=""):
    """The table, then where minfer's rows (and the peers', if any) came from."""
    out = table(header, rows) + "\n\n" + source(mine, command)
    return out + (" " + source(peers, peer_command) if peers else "")


# ---- the tables ------------------------------------------------------------------------------------

def t_softmax(res):
    mine = newest([r for r in load(res, "softmax_minfer_bench*.csv") if r.get("case") == "grid"])
    if not mine:
        return None
    peers = newest(on_devices_of([r for r in load(res, "softmax_peers*.csv") if r.get("case") == "grid"], mine))
    tri = {}
    for r in peers:
        if r.get("impl") == "triton":
            tri[(r.get("batch"), r.get("heads"), r.get("q_len"), r.get("k_len"), r.get("mask"))] = col(r, "p50_us")
    rows = []
    for r in mine:
        k = (r.get("batch"), r.get("heads"), r.get("q_len"), r.get("k_len"), r.get("mask"))
        t = tri.get(k)
        rows.append([f"{k[0]}×{k[1]}×{k[2]}×{k[3]} {k[4]}", f"{f(col(r, 'p50_us'))} µs ({r.get('kernel', '')})",
                     f(col(r, "%copy"), 0) + "%", f(t) + " µs" if t else "–", ratio(t, col(r, "p50_us"))])
    return finish(["shape b×h×q×k, mask", "minfer p50", "% of copy", "our Triton kernel p50",
                   "minfer speed / Triton"], rows, mine, "build/minfer bench softmax --csv", peers,
                  "python3 bench/softmax_peers.py")


def shape_key(r):
    return (int(col(r, "batch") or 0), int(col(r, "heads") or 0), int(r["_q"] or 0), int(r["_d"] or 0),
            bool(r["_causal"]))


def t_attention(res):
    rows = attn_rows(res)
    mine = newest([r for r in rows if r["_file"].startswith("attention_minfer_bench") and r["_phase"] == "prefill"
                   and r["_impl"] == "minfer"])
    if not mine:
        return None
    peers = newest(on_devices_of([r for r in rows if not r["_file"].startswith("attention_minfer_bench")], mine))
    peer = {}
    for r in peers:
        if r["_phase"] == "prefill" and r["_tflops"]:
            peer[(r["_impl"],) + shape_key(r)] = r["_tflops"]
    # the GEMM ceiling: the one each row's run measured (minfer bench, since b192e6f), else any on record
    own = [col(r, "gemm_TFLOP/s") for r in mine if col(r, "gemm_TFLOP/s")]
    gm = (max(own), "measured by the same runs", latest_commit(mine)) if own else \
        gemm_ceiling(res, {r["_device"] for r in mine})
    out_rows = []
    for r in sorted(mine, key=shape_key):
        k = shape_key(r)
        base, wg = r["_tflops"], col(r, "wgmma_TFLOP/s")
        best = max(v for v in (base, wg) if v is not None) if (base or wg) else None
        fl, cu = peer.get(("sdpa_flash",) + k), peer.get(("sdpa_cudnn",) + k)
        ceil = col(r, "gemm_TFLOP/s") or (gm[0] if gm else None)
        out_rows.append([f"{k[0]}×{k[1]}×{k[2]}, d{k[3]}, {'causal' if k[4] else 'none'}",
                         f"{f(base)} ({text(r, 'path') or '?'})", f(wg), f(fl), f(cu), ratio(best, fl),
                         ratio(best, cu), f(100 * best / ceil, 0) + "%" if best and ceil else "–"])
    out = finish(["B×H×S, D, mask", "minfer TFLOP/s (path)", "minfer sm_90a (wgmma)", "SDPA flash", "SDPA cuDNN",
                  "best minfer / flash", "best minfer / cuDNN", "% of the GEMM ceiling"], out_rows, mine,
                 "build/minfer bench attention --format csv", peers, "python3 bench/attention_peers.py")
    if gm:
        out += f" *GEMM ceiling {gm[0]:.3g} TFLOP/s ({gm[1]}, commit {gm[2]}).*"
    return out


def t_decode(res):
    rows = attn_rows(res)
    mine = newest([r for r in rows if r["_file"].startswith("attention_minfer_bench") and r["_phase"] == "decode"])
    if not mine:
        return None
    peers = newest(on_devices_of([r for r in rows if not r["_file"].startswith("attention_minfer_bench")
                                  and r["_phase"] == "decode"], mine))
    fl = {(int(col(r, "batch") or 0), int(r["_k"] or 0)): r["_gbps"] for r in peers if r["_impl"] == "sdpa_flash"}
    out_rows = []
    for r in sorted(mine, key=lambda r: (col(r, "batch") or 0, r["_k"] or 0)):
        k = (int(col(r, "batch") or 0), int(r["_k"] or 0))
        out_rows.append([f"{k[0]} × {k[1]}", f(r["_gbps"]), f(col(r, "%copy"), 0) + "%",
                         text(r, "splits", default="–"), f(fl.get(k)), ratio(r["_gbps"], fl.get(k))])
    return finish(["batch × context", "minfer GB/s", "% of copy", "splits", "SDPA flash GB/s", "minfer / flash"],
                  out_rows, mine, "build/minfer bench attention --cases decode --format csv", peers,
                  "python3 bench/attention_peers.py")


def moe_key(r):
    return (text(r, "mode"), text(r, "routing", default="even"), int(col(r, "experts") or 0),
            int(col(r, "top_k") or 0), int(col(r, "hidden") or 0), int(col(r, "tokens") or 0))


def t_moe(res):
    mine = newest(load(res, "moe_minfer_bench*.csv"))
    if not mine:
        return None
    peers = newest(on_devices_of([r for r in load(res, "moe*.csv") if not r["_file"].startswith("moe_minfer_bench")],
                                 mine))
    best_peer = {}
    for r in peers:
        k = moe_key(r)[:1] + moe_key(r)[2:]  # the peers have no routing column
        v = col(r, "tflops", "TFLOP/s")
        if v and r.get("impl") not in ("dense", "hf_loop") and (k not in best_peer or v > best_peer[k][0]):
            best_peer[k] = (v, r.get("impl", "?"))
    out_rows = []
    for r in sorted(mine, key=moe_key):
        k = moe_key(r)
        bp = best_peer.get(k[:1] + k[2:])
        out_rows.append([f"{k[0]}, {k[1]}, E{k[2]} top-{k[3]}, H{k[4]}, T{k[5]}",
                         f"{f(col(r, 'expert_TFLOP/s'))} ({text(r, 'experts_path') or '?'})",
                         f(col(r, "wgmma_TFLOP/s")), f(col(r, "grouped_TFLOP/s")), f(col(r, "dense_TFLOP/s")),
                         f(col(r, "%dense"), 0) + "%", f"{f(bp[0])} ({bp[1]})" if bp else "–",
                         f(col(r, "overhead_%"), 0) + "%"])
    return finish(["mode, routing, experts, hidden, tokens", "expert GEMMs TFLOP/s (path)", "sm_90a wgmma",
                   "cuBLAS grouped", "dense GEMM", "% of dense", "best torch peer", "router+permute+combine"],
                  out_rows, mine, "build/minfer bench moe --format csv", peers, "python3 bench/moe_peers.py")


def t_model(res):
    mine = newest([r for r in load(res, "model_minfer_bench*.csv") if r.get("fwd_ms") or r.get("dec_tok/s")])
    if not mine:
        return None
    hf = {}
    for r in newest(on_devices_of([r for r in load(res, "model_peers*.csv") if r.get("impl", "").startswith("hf")],
                                  mine)):
        k = (text(r, "config"), int(col(r, "batch") or 0), int(col(r, "seq") or 0))
        if r.get("impl") == "hf_sdpa" or k not in hf:
            hf[k] = (col(r, "prefill_ms_p50"), col(r, "decode_tok_s"), r.get("impl"))
    out_rows = []
    for r in sorted(mine, key=lambda r: (text(r, "model"), text(r, "attn"), col(r, "batch") or 0, col(r, "seq") or 0)):
        k = (text(r, "model"), int(col(r, "batch") or 0), int(col(r, "seq") or 0))
        h = hf.get(k)
        out_rows.append([f"{k[0]} {k[1]}×{k[2]}", text(r, "attn"), f(col(r, "fwd_ms"), 2),
                         f(col(r, "dec_tok/s"), 0), f(col(r, "%roof"), 0) + "%",
                         f"{f(h[0], 2)} / {f(h[1], 0)} ({h[2]})" if h else "–"])
    return finish(["model batch×seq", "attention", "prefill ms", "decode tokens/s", "% of roofline",
                   "HF prefill ms / decode tokens/s"], out_rows, mine,
                  "build/minfer bench model --synthetic CFG --attn ATTN --format csv")


NCU_METRICS = (("DRAM %", ("DRAM Throughput",)), ("occupancy %", ("Achieved Occupancy",)),
               ("tensor pipe %", ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                                  "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")),
               ("DRAM MB", ("dram__bytes_read.sum", "dram__bytes_write.sum")))
UNIT_MB = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}


def t_ncu(res):
    rows = newest(load(res, "ncu*.csv"))
    if not rows:
        return None
    per = {}  # (case, kernel) -> {label: value}; the first launch of each kernel in a case
    first = {}
    for r in rows:
        kern = re.sub(r"^void\s+", "", re.sub(r"\(.*$", "", text(r, "kernel"))).split("<")[0].split("::")[-1]
        key = (text(r, "case"), kern)
        first.setdefault(key, text(r, "launch"))
        if text(r, "launch") != first[key]:
            continue
        d = per.setdefault(key, {})
        for label, names in NCU_METRICS:
            if text(r, "metric") in names:
                v = col(r, "value")
                if v is None:
                    continue
                if label == "DRAM MB":
                    v *= UNIT_MB.get(text(r, "unit"), 1e-6)
                    d[label] = d.get(label, 0.0) + v
                else:
                    d[label] = max(d.get(label, v), v)
    out_rows = [[c, k] + [f(per[(c, k)].get(lab)) for lab, _ in NCU_METRICS] for c, k in sorted(per)]
    return finish(["case", "kernel"] + [lab for lab, _ in NCU_METRICS], out_rows, rows,
                  "ncu --clock-control none (scripts/gpu-bench.sh)")


TABLES = {"softmax": t_softmax, "attention": t_attention, "decode": t_decode, "moe": t_moe, "model": t_model,
          "ncu": t_ncu}


def fill(report, tables):
    """report text with every marked region's body replaced; unknown names are an error."""
    def sub(m):
        name = m.group(1)
        if name not in tables:
            raise KeyError(name)
        return f"<!-- report:{name} -->\n{tables[name]}\n<!-- /report:{name} -->"
    return re.sub(r"<!-- report:([a-z]+) -->.*?<!-- /report:\1 -->", sub, report, flags=re.S)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(ROOT, "docs", "results"))
    ap.add_argument("--report", default=os.path.join(ROOT, "docs", "REPORT.md"))
    ap.add_argument("--print", action="store_true", help="print the tables, write nothing")
    a = ap.parse_args()
    tables = {name: (fn(a.results) or NOT_YET) for name, fn in TABLES.items()}
    if a.print:
        for name, t in tables.items():
            print(f"## {name}\n\n{t}\n")
        return 0
    with open(a.report) as fh:
        old = fh.read()
    try:
        new = fill(old, tables)
    except KeyError as e:
        print(f"report: {a.report} marks an unknown table {e} (known: {', '.join(TABLES)})", file=sys.stderr)
        return 2
    if new != old:
        with open(a.report, "w") as fh:
            fh.write(new)
    found = re.findall(r"<!-- report:([a-z]+) -->", new)
    measured = [n for n in found if tables[n] != NOT_YET]
    print(f"report: {len(found)} table(s) in {os.path.relpath(a.report)}, {len(measured)} with measurements"
          f"{': ' + ', '.join(measured) if measured else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
