"""bench/report.py: the REPORT.md result tables generated from docs/results CSVs.

Synthetic CSVs in a temporary results folder (the same columns the benches
write): the marked regions are replaced, the text around them is kept, a
table without rows says "not measured yet", the newest commit wins, ratios
are computed from the CSV values, an unknown region name is an error, and
the committed REPORT.md's regions all have a generator.
"""

import csv
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import report  # noqa: E402


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def attn_row(commit, date, tflops, wgmma, causal="causal"):
    return {"case": "prefill", "batch": "4", "heads": "32", "kv_heads": "32", "q_len": "4096", "k_len": "4096",
            "head_dim": "128", "mask": causal, "dtype": "bf16", "p50_us": "1000", "TFLOP/s": str(tflops),
            "GB/s": "", "%copy": "", "splits": "-", "device": "NVIDIA H100 80GB HBM3", "copy_GB/s": "3000",
            "date": date, "path": "prefill", "wgmma_p50_us": "500", "wgmma_TFLOP/s": str(wgmma), "commit": commit}


@pytest.fixture
def results(tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    write(res / "attention_minfer_bench.csv", [attn_row("aaaaaaa", "2026-11-20", 100.0, 200.0),
                                               attn_row("bbbbbbb", "2026-11-24", 300.0, 450.0)])
    peer = {"case": "prefill", "impl": "sdpa_flash", "batch": "4", "heads": "32", "kv_heads": "32", "q_len": "4096",
            "k_len": "4096", "head_dim": "128", "causal": "1", "dtype": "bf16", "p50_us": "1", "tflops": "300",
            "gbps": "", "device": "NVIDIA H100 80GB HBM3", "commit": "bbbbbbb", "date": "2026-11-24"}
    write(res / "attention.csv", [peer, dict(peer, impl="sdpa_cudnn", tflops="600")])
    write(res / "ceilings.csv", [{"device": "NVIDIA H100 80GB HBM3", "commit": "bbbbbbb", "date": "2026-11-24",
                                  "ceiling": "gemm_bf16", "value": "750", "unit": "TFLOP/s", "shape": "",
                                  "source": "test"}])
    return str(res)


def test_attention_table_newest_commit_and_ratios(results):
    t = report.t_attention(results)
    assert "commit bbbbbbb" in t and "aaaaaaa" not in t
    line = next(ln for ln in t.splitlines() if ln.startswith("| 4×32×4096"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # default 300 (prefill), wgmma 450, flash 300, cuDNN 600: best 450 -> 1.50x flash, 0.75x cuDNN, 60% of 750
    assert cells[1:] == ["300.0 (prefill)", "450.0", "300.0", "600.0", "1.50×", "0.75×", "60%"]


def test_gemm_ceiling_of_the_same_run_wins(results):
    # rows that carry the GEMM ceiling their own run measured use it, not ceilings.csv's
    path = os.path.join(results, "attention_minfer_bench.csv")
    write(path, [dict(attn_row("ccccccc", "2026-11-25", 300.0, 450.0), **{"gemm_TFLOP/s": "900"})])
    t = report.t_attention(results)
    line = next(ln for ln in t.splitlines() if ln.startswith("| 4×32×4096"))
    assert line.rstrip(" |").endswith("50%") and "GEMM ceiling 900 TFLOP/s (measured by the same runs" in t


def test_peers_only_from_the_same_device(results):
    # a CPU rehearsal's minfer rows are never set beside the H100 peers
    path = os.path.join(results, "attention_minfer_bench.csv")
    write(path, [dict(attn_row("ccccccc", "2026-11-25", 0.1, ""), device="AMD EPYC, 2 threads (cpu)")])
    t = report.t_attention(results)
    line = next(ln for ln in t.splitlines() if ln.startswith("| 4×32×4096"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:7] == ["–", "–", "–", "–"] and "H100" not in t


def test_empty_tables_say_not_measured(results):
    for name in ("decode", "moe", "model", "ncu"):
        assert report.TABLES[name](results) is None


def test_fill_replaces_only_marked_regions(results, tmp_path):
    rep = tmp_path / "REPORT.md"
    rep.write_text("before\n<!-- report:attention -->\nold\n<!-- /report:attention -->\nmiddle\n"
                   "<!-- report:moe -->\nold moe\n<!-- /report:moe -->\nafter\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "report.py"), "--results", results, "--report",
                        str(rep)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = rep.read_text()
    assert out.startswith("before\n<!-- report:attention -->\n| B×H×S")
    assert "\nmiddle\n" in out and out.endswith("after\n")
    assert "old" not in out
    assert "<!-- report:moe -->\n" + report.NOT_YET + "\n<!-- /report:moe -->" in out
    again = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "report.py"), "--results", results,
                            "--report", str(rep)], capture_output=True, text=True)
    assert again.returncode == 0 and rep.read_text() == out  # idempotent


def test_unknown_region_is_an_error(results, tmp_path):
    rep = tmp_path / "REPORT.md"
    rep.write_text("<!-- report:nosuch -->\nx\n<!-- /report:nosuch -->\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "report.py"), "--results", results, "--report",
                        str(rep)], capture_output=True, text=True)
    assert r.returncode == 2 and "nosuch" in r.stderr
    assert rep.read_text() == "<!-- report:nosuch -->\nx\n<!-- /report:nosuch -->\n"


def test_committed_report_regions_are_known():
    with open(os.path.join(ROOT, "docs", "REPORT.md")) as f:
        names = re.findall(r"<!-- report:([a-z]+) -->", f.read())
    assert names and set(names) <= set(report.TABLES)
