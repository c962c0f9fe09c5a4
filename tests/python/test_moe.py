"""minfer.moe on the CPU against a numpy float64 reference (per token)."""
import numpy as np
import pytest

import minfer


def _ref(x, wr, w1, w2, k, ffn, score, order, renorm, scale, sw1=None, sw2=None, sg=None, res=None):
    x = x.astype(np.float64)
    T, H = x.shape
    E = wr.shape[0]
    out = np.zeros((T, H)) if res is None else res.astype(np.float64).copy()

    def f(xt, a, b):
        h = a.astype(np.float64) @ xt
        if ffn == "swiglu":
            g, u = np.split(h, 2)
            h = g / (1 + np.exp(-g)) * u
        else:
            h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
        return b.astype(np.float64) @ h

    for t in range(T):
        l = wr.astype(np.float64) @ x[t]
        sel = sorted(range(E), key=lambda e: (-l[e], e))[:k]  # ties to the lower index
        if score == "softmax":
            src = l if order == "score_topk" else l[sel]
            p = np.exp(src - src.max())
            p /= p.sum()
            w = p[sel] if order == "score_topk" else p
        else:
            w = 1 / (1 + np.exp(-l[sel]))
        if renorm:
            w = w / w.sum()
        w = w * scale
        for j, e in enumerate(sel):
            out[t] += w[j] * f(x[t], w1[e], w2[e])
        if sw1 is not None:
            g = 1.0 if sg is None else 1 / (1 + np.exp(-(sg.astype(np.float64) @ x[t])[0]))
            out[t] += g * f(x[t], sw1, sw2)
    return out


def _dyadic(rng, shape, m, q):
    return (rng.integers(-m * q, m * q + 1, size=shape) / q).astype(np.float32)


@pytest.mark.parametrize("E,k,ffn,score,order,renorm,shared", [
    (8, 2, "swiglu", "softmax", "score_topk", True, False),
    (8, 2, "gelu", "softmax", "topk_score", False, False),
    (60, 4, "swiglu", "softmax", "score_topk", False, True),
    (16, 8, "swiglu", "sigmoid", "score_topk", True, True),
    (1, 1, "gelu", "softmax", "score_topk", True, False),
])
def test_moe_matches_numpy(E, k, ffn, score, order, renorm, shared):
    rng = np.random.default_rng(E * 10 + k)
    T, H, I = 37, 24, 16
    x = _dyadic(rng, (T, H), 2, 8)       # exact logits in f32: routing equals the reference's
    wr = _dyadic(rng, (E, H), 1, 64)
    rows1 = 2 * I if ffn == "swiglu" else I
    w1 = (rng.standard_normal((E, rows1, H)) / np.sqrt(H)).astype(np.float32)
    w2 = (rng.standard_normal((E, H, I)) / np.sqrt(I)).astype(np.float32)
    res = rng.standard_normal((T, H)).astype(np.float32)
    sw1 = sw2 = sg = None
    if shared:
        sw1 = (rng.standard_normal((rows1 * 2, H)) / np.sqrt(H)).astype(np.float32)
        sw2 = (rng.standard_normal((H, sw1.shape[0] // (2 if ffn == "swiglu" else 1))) / np.sqrt(I)).astype(np.float32)
        sg = (rng.standard_normal((1, H)) / np.sqrt(H)).astype(np.float32)
    out = minfer.moe(x, wr, w1, w2, k, ffn=ffn, score=score, order=order, renorm=renorm, routed_scale=1.5,
                     shared_w1=sw1, shared_w2=sw2, shared_gate=sg, residual=res)
    ref = _ref(x, wr, w1, w2, k, ffn, score, order, renorm, 1.5, sw1, sw2, sg, res)
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)


def test_moe_bad_input_names_the_value():
    x = np.zeros((3, 8), np.float32)
    wr = np.zeros((4, 8), np.float32)
    w1 = np.zeros((4, 8, 8), np.float32)
    w2 = np.zeros((4, 8, 4), np.float32)
    with pytest.raises(minfer.MinferError, match="top_k 5 > n_experts 4"):
        minfer.moe(x, wr, w1, w2, 5)
    with pytest.raises(ValueError, match="ffn 'relu'"):
        minfer.moe(x, wr, w1, w2, 2, ffn="relu")
    with pytest.raises(ValueError, match="moe: top_k 4294967298 does not fit an int32"):
        minfer.moe(x, wr, w1, w2, 2**32 + 2)  # ctypes would have wrapped it to 2
    with pytest.raises(minfer.MinferError, match="workspace of 8 bytes"):
        minfer.moe(x, wr, w1, w2, 2, workspace=np.zeros(2, np.int32))
    out = minfer.moe(x, wr, w1, w2, 2)  # and the library still works
    assert out.shape == (3, 8) and not np.isnan(out).any()


def test_moe_workspace_must_be_one_aligned_run():
    """The library carves its scratch from the workspace's first byte on: a
    view that skips or repeats elements, or starts off a 16-byte boundary,
    is refused before anything is written (nothing outside it changes)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    wr = rng.standard_normal((4, 8)).astype(np.float32)
    w1 = rng.standard_normal((4, 16, 8)).astype(np.float32)
    w2 = rng.standard_normal((4, 8, 8)).astype(np.float32)
    good = minfer.moe(x, wr, w1, w2, 2)
    big = np.full(1 << 16, 7, np.int32)
    with pytest.raises(ValueError, match="workspace must be contiguous"):
        minfer.moe(x, wr, w1, w2, 2, workspace=big[::2])
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        minfer.moe(x, wr, w1, w2, 2, workspace=big[1:])
    assert (big == 7).all()
    out = minfer.moe(x, wr, w1, w2, 2, workspace=big[4:])  # 16 bytes in: fine
    np.testing.assert_array_equal(out, good)
    torch = pytest.importorskip("torch")
    tb = torch.full((1 << 16,), 7, dtype=torch.int32)
    tx, twr, tw1, tw2 = (torch.from_numpy(a) for a in (x, wr, w1, w2))
    with pytest.raises(ValueError, match="workspace must be contiguous"):
        minfer.moe(tx, twr, tw1, tw2, 2, workspace=tb[:1].expand(60000))
    assert (tb == 7).all()
