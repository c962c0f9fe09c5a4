#!/usr/bin/env python3
"""Small helpers of scripts/gpu-bench.sh for docs/results (Python standard library only,
except `ceilings`, which needs torch with CUDA).

    python3 bench/results.py append SRC DST --commit C [--device D] [--set K=V ...] [--table N]
        Append SRC's rows to DST (created if missing). Columns are the union of both
        headers, DST's first (a column DST lacked is empty in its old rows). device,
        commit and date are added when SRC lacks them (--device, --commit, now), so
        that every row says where, what and when. --table N takes the N-th CSV table
        of SRC (0-based; `minfer bench model --profile --format csv` prints two, the
        second starting at its own header line `bench,phase,op,...`). --set adds
        constant columns (e.g. attn=classic).

    python3 bench/results.py ncu SRC DST --case NAME --commit C [--device D]
        SRC: `ncu --import R.ncu-rep --csv --page details` output. Appends one tidy row
        per kernel launch and metric to DST: device, commit, date, case, launch, kernel,
        block, grid, section, metric, unit, value.

    python3 bench/results.py ceilings DST --commit C
        Measures the device-to-device copy (1 GiB, read + write counted) and a bf16
        cuBLAS GEMM (4096^3 and 8192^3) with torch, CUDA events, median of 20, and
        appends rows device, commit, date, ceiling, value, unit, shape, source.
"""

import argparse
import csv
import datetime
import io
import os
import sys


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_tables(text):
    """CSV tables in text: after a data row, a new table starts at a line `bench,phase,op,...`
    (the profile's header) or at any line of words only whose width differs from the
    current header's."""
    tables, cur = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = next(csv.reader([line]))
        after_data = len(cur) > 1
        new_header = cells[:3] == ["bench", "phase", "op"] or (
            all(_is_word(c) for c in cells) and len(cells) != len(cur[0]) if cur else False)
        if after_data and new_header:
            tables.append(cur)
            cur = []
        cur.append(cells)
    if cur:
        tables.append(cur)
    return tables


def _is_word(c):
    try:
        float(c)
        return False
    except ValueError:
        return bool(c) and c != "-"


def append_rows(dst, header, rows):
    """Appends dict rows to dst, rewriting it with the union header when columns are new."""
    old_head, old = [], []
    if os.path.exists(dst) and os.path.getsize(dst) > 0:
        with open(dst, newline="") as f:
            r = csv.DictReader(f)
            old_head = list(r.fieldnames or [])
            old = list(r)
    head = old_head + [c for c in header if c not in old_head]
    mode_rewrite = head != old_head or not old_head
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with open(dst, "w" if mode_rewrite else "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=head, lineterminator="\n", extrasaction="ignore")
        if mode_rewrite:
            w.writeheader()
            w.writerows(old)
        w.writerows(rows)
    return len(rows)


def cmd_append(a):
    with open(a.src, newline="") as f:
        tables = split_tables(f.read())
    if a.table >= len(tables) or len(tables[a.table]) < 2:
        print(f"results: {a.src}: no table {a.table} with rows; nothing appended", file=sys.stderr)
        return 1
    head, *body = tables[a.table]
    extra = dict(kv.split("=", 1) for kv in a.set)
    rows = []
    for cells in body:
        r = dict(zip(head, cells))
        if not r.get("device") and a.device:
            r["device"] = a.device
        if not r.get("commit") or (r["commit"] == "unknown" and a.commit):
            r["commit"] = a.commit  # a tool's own stamp wins, unless it could not tell
        if not r.get("date"):
            r["date"] = now()
        r.update(extra)
        rows.append(r)
    header = head + [c for c in ("device", "commit", "date") if c not in head] + list(extra)
    n = append_rows(a.dst, header, rows)
    print(f"results: {n} rows of {os.path.basename(a.src)} -> {a.dst}")
    return 0


def cmd_ncu(a):
    with open(a.src, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own ==PROF== lines are not CSV
    rows = []
    for r in csv.DictReader(io.StringIO("".join(lines))):
        rows.append({"device": a.device or r.get("Device", ""), "commit": a.commit, "date": now(), "case": a.case,
                     "launch": r.get("ID", ""), "kernel": r.get("Kernel Name", ""), "block": r.get("Block Size", ""),
                     "grid": r.get("Grid Size", ""), "section": r.get("Section Name", ""),
                     "metric": r.get("Metric Name", ""), "unit": r.get("Metric Unit", ""),
                     "value": (r.get("Metric Value", "") or "").replace(",", "")})
    if not rows:
        print(f"results: {a.src}: no ncu metric rows (no kernel matched?)", file=sys.stderr)
        return 1
    header = ["device", "commit", "date", "case", "launch", "kernel", "block", "grid", "section", "metric", "unit",
              "value"]
    n = append_rows(a.dst, header, rows)
    print(f"results: {n} ncu metric rows ({a.case}) -> {a.dst}")
    return 0


def cmd_ceilings(a):
    import torch
    if not torch.cuda.is_available():
        print("results: ceilings need torch with CUDA", file=sys.stderr)
        return 1
    dev = torch.cuda.get_device_name(0)

    def med_ms(fn, n=20):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        return sorted(ts)[len(ts) // 2]

    rows = []
    src = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = med_ms(lambda: dst.copy_(src))
    rows.append(dict(ceiling="copy", value=f"{2 * src.numel() * 2 / (ms * 1e-3) / 1e9:.0f}", unit="GB/s",
                     shape="1 GiB device-to-device (read + write)"))
    del src, dst
    for n in (4096, 8192):
        x = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        y = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        ms = med_ms(lambda: torch.matmul(x, y))
        rows.append(dict(ceiling="gemm_bf16", value=f"{2 * n ** 3 / (ms * 1e-3) / 1e12:.0f}", unit="TFLOP/s",
                         shape=f"{n}x{n}x{n}"))
        del x, y
    for r in rows:
        r.update(device=dev, commit=a.commit, date=now(),
                 source=f"bench/results.py ceilings (torch {torch.__version__}, CUDA events, median of 20)")
        print(f"results: {r['ceiling']} {r['shape']}: {r['value']} {r['unit']}")
    append_rows(a.dst, ["device", "commit", "date", "ceiling", "value", "unit", "shape", "source"], rows)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("append")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--commit", required=True)
    p.add_argument("--device", default="")
    p.add_argument("--table", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="K=V")
    p = sub.add_parser("ncu")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--case", required=True)
    p.add_argument("--commit", required=True)
    p.add_argument("--device", default="")
    p = sub.add_parser("ceilings")
    p.add_argument("dst")
    p.add_argument("--commit", required=True)
    a = ap.parse_args()
    return {"append": cmd_append, "ncu": cmd_ncu, "ceilings": cmd_ceilings}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
