"""The committed torch fixture of the brief's post-norm MoE model (tests/fixtures/synthetic/).

tests/test_torch_ref.c (CTest torch_ref) compares minfer's logits with it and needs no torch.
Here: the fixture is self-consistent (always), and, when torch is installed, recomputing it
live from minfer's current synthetic weights and tests/fixtures/torch_moe_postnorm.py gives
the committed numbers, so that the fixture cannot go stale silently (e.g. after a change to
the synthetic weight generator or to the preset).
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXDIR = REPO / "tests" / "fixtures"
FIX = FIXDIR / "synthetic" / "tiny-moe-postnorm"


def _expected():
    with open(FIX / "expected.json") as f:
        exp = json.load(f)
    return exp, np.load(FIX / "logits.npy"), np.load(FIX / "batch_logits.npy")


def _tool():
    """tests/synthetic_weights in the build the library comes from (or $MINFER_SYNTHETIC_WEIGHTS)."""
    cands = [os.environ.get("MINFER_SYNTHETIC_WEIGHTS")]
    if os.environ.get("MINFER_LIB"):
        cands.append(str(Path(os.environ["MINFER_LIB"]).parent / "tests" / "synthetic_weights"))
    cands.append(str(REPO / "build" / "tests" / "synthetic_weights"))
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


def test_fixture_consistent():
    exp, logits, batch = _expected()
    n = len(exp["prompt_ids"])
    assert exp["seq_ids"] == exp["prompt_ids"] + exp["greedy"]["ids"]
    assert logits.dtype == np.float32 and logits.shape == (len(exp["seq_ids"]), 512)
    assert batch.dtype == np.float32 and batch.shape == (sum(exp["batch"]["lengths"]), 512)
    assert [len(b) for b in exp["batch"]["ids"]] == exp["batch"]["lengths"]
    for i, t in enumerate(exp["greedy"]["ids"]):
        row = logits[n - 1 + i].astype(np.float64)
        top = np.sort(row)[-2:]
        assert int(row.argmax()) == t
        assert abs((top[1] - top[0]) - exp["greedy"]["margins"][i]) < 1e-6
    assert np.isfinite(logits).all() and np.isfinite(batch).all()
    # The bound the C test uses is far above f32 rounding and the choices are no near-ties.
    assert exp["tolerance"] == 1e-4 and exp["f64_max_rel_err"] < 1e-5
    assert exp["router_min_gap"] > 1e-4 and exp["greedy"]["min_margin"] > 1e-3


def test_fixture_recomputed_live(tmp_path):
    """torch present: minfer's weights now + the torch model == the committed fixture."""
    torch = pytest.importorskip("torch")
    tool = _tool()
    if tool is None:
        pytest.skip("tests/synthetic_weights not built (cmake --build build --target synthetic_weights)")
    sys.path.insert(0, str(FIXDIR))
    import make_synthetic_fixtures as mk

    exp, logits, batch = _expected()
    threads = torch.get_num_threads()
    try:
        path = str(tmp_path / "model.safetensors")
        sha = mk.make_weights(tool, path)
        r = mk.compute(path)
    finally:
        torch.set_num_threads(threads)
    hint = (f"weights sha256 {sha} (fixture: {exp['weights_sha256']}); if minfer's synthetic weights or the "
            f"preset changed on purpose, rerun tests/fixtures/make_synthetic_fixtures.py")
    assert r["prompt"] == exp["prompt_ids"] and r["batch"] == exp["batch"]["ids"], "token ids changed"
    # Same weights and the same math: only torch versions' rounding may differ (~1e-7).
    e = mk.rows_rel_err(r["logits"], logits)
    eb = mk.rows_rel_err(r["batch_logits"], batch)
    assert e <= 1e-5 and eb <= 1e-5, f"live torch vs committed logits: {e:.2e}, batch {eb:.2e}; {hint}"
    assert r["ids"] == exp["greedy"]["ids"], hint


def test_reference_router_ties():
    """torch present: the reference's router sends tied experts' tokens to the lower index and
    renormalises the top-k weights (the conventions minfer's mf_moe documents)."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(FIXDIR))
    import torch_moe_postnorm as ref

    cfg = ref.Config(n_layers=1, hidden=4, n_heads=1, vocab=8, max_pos=8, n_experts=4, top_k=2, ffn=3)
    m = ref.PostNormMoE(cfg)
    g = torch.Generator().manual_seed(0)
    v = torch.tensor([1.0, 0.5, 0.25, 0.125])
    m.w = {"model.layers.0.moe.gate.weight": torch.stack([v, 2 * v, 2 * v, 2 * v])}  # 1, 2, 3 tie for x.v > 0
    for e in range(4):
        m.w[f"model.layers.0.moe.experts.{e}.fc1.weight"] = torch.randn(3, 4, generator=g)
        m.w[f"model.layers.0.moe.experts.{e}.fc2.weight"] = torch.randn(4, 3, generator=g)
    x = torch.tensor([[1.0, 2.0, 0.5, 1.0]])

    def expert(e):
        h = torch.nn.functional.gelu(x @ m.w[f"model.layers.0.moe.experts.{e}.fc1.weight"].T, approximate="tanh")
        return h @ m.w[f"model.layers.0.moe.experts.{e}.fc2.weight"].T

    want = 0.5 * expert(1) + 0.5 * expert(2)  # equal probabilities, renormalised over the two
    assert torch.allclose(m.moe(0, x), want, rtol=1e-6, atol=1e-6)
