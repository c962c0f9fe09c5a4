"""minfer.topk (mf_topk through the binding) against torch.topk and a float64
logsumexp on the CPU backend: random rows with planted ties and -inf blocks,
odd sizes, f32/bf16/f16. Skipped without torch."""

import math

import pytest

import minfer

torch = pytest.importorskip("torch")
torch.set_num_threads(1)


def _rows(rows, n, dt, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=g) * 4
    x[:, n // 3] = x[:, 0]                        # a tie: the lower index must come first
    x[0, : n // 2] = float("-inf")                # a masked block
    x[-1, torch.randint(0, n, (1,), generator=g)] = 40.0  # an outlier
    return x.to(dt)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("rows,n,k", [(1, 1, 1), (3, 257, 50), (5, 3001, 1024), (2, 1024, 1024)])
def test_topk_matches_torch(dt, rows, n, k):
    x = _rows(rows, n, dt, seed=rows * 1000 + n)
    scale = 0.7
    ids, vals, stats = minfer.topk(x, k, scale=scale)
    assert ids.dtype == torch.int32 and vals.dtype == torch.float32 and stats.dtype == torch.float32
    assert ids.shape == (rows, k) and vals.shape == (rows, k) and stats.shape == (rows, 2)
    xf = x.double()
    for r in range(rows):
        finite = int(torch.isfinite(xf[r]).sum())
        m = min(k, finite)
        # torch.topk's values (its ids may order ties differently): ours must be the same values,
        # and our ids must point at them in rank order (larger first, equal values: lower id first).
        tv, _ = torch.topk(xf[r], m)
        assert torch.equal(vals[r, :m].double(), tv), (r, vals[r, :m], tv)
        assert torch.equal(xf[r, ids[r, :m].long()], tv)
        for j in range(1, m):
            assert vals[r, j - 1] > vals[r, j] or ids[r, j - 1] < ids[r, j]
        assert (ids[r, m:] == -1).all() and (vals[r, m:] == float("-inf")).all()
        mx = xf[r].max().item()
        s = torch.exp((xf[r] - mx) * scale).sum().item()  # float64; the op sums f32 terms in double
        assert stats[r, 0].item() == mx
        assert math.isclose(stats[r, 1].item(), s, rel_tol=1e-5), (stats[r, 1].item(), s)


def test_topk_numpy_and_errors():
    np = pytest.importorskip("numpy")
    x = np.array([[1.0, 3.0, 2.0, 3.0]], dtype=np.float32)
    ids, vals, stats = minfer.topk(x, 3)
    assert ids.dtype == np.int32 and ids.tolist() == [[1, 3, 2]] and vals.tolist() == [[3.0, 3.0, 2.0]]
    assert stats[0, 0] == 3.0 and math.isclose(stats[0, 1], 2 + math.exp(-1) + math.exp(-2), rel_tol=1e-6)
    with pytest.raises(ValueError, match="k 0 not in"):
        minfer.topk(x, 0)
    with pytest.raises(ValueError, match="k 4294967301 not in"):
        minfer.topk(x, 2**32 + 5)
    with pytest.raises(TypeError, match="k must be an integer"):
        minfer.topk(x, 2.5)
    with pytest.raises(minfer.MinferError, match="topk: k 5 > the 4 columns"):
        minfer.topk(x, 5)
    with pytest.raises(minfer.MinferError, match="scale"):
        minfer.topk(x, 2, scale=0.0)
