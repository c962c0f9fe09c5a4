# The proof tooling end to end on real rows: `minfer bench` (CPU backend, tiny
# shapes) -> bench/results.py append -> bench/plot.py. The figures are the CPU's
# and not kept; what is checked is that the C benches' columns are the ones the
# results contract (docs/results/README.md) and the plots read, so that a GPU
# run's CSVs draw every plot. Needs the built CLI next to the library
# ($MINFER_LIB or build/) and matplotlib.
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def minfer_bin():
    lib = os.environ.get("MINFER_LIB")
    cand = [Path(lib).parent / "minfer"] if lib else []
    cand.append(REPO / "build" / "minfer")
    for c in cand:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    pytest.skip("no built minfer CLI (set MINFER_LIB to a build's libminfer.so)")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    pytest.importorskip("matplotlib")
    exe = minfer_bin()
    res = tmp_path_factory.mktemp("results")
    raw = tmp_path_factory.mktemp("raw")
    one = ["--backend", "cpu", "--warmup", "0", "--iters", "1", "--format", "csv"]
    runs = {
        "softmax_minfer_bench.csv": ["softmax", *one, "--variant", "fused", "--heads", "2", "--seq", "32,64"],
        "attention_minfer_bench.csv": ["attention", *one, "--heads", "2", "--head-dim", "64", "--seq", "16,32"],
        "moe_minfer_bench.csv": ["moe", *one, "--mode", "prefill", "--routing", "even", "--experts", "4,8",
                                 "--top-k", "2", "--hidden", "64", "--batch", "1"],
        "model_profile.csv": ["model", "--synthetic", "tiny", "--backend", "cpu", "--seq", "8", "--gen", "2",
                              "--iters", "1", "--profile", "--format", "csv"],
    }
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name, args in runs.items():
        p = subprocess.run([str(exe), "bench", *args], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, f"minfer bench {' '.join(args)}: {p.stderr[-800:]}"
        (raw / name).write_text(p.stdout)
        extra = ["--table", "1", "--set", "attn=flash"] if name == "model_profile.csv" else []
        q = subprocess.run([sys.executable, str(REPO / "bench" / "results.py"), "append", str(raw / name),
                            str(res / name), "--commit", "fallback", *extra], capture_output=True, text=True)
        assert q.returncode == 0, q.stderr
    return res


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_rows_name_the_build_commit_and_ceilings(results):
    for name in ("softmax_minfer_bench.csv", "attention_minfer_bench.csv", "moe_minfer_bench.csv"):
        rs = rows(results / name)
        assert rs, name
        for r in rs:
            # the bench's own commit wins over results.py's --commit
            assert r["commit"] and r["commit"] != "fallback", (name, r["commit"])
            assert r["device"] and r["date"] and float(r["copy_GB/s"]) > 0, name
    att = rows(results / "attention_minfer_bench.csv")
    assert {r["case"] for r in att} == {"prefill", "decode"}
    pre = [r for r in att if r["case"] == "prefill"]
    # --seq 16,32 x mask none,causal; %gemm = TFLOP/s over the GEMM ceiling measured first
    assert sorted((int(r["q_len"]), r["mask"]) for r in pre) == [(16, "causal"), (16, "none"), (32, "causal"),
                                                                  (32, "none")]
    for r in pre:
        assert float(r["%gemm"]) == pytest.approx(100 * float(r["TFLOP/s"]) / float(r["gemm_TFLOP/s"]), rel=0.05,
                                                  abs=0.1)
    moe = rows(results / "moe_minfer_bench.csv")
    assert sorted(int(r["experts"]) for r in moe) == [4, 8]


def test_every_plot_of_the_op_benches_is_drawn(results, tmp_path):
    out = tmp_path / "plots"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "plot.py"), "--results", str(results), "--out",
                        str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for png in ("softmax.png", "attention_d64.png", "decode.png", "moe.png", "profile.png", "roofline.png"):
        f = out / png
        assert f.is_file() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", (png, p.stderr)


def test_append_keeps_a_rows_commit_unless_unknown(tmp_path):
    src = tmp_path / "src.csv"
    src.write_text("case,p50_us,commit\na,1.0,abc1234\nb,2.0,unknown\nc,3.0,\n")
    dst = tmp_path / "dst.csv"
    q = subprocess.run([sys.executable, str(REPO / "bench" / "results.py"), "append", str(src), str(dst), "--commit",
                        "def5678", "--device", "GPU X"], capture_output=True, text=True)
    assert q.returncode == 0, q.stderr
    got = {r["case"]: r for r in rows(dst)}
    assert [got[c]["commit"] for c in "abc"] == ["abc1234", "def5678", "def5678"]
    assert all(got[c]["device"] == "GPU X" and got[c]["date"] for c in "abc")


def test_plots_draw_one_device(tmp_path):
    # the newest minfer bench row's device; peers of another device are left out
    sys.path.insert(0, str(REPO / "bench"))
    import plot

    (tmp_path / "softmax_minfer_bench.csv").write_text(
        "case,k_len,GB/s,device,commit,date\nsweep,128,1.0,NVIDIA H100 80GB HBM3 (132 SMs),aaaaaaa,2026-11-20\n"
        "sweep,128,0.1,AMD EPYC (cpu),bbbbbbb,2026-11-24\n")
    (tmp_path / "softmax_peers.csv").write_text(
        "impl,case,k_len,gbps,device,commit,date\ntriton,sweep,128,2.0,NVIDIA H100 80GB HBM3,aaaaaaa,2026-11-20\n")
    try:
        assert plot.newest_device(str(tmp_path)) == "AMD EPYC"
        plot.DEVICE = "AMD EPYC"
        assert plot.load(str(tmp_path), "softmax_peers.csv") == []
        assert [r["commit"] for r in plot.load(str(tmp_path), "softmax_minfer_bench.csv")] == ["bbbbbbb"]
        plot.DEVICE = "NVIDIA H100 80GB HBM3"
        assert len(plot.load(str(tmp_path), "softmax*.csv")) == 2
    finally:
        plot.DEVICE = None
