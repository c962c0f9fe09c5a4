"""Tests of the Python binding (python/minfer).

numpy on the CPU backend always; torch CUDA tensors on the CUDA backend when
torch and a GPU are there (the GPU host). Every op is compared with a float64
reference computed from the inputs as stored (after rounding to their dtype);
inputs are random with planted outliers, preallocated outputs are poisoned
with NaN, and tolerances are the output dtype's rounding plus an f32
accumulation term scaled by the magnitudes involved, so a wrong answer fails.
"""

import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import minfer
from minfer import _lib as L

REPO = Path(__file__).resolve().parents[2]

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bf16 through numpy needs ml_dtypes
    ml_dtypes, BF16 = None, None

NP_DTYPES = [np.dtype(np.float32), np.dtype(np.float16)] + ([BF16] if BF16 is not None else [])
DT_IDS = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", BF16: "bf16"}

# Unit roundoff of each storage dtype (half an ulp at 1.0).
UNIT = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11}
if BF16 is not None:
    UNIT[BF16] = 2.0**-8
F32_ACC = 2.0**-23  # f32 accumulation, per term, generously


def rand(rng, shape, dtype, scale=1.0, outliers=0.01, big=8.0):
    """Normal data with a few planted outliers (+-big*scale), stored as dtype."""
    x = rng.standard_normal(shape) * scale
    if x.size:
        mask = rng.random(shape) < outliers
        x[mask] = rng.choice([-big, big], size=int(mask.sum())) * scale * rng.uniform(0.5, 1.0, int(mask.sum()))
    return np.asarray(x).astype(dtype)


def f64(x):
    return np.asarray(x).astype(np.float64)


def poison(shape, dtype):
    out = np.empty(shape, dtype=dtype)
    out[...] = np.nan
    return out


def assert_close(got, ref, tol, case):
    """|got - ref| <= tol elementwise (tol broadcastable); NaN in got fails."""
    got = f64(got)
    err = np.abs(got - ref)
    bad = ~(err <= tol)  # NaN compares False: counted as bad
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf), -1)), got.shape)
        pytest.fail(f"{case}: {int(bad.sum())} of {got.size} elements off; worst at {i}: "
                    f"got {got[i]!r}, want {ref[i]!r}, tol {np.broadcast_to(tol, got.shape)[i]:.3g}; "
                    f"max err {np.nanmax(err):.3g}")


def still_usable():
    """After an error the library keeps working."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((3, 2), dtype=np.float32)
    np.testing.assert_array_equal(minfer.gemm(a, b), f64(a) @ f64(b))


# ---- library, layout, loading -----------------------------------------------------

def test_version_and_build_info():
    v = minfer.version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", v), v
    assert v == minfer.__version__
    info = minfer.build_info()
    assert isinstance(info, str) and "openblas" in info, info
    assert isinstance(minfer.cuda_available(), bool)
    assert os.path.exists(minfer.library_path())


def test_struct_layout_matches_c():
    """Compile a probe against the public headers and compare every struct's
    size and field offsets with the ctypes mirror."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the layout probe")
    lines = []
    for cname, (cls, fields) in L.LAYOUT.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for f in fields:
            lines.append(f'printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));')
    src = "#include <stddef.h>\n#include <stdio.h>\n#include \"minfer/minfer.h\"\nint main(void) {\n" + \
        "\n".join(lines) + "\nreturn 0;\n}\n"
    tmp = Path(os.environ.get("PYTEST_TMP", "/tmp")) / f"mf_layout_probe_{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "probe.c").write_text(src)
    r = subprocess.run([cc, "-std=c11", "-I", str(REPO / "include"), str(tmp / "probe.c"), "-o",
                        str(tmp / "probe")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(tmp / "probe")], capture_output=True, text=True, check=True).stdout
    shutil.rmtree(tmp, ignore_errors=True)
    seen = 0
    for line in out.splitlines():
        cname, field, value = line.split()
        cls = L.LAYOUT[cname][0]
        mine = ctypes.sizeof(cls) if field == "sizeof" else getattr(cls, field).offset
        assert mine == int(value), f"{cname}.{field}: ctypes {mine}, C {value}"
        seen += 1
    assert seen == sum(len(f) + 1 for _, f in L.LAYOUT.values())


def _python(code, **env):
    e = dict(os.environ, PYTHONPATH=str(REPO / "python"), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e)


def test_import_is_lazy_and_missing_library_is_a_clear_error():
    r = _python("""
        import minfer, sys
        assert 'torch' not in sys.modules
        try:
            minfer.version()
        except OSError as e:
            print('ERR', e)
        """, MINFER_LIB="/nonexistent/libminfer.so")
    assert r.returncode == 0, r.stderr
    assert "ERR minfer: cannot load libminfer.so" in r.stdout and "/nonexistent/libminfer.so" in r.stdout


def test_numpy_ops_do_not_import_torch():
    r = _python("""
        import sys, numpy as np, minfer
        minfer.add(np.ones(4, np.float32))
        assert 'torch' not in sys.modules, 'minfer imported torch'
        """, MINFER_LIB=minfer.library_path())
    assert r.returncode == 0, r.stderr


def test_cpu_backend():
    be = minfer.backend("cpu")
    assert be is minfer.backend("cpu")  # cached
    assert be.name == "cpu"
    be.sync()
    be.set_stream(None)
    with pytest.raises(minfer.MinferError, match="cpu backend has no streams") as e:
        be.set_stream(0x1234)
    assert e.value.status == L.MF_ERR_INVALID_ARG and e.value.status_name == "MF_ERR_INVALID_ARG"
    with pytest.raises(ValueError, match="unknown device"):
        minfer.backend("tpu")
    still_usable()


def test_freed_backend_is_replaced():
    """free() drops the backend from the cache: the next call gets a new one."""
    old = minfer.backend("cpu")
    old.free()
    with pytest.raises(minfer.MinferError, match="backend already freed"):
        old.handle
    be = minfer.backend("cpu")
    assert be is not old and be.name == "cpu"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(minfer.softmax(x).sum(axis=1), [1, 1], rtol=1e-6)


def test_cuda_backend_refused_without_a_device():
    if minfer.cuda_available():
        pytest.skip("a CUDA device is available")
    for _ in range(2):  # a failed creation is not cached
        with pytest.raises(minfer.UnsupportedError, match="no CUDA device"):
            minfer.backend("cuda:0")
    still_usable()


# ---- gemm ------------------------------------------------------------------------

def gemm_ref(a, b, c0=None, bias=None, alpha=1.0, beta=0.0, gelu=False):
    acc = alpha * np.matmul(f64(a), f64(b))
    mag = abs(alpha) * np.matmul(np.abs(f64(a)), np.abs(f64(b)))  # scale of the rounding error
    if c0 is not None and beta != 0.0:
        acc = acc + beta * f64(c0)
        mag = mag + abs(beta) * np.abs(f64(c0))
    if bias is not None:
        acc = acc + f64(bias)
        mag = mag + np.abs(f64(bias))
    if gelu:
        acc = 0.5 * acc * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (acc + 0.044715 * acc**3)))
    return acc, mag


def gemm_tol(ref, mag, k, out_dtype):
    return UNIT[np.dtype(out_dtype)] * np.abs(ref) + F32_ACC * (k + 4) * mag + 1e-30


GEMM_SHAPES = [(1, 1, 1), (7, 13, 5), (33, 17, 65), (64, 128, 96), (3, 257, 2)]


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: DT_IDS[d])
@pytest.mark.parametrize("m,n,k", GEMM_SHAPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm(dtype, m, n, k, ta, tb):
    rng = np.random.default_rng(m * 1000 + n * 10 + k + 7 * ta + 3 * tb)
    a = rand(rng, (k, m), dtype).T if ta else rand(rng, (m, k), dtype)  # .T: a column-major view
    b = rand(rng, (n, k), dtype).T if tb else rand(rng, (k, n), dtype)
    case = f"gemm(dtype={DT_IDS[dtype]},m={m},n={n},k={k},ta={ta},tb={tb})"
    c = minfer.gemm(a, b)
    assert c.shape == (m, n) and c.dtype == dtype
    ref, mag = gemm_ref(a, b)
    assert_close(c, ref, gemm_tol(ref, mag, k, dtype), case)


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: DT_IDS[d])
def test_gemm_epilogues_into_c(dtype):
    rng = np.random.default_rng(11)
    m, n, k = 19, 40, 33
    a = rand(rng, (m, k), dtype)
    w = rand(rng, (n, k), dtype)  # a torch Linear weight (n, k), passed transposed
    bias = rand(rng, (n,), dtype)
    c0 = rand(rng, (m, n), dtype)
    for alpha, beta, gelu in [(1.0, 0.0, True), (0.5, 1.0, False), (-2.0, 0.25, True)]:
        c = c0.copy() if beta != 0.0 else poison((m, n), dtype)  # beta == 0: c is not read
        out = minfer.gemm(a, w.T, c=c, bias=bias, alpha=alpha, beta=beta, gelu=gelu)
        assert out is c
        ref, mag = gemm_ref(a, w.T, c0, bias, alpha, beta, gelu)
        assert_close(c, ref, gemm_tol(ref, mag, k, dtype) * (1.2 if gelu else 1.0),
                     f"gemm(dtype={DT_IDS[dtype]},alpha={alpha},beta={beta},gelu={gelu},bias)")


def test_gemm_f32_output_from_half_inputs():
    rng = np.random.default_rng(12)
    a, b = rand(rng, (9, 70), np.float16), rand(rng, (70, 11), np.float16)
    c = poison((9, 11), np.float32)
    minfer.gemm(a, b, c=c)
    ref, mag = gemm_ref(a, b)
    assert_close(c, ref, gemm_tol(ref, mag, 70, np.float32), "gemm(f16 -> f32)")


@pytest.mark.parametrize("dtype", [d for d in NP_DTYPES if d != np.float32], ids=lambda d: DT_IDS[d])
@pytest.mark.parametrize("m", [1, 5, 40])
def test_gemm_half_weight_f32_activations(dtype, m):
    """The CPU takes a 16-bit weight with f32 a and c: decode rows (m <= 8) and prefill (panels)."""
    rng = np.random.default_rng(15 + m)
    a = rand(rng, (m, 129), np.float32)
    w = rand(rng, (70, 129), dtype)  # a torch Linear weight (n, k), passed transposed
    c = minfer.gemm(a, w.T)
    assert c.dtype == np.float32
    ref, mag = gemm_ref(a, w.T)
    assert_close(c, ref, gemm_tol(ref, mag, 129, np.float32), f"gemm(f32 a, {DT_IDS[dtype]} weight, m={m})")


@pytest.mark.parametrize("ba,bb", [(4, 4), (1, 4), (4, 1)])
def test_gemm_batched(ba, bb):
    rng = np.random.default_rng(13 + ba + bb)
    a = rand(rng, (ba, 6, 21), np.float32)
    b = rand(rng, (bb, 12, 21), np.float32).transpose(0, 2, 1)  # (bb, 21, 12) transposed view
    c = minfer.gemm(a, b)
    assert c.shape == (4, 6, 12)
    ref, mag = gemm_ref(np.broadcast_to(a, (4, 6, 21)), np.broadcast_to(b, (4, 21, 12)))
    assert_close(c, ref, gemm_tol(ref, mag, 21, np.float32), f"gemm(batch a={ba}, b={bb})")


def test_gemm_strided_rows():
    """Row strides wider than the row (a slice of a wider matrix) are free."""
    rng = np.random.default_rng(14)
    big = rand(rng, (10, 50), np.float32)
    a = big[:, 5:25]  # (10, 20), row stride 50
    b = rand(rng, (20, 7), np.float32)
    cbig = poison((10, 16), np.float32)
    minfer.gemm(a, b, c=cbig[:, 3:10])
    ref, mag = gemm_ref(a, b)
    assert_close(cbig[:, 3:10], ref, gemm_tol(ref, mag, 20, np.float32), "gemm(strided rows)")
    assert np.isnan(cbig[:, :3]).all() and np.isnan(cbig[:, 10:]).all(), "gemm wrote outside c"


def test_gemm_errors():
    a = np.ones((4, 5), np.float32)
    b = np.ones((5, 3), np.float32)
    cases = [
        (lambda: minfer.gemm(a, np.ones((6, 3), np.float32)), minfer.MinferError, r"a cols \(k\) 5 != b rows 6"),
        (lambda: minfer.gemm(a.astype(np.float16), b), minfer.MinferError, "a dtype f16 != b dtype f32"),
        (lambda: minfer.gemm(a.astype(np.int32), b.astype(np.int32)), minfer.MinferError, "want f32, f16 or bf16"),
        (lambda: minfer.gemm(a, b, c=np.empty((3, 4), np.float32).T), minfer.UnsupportedError, "row-major"),
        (lambda: minfer.gemm(a, b, c=np.empty((4, 4), np.float32)), minfer.MinferError, "b cols 3 != c cols 4"),
        (lambda: minfer.gemm(np.ones((4, 10), np.float32)[::2, ::2], b[:, :]), minfer.UnsupportedError,
         "need a unit stride"),
        (lambda: minfer.gemm(a, b, bias=np.ones(4, np.float32)), minfer.MinferError, "bias"),
        (lambda: minfer.gemm(a.astype(np.float64), b), TypeError, "numpy dtype float64 is not supported"),
        (lambda: minfer.gemm(a, b, beta=1.0), ValueError, "c is None"),
        (lambda: minfer.gemm(np.ones(5, np.float32), b), ValueError, "want both 2 or both 3"),
        (lambda: minfer.gemm(a, b, c=np.broadcast_to(np.float32(0), (4, 3))), ValueError, "read-only"),
        (lambda: minfer.gemm(a[::-1], b), ValueError, "negative stride"),
        (lambda: minfer.gemm(np.frombuffer(bytearray(81), np.float32, 20, offset=1).reshape(4, 5), b),
         ValueError, "not aligned"),
        (lambda: minfer.gemm(a.tolist(), b), TypeError, "expected a numpy.ndarray or torch.Tensor"),
        (lambda: minfer.gemm(a, b, alpha="x"), TypeError, "alpha must be a number"),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            fn()
        still_usable()


def test_gemm_overlapping_output_refused():
    buf = np.ones((8, 8), np.float32)
    with pytest.raises(minfer.MinferError, match="overlap"):
        minfer.gemm(buf[:4, :4], buf[:4, :4], c=buf[2:6, 2:6])
    still_usable()


# ---- add_norm ----------------------------------------------------------------------

def norm_ref(x, w, residual=None, bias=None, kind="rms", eps=1e-5):
    s = f64(x) + (f64(residual) if residual is not None else 0.0)
    if kind == "layer":
        mean = s.mean(axis=1, keepdims=True)
        var = ((s - mean) ** 2).mean(axis=1, keepdims=True)
    else:
        mean, var = 0.0, (s * s).mean(axis=1, keepdims=True)
    y = (s - mean) / np.sqrt(var + eps) * f64(w)
    if bias is not None:
        y = y + f64(bias)
    return s, y


def norm_tol(ref, dtype):
    # the output's rounding, plus f32 error relative to the row's largest value
    row = np.abs(ref).max(axis=1, keepdims=True) if ref.size else 0.0
    return UNIT[np.dtype(dtype)] * 1.01 * np.abs(ref) + 1e-5 * row + 1e-30


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: DT_IDS[d])
@pytest.mark.parametrize("rows,dim", [(1, 1), (3, 7), (17, 1024), (5, 4097)])
@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("with_residual", [False, True])
def test_add_norm(dtype, rows, dim, kind, with_residual):
    rng = np.random.default_rng(rows * 31 + dim + (kind == "layer") * 7 + with_residual)
    x = rand(rng, (rows, dim), dtype, scale=3.0)
    r = rand(rng, (rows, dim), dtype) if with_residual else None
    w = rand(rng, (dim,), dtype, outliers=0.0) + np.asarray(1.0, dtype)
    b = rand(rng, (dim,), dtype) if kind == "layer" else None
    eps = 1e-5 if kind == "rms" else 1e-6
    y, s = minfer.add_norm(x, w, residual=r, bias=b, kind=kind, eps=eps, sum_out=True)
    assert y.shape == x.shape and y.dtype == dtype and s.dtype == dtype
    s_ref, y_ref = norm_ref(x, w, r, b, kind, eps)
    case = f"add_norm(dtype={DT_IDS[dtype]},rows={rows},dim={dim},kind={kind},residual={with_residual})"
    assert_close(s, s_ref, UNIT[np.dtype(dtype)] * 1.01 * np.abs(s_ref) + 1e-30, case + " sum_out")
    assert_close(y, y_ref, norm_tol(y_ref, dtype), case)


def test_add_norm_large_half_rows():
    """f16 rows with |x| ~ 1e4: sum of squares far beyond f16 range."""
    rng = np.random.default_rng(21)
    x = (rng.standard_normal((4, 2048)) * 1e4).clip(-6e4, 6e4).astype(np.float16)
    w = np.ones(2048, np.float16)
    y = minfer.add_norm(x, w)
    _, ref = norm_ref(x, w)
    assert_close(y, ref, norm_tol(ref, np.float16), "add_norm(f16, |x|~1e4)")


def test_add_norm_in_place_and_aliases():
    rng = np.random.default_rng(22)
    x0 = rand(rng, (6, 33), np.float32)
    r0 = rand(rng, (6, 33), np.float32)
    w = rand(rng, (33,), np.float32)
    s_ref, y_ref = norm_ref(x0, w, r0)
    # the transformer pattern: residual stream updated in place, y into x
    x, r = x0.copy(), r0.copy()
    y, s = minfer.add_norm(x, w, residual=r, sum_out=r, y=x)
    assert y is x and s is r
    assert_close(r, s_ref, 1e-6 * np.abs(s_ref), "add_norm(sum_out=residual)")
    assert_close(x, y_ref, norm_tol(y_ref, np.float32), "add_norm(y=x)")
    # strided rows (a slice of a wider buffer) are fine; only stride[1] must be 1
    big = poison((6, 40), np.float32)
    minfer.add_norm(x0, w, residual=r0, y=big[:, 2:35])
    assert_close(big[:, 2:35], y_ref, norm_tol(y_ref, np.float32), "add_norm(strided y)")
    assert np.isnan(big[:, :2]).all() and np.isnan(big[:, 35:]).all()


def test_add_norm_errors():
    x = np.ones((3, 8), np.float32)
    w = np.ones(8, np.float32)
    cases = [
        (lambda: minfer.add_norm(x, np.ones(7, np.float32)), minfer.MinferError, "weight"),
        (lambda: minfer.add_norm(x, w, residual=np.ones((3, 9), np.float32)), minfer.MinferError,
         r"residual shape \(3, 9\) != x shape \(3, 8\)"),
        (lambda: minfer.add_norm(x, w, bias=w), minfer.MinferError, "bias given for RMSNorm"),
        (lambda: minfer.add_norm(x, w, eps=-1.0), minfer.MinferError, "eps"),
        (lambda: minfer.add_norm(x, w, kind="batch"), ValueError, "kind 'batch'"),
        (lambda: minfer.add_norm(np.ones((8, 3), np.float32).T, w), minfer.UnsupportedError,
         "rows must be contiguous"),
        (lambda: minfer.add_norm(np.ones((2, 3, 8), np.float32), w), minfer.MinferError, "has 3 dims"),
        (lambda: minfer.add_norm(x, w, y=x[:, :]), None, None),  # same view: fine
        (lambda: minfer.add_norm(x, w, y=np.ones((3, 8), np.float32)[:, :]), None, None),
    ]
    for fn, exc, msg in cases:
        if exc is None:
            fn()
        else:
            with pytest.raises(exc, match=msg):
                fn()
        still_usable()
    buf = np.ones((4, 8), np.float32)
    with pytest.raises(minfer.MinferError, match="overlap"):
        minfer.add_norm(buf[:3], w, y=buf[1:4])


# ---- embed -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: DT_IDS[d])
@pytest.mark.parametrize("out_dtype", [None, np.float32])
def test_embed(dtype, out_dtype):
    rng = np.random.default_rng(31)
    vocab, dim = 50, 37
    table = rand(rng, (vocab, dim), dtype)
    ids = np.concatenate([[0, vocab - 1, 3, 3], rng.integers(0, vocab, 20)]).astype(np.int32)
    out = None if out_dtype is None else poison((len(ids), dim), out_dtype)
    y = minfer.embed(ids, table, out=out)
    assert y.dtype == (dtype if out_dtype is None else out_dtype)
    np.testing.assert_array_equal(f64(y), f64(table)[ids])  # a copy (widening is exact)


def test_embed_strided_table():
    table = np.arange(60, dtype=np.float32).reshape(6, 10)[:, 2:7]  # row stride 10
    ids = np.array([5, 0, 2], np.int32)
    np.testing.assert_array_equal(minfer.embed(ids, table), table[ids])


def test_embed_errors():
    table = np.ones((10, 4), np.float32)
    cases = [
        (lambda: minfer.embed(np.array([1, 10], np.int32), table), minfer.MinferError,
         r"ids\[1\]=10 out of range \[0, 10\)"),
        (lambda: minfer.embed(np.array([-1], np.int32), table), minfer.MinferError, "out of range"),
        (lambda: minfer.embed(np.array([1, 2], np.int64), table), TypeError, "int64"),
        (lambda: minfer.embed(np.array([1.0], np.float32), table), minfer.MinferError, "want i32"),
        (lambda: minfer.embed(np.array([1], np.int32), np.ones((4, 10), np.float32).T), minfer.UnsupportedError,
         "table rows must be contiguous"),
        (lambda: minfer.embed(np.array([1], np.int32), table, out=np.empty((2, 4), np.float32)),
         minfer.MinferError, r"y shape \(2, 4\)"),
        (lambda: minfer.embed(np.array([[1]], np.int32), table), ValueError, "want 1 and 2"),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            fn()
        still_usable()


# ---- add ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: DT_IDS[d])
@pytest.mark.parametrize("shape,bshape", [((1,), None), ((7, 13), (7, 13)), ((5, 3, 64), (64,)),
                                          ((4097,), (1,)), ((6, 10), None)])
def test_add(dtype, shape, bshape):
    rng = np.random.default_rng(41 + len(shape))
    a = rand(rng, shape, dtype)
    b = rand(rng, bshape, dtype) if bshape else None
    alpha, beta = 0.75, -1.5
    out = poison(shape, dtype)
    y = minfer.add(a, b, alpha=alpha, beta=beta, out=out)
    assert y is out
    ref = alpha * f64(a) + (beta * f64(b) if b is not None else 0.0)
    tol = UNIT[np.dtype(dtype)] * 1.01 * np.abs(ref) + 2.0**-23 * (np.abs(alpha * f64(a)) +
                                                                   (np.abs(beta * f64(b)) if b is not None else 0))
    assert_close(y, ref, tol + 1e-30, f"add(dtype={DT_IDS[dtype]},shape={shape},b={bshape})")


def test_add_in_place_and_defaults():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([1, 2, 3, 4], np.float32)
    y = minfer.add(a, b)  # alpha = beta = 1, allocated output
    np.testing.assert_array_equal(y, a + b)
    assert y is not a
    minfer.add(a, b, out=a)
    np.testing.assert_array_equal(a, np.arange(12, dtype=np.float32).reshape(3, 4) + b)
    np.testing.assert_array_equal(minfer.add(b, alpha=2.0), 2 * b)


def test_add_errors():
    a = np.ones((4, 6), np.float32)
    cases = [
        (lambda: minfer.add(a, np.ones(5, np.float32)), minfer.MinferError, "does not divide"),
        (lambda: minfer.add(np.ones((6, 4), np.float32).T, None), minfer.UnsupportedError, "contiguous"),
        (lambda: minfer.add(a, out=np.empty(5, np.float32)), minfer.MinferError, "y has 5 elements, a has 24"),
        (lambda: minfer.add(a, a.astype(np.int32)), minfer.MinferError, "want f32, f16 or bf16"),
        (lambda: minfer.add(np.float32(1.0)), TypeError, "expected a numpy.ndarray"),
        (lambda: minfer.add(np.ones((1, 1, 1, 1, 2), np.float32)), ValueError, "5 dims"),
        (lambda: minfer.add(np.ones((), np.float32)), ValueError, "0 dims"),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            fn()
        still_usable()
    buf = np.ones(10, np.float32)
    with pytest.raises(minfer.MinferError, match="overlap"):
        minfer.add(buf[:6], out=buf[2:8])


def test_empty_tensors():
    z = np.empty((0, 5), np.float32)
    assert minfer.add(z).shape == (0, 5)
    assert minfer.gemm(np.empty((0, 3), np.float32), np.ones((3, 4), np.float32)).shape == (0, 4)
    assert minfer.embed(np.empty(0, np.int32), np.ones((3, 4), np.float32)).shape == (0, 4)


# ---- softmax -------------------------------------------------------------------------------

_softmax_state = {}


def softmax_or_skip():
    """Skip when this library has no softmax at all (the op is being written);
    any other failure is a real one."""
    if "why" not in _softmax_state:
        why = None
        try:
            minfer.softmax(np.zeros((1, 1), np.float32))
        except minfer.UnsupportedError as e:
            if "not implemented" in e.message:
                why = f"softmax not available in this library: {e.message}"
        _softmax_state["why"] = why
    if _softmax_state["why"]:
        pytest.skip(_softmax_state["why"])


def softmax_ref(x, scale=1.0, causal=False, key_lens=None, bias=None):
    """float64 reference of mf_softmax, 2-D or 4-D x."""
    z = f64(x)
    four = z.ndim == 4
    if not four:
        z = z[None, None]
        bias = None if bias is None else f64(bias)[None, None]
    B, H, Q, K = z.shape
    z = scale * z
    if bias is not None:
        z = z + f64(bias)
    mask = np.zeros((B, 1, Q, K), bool)
    if causal:
        i, j = np.arange(Q)[:, None], np.arange(K)[None, :]
        mask |= (j > i + K - Q)[None, None]
    if key_lens is not None:
        for b in range(B):
            mask[b, :, :, max(int(key_lens[b]), 0):] = True
    z = np.where(mask, -np.inf, z)
    with np.errstate(invalid="ignore"):
        m = z.max(axis=-1, keepdims=True)
        e = np.exp(z - np.where(np.isfinite(m), m, 0.0))
        e = np.where(np.isneginf(z), 0.0, e)
        s = e.sum(axis=-1, keepdims=True)
        y = np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)
        # a NaN input poisons its own row only
        y = np.where(np.isnan(z).any(axis=-1, keepdims=True), np.nan, y)
    return y if four else y[0, 0]


def softmax_tol(ref, dtype):
    return UNIT[np.dtype(dtype)] * 1.01 * np.abs(ref) + 2e-6 * np.abs(ref) + 1e-7


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: DT_IDS[d])
@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (37, 1000), (5, 4097)])
@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_softmax_2d(dtype, rows, cols, scale):
    softmax_or_skip()
    rng = np.random.default_rng(rows + cols)
    x = rand(rng, (rows, cols), dtype, scale=4.0)
    if cols > 4:
        x[0, 1:4] = -np.inf  # a -inf block
    y = minfer.softmax(x, scale=scale)
    assert y.shape == x.shape and y.dtype == dtype
    ref = softmax_ref(x, scale)
    assert_close(y, ref, softmax_tol(ref, dtype), f"softmax(dtype={DT_IDS[dtype]},rows={rows},cols={cols},"
                                                  f"scale={scale})")


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: DT_IDS[d])
@pytest.mark.parametrize("q,k", [(9, 9), (3, 17), (1, 64)])
def test_softmax_causal_key_lens_bias(dtype, q, k):
    softmax_or_skip()
    rng = np.random.default_rng(q * 100 + k)
    B, H = 3, 2
    x = rand(rng, (B, H, q, k), dtype)
    key_lens = np.array([k, 0, max(k - 5, 1)], np.int32)  # batch 1: every key masked -> zeros
    bias_row = rand(rng, (1, 1, q, k), np.float32)
    bias_row[0, 0, :, 0] = -np.inf  # user mask
    bias = np.broadcast_to(bias_row, (B, H, q, k))  # stride 0 over batch and heads
    y = poison(x.shape, dtype)
    out = minfer.softmax(x, y=y, scale=0.3, causal=True, key_lens=key_lens, bias=bias)
    assert out is y
    ref = softmax_ref(x, 0.3, True, key_lens, bias)
    assert np.all(ref[1] == 0.0)
    assert_close(y, ref, softmax_tol(ref, dtype), f"softmax(dtype={DT_IDS[dtype]},q={q},k={k},causal,"
                                                  f"key_lens,bias)")


def test_softmax_in_place_and_nan_row():
    softmax_or_skip()
    rng = np.random.default_rng(51)
    x = rand(rng, (4, 33), np.float32)
    x[2, 5] = np.nan
    ref = softmax_ref(x)
    minfer.softmax(x, y=x)
    assert np.isnan(x[2]).any(), "a NaN input must not vanish"
    rows = [0, 1, 3]
    assert_close(x[rows], ref[rows], softmax_tol(ref[rows], np.float32), "softmax(in place, NaN row)")


def test_softmax_errors():
    softmax_or_skip()
    x = np.ones((2, 3, 4, 5), np.float32)
    cases = [
        (lambda: minfer.softmax(x, y=np.empty((2, 3, 4, 6), np.float32)), minfer.MinferError, None),
        (lambda: minfer.softmax(np.ones((5, 4), np.float32).T), minfer.MinferError, None),
        (lambda: minfer.softmax(x, key_lens=np.ones(2, np.float32)), minfer.MinferError, None),
        (lambda: minfer.softmax(x, key_lens=np.ones(3, np.int32)), minfer.MinferError, None),
        (lambda: minfer.softmax(x, key_lens=np.ones(2, np.int64)), TypeError, "int64"),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc, match=msg) as e:
            fn()
        if isinstance(e.value, minfer.MinferError):
            assert e.value.message.startswith("softmax"), e.value.message
        still_usable()


# ---- torch (CPU tensors; CUDA tensors on the GPU host) ------------------------------------

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
HAVE_CUDA_TORCH = torch is not None and torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAVE_CUDA_TORCH, reason="needs torch with a CUDA device")


@needs_torch
def test_torch_cpu_tensors():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(7, 9, generator=g)
    w = torch.randn(5, 9, generator=g)
    c = minfer.gemm(a, w.t())
    assert isinstance(c, torch.Tensor) and c.shape == (7, 5)
    ref, mag = gemm_ref(a.numpy(), w.t().numpy())
    assert_close(c.numpy(), ref, gemm_tol(ref, mag, 9, np.float32), "gemm(torch cpu)")
    with pytest.raises(TypeError, match="torch dtype torch.float64"):
        minfer.add(torch.ones(3, dtype=torch.float64))


@needs_cuda
def test_cuda_backend_present():
    """On a GPU host the library must have been built with CUDA."""
    assert minfer.cuda_available(), f"torch sees a GPU but libminfer does not: {minfer.build_info()}"
    assert minfer.backend("cuda").name == "cuda"


def t64(x):
    return x.detach().to("cpu", torch.float64).numpy()


TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
T_UNIT = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}


def trand(shape, dt, seed, scale=1.0, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    mask = torch.rand(shape, generator=g) < 0.01
    x[mask] = 8.0 * scale * torch.sign(x[mask])
    return x.to(getattr(torch, TORCH_DTYPES[dt])).to(device)


def cuda_gemm_path():
    """How the CUDA backend ran its last GEMM ("fused", "f32-scratch", ...;
    src/ops/gemm_plan.h), or None when the library does not say."""
    lib = L.load()
    fn = getattr(lib, "mf_cuda_gemm_last_path", None)
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    return fn(minfer.backend("cuda").handle).decode()


def gemm_bias_gelu_bound(x, w, bias, dt, fused):
    """The bound tests/cases_gemm.c derives, for c = gelu(x @ w.T + bias):
    f32 sum of k products, the bias added in f32, GELU in f32, one rounding
    to c (no second rounding on any path):
        1.2 (k + 8) u32 S + u_c |ref| + 8 u32 |pre| (+ 2^-11 |pre| on the fused
        path: cuBLASLt's GELU may use an approximate tanh)."""
    k = x.shape[1]
    ref, mag = gemm_ref(x, w.T, bias=bias, gelu=True)
    pre, _ = gemm_ref(x, w.T, bias=bias)
    u32 = 2.0**-24
    tol = 1.2 * (k + 8) * u32 * mag + T_UNIT[dt] * np.abs(ref) + 8 * u32 * np.abs(pre) + 1e-30
    if fused:
        tol = tol + 2.0**-11 * np.abs(pre)
    return ref, tol


@needs_torch
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 13, 5), (128, 256, 64), (33, 1000, 257)])
def test_cpu_torch_gemm_bias_gelu(dt, m, n, k):
    """test_cuda_gemm's inputs and bound on the CPU backend (the semantics every path follows)."""
    x = trand((m, k), dt, m + n + k, device="cpu")
    w = trand((n, k), dt, m * n + k, device="cpu")
    bias = trand((n,), dt, k, device="cpu")
    c = minfer.gemm(x, w.t(), bias=bias, gelu=True)
    ref, tol = gemm_bias_gelu_bound(t64(x), t64(w), t64(bias), dt, fused=False)
    assert_close(t64(c), ref, tol, f"cpu gemm(dtype={dt},m={m},n={n},k={k},bias,gelu)")


@needs_cuda
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 13, 5), (128, 256, 64), (33, 1000, 257)])
def test_cuda_gemm(dt, m, n, k):
    x = trand((m, k), dt, m + n + k)
    w = trand((n, k), dt, m * n + k)  # Linear weight, passed as its transpose
    bias = trand((n,), dt, k)
    c = minfer.gemm(x, w.t(), bias=bias, gelu=True)
    torch.cuda.synchronize()
    path = cuda_gemm_path()
    ref, tol = gemm_bias_gelu_bound(t64(x), t64(w), t64(bias), dt, fused=path in ("fused", None))
    assert_close(t64(c), ref, tol, f"cuda gemm(dtype={dt},m={m},n={n},k={k},bias,gelu) path {path}")


@needs_cuda
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_cuda_gemm_batched_f32_out(dt):
    a = trand((3, 17, 64), dt, 1)
    b = trand((1, 64, 40), dt, 2)
    c = torch.full((3, 17, 40), float("nan"), device="cuda")
    minfer.gemm(a, b, c=c)
    torch.cuda.synchronize()
    ref, mag = gemm_ref(np.broadcast_to(t64(a), (3, 17, 64)), np.broadcast_to(t64(b), (3, 64, 40)))
    assert_close(t64(c), ref, 2.0**-24 * np.abs(ref) + 2.0**-20 * 68 * mag, f"cuda gemm batched {dt}->f32")


@needs_cuda
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("kind", ["rms", "layer"])
@pytest.mark.parametrize("rows,dim", [(1, 1), (5, 768), (33, 4097), (8, 8192)])
def test_cuda_add_norm(dt, kind, rows, dim):
    x = trand((rows, dim), dt, rows + dim, scale=3.0)
    r = trand((rows, dim), dt, rows * dim)
    w = trand((dim,), dt, dim) + 1
    b = trand((dim,), dt, dim + 1) if kind == "layer" else None
    y, s = minfer.add_norm(x, w, residual=r, bias=b, kind=kind, sum_out=True)
    torch.cuda.synchronize()
    s_ref, y_ref = norm_ref(t64(x), t64(w), t64(r), None if b is None else t64(b), kind)
    case = f"cuda add_norm(dtype={dt},kind={kind},rows={rows},dim={dim})"
    assert_close(t64(s), s_ref, T_UNIT[dt] * 1.01 * np.abs(s_ref) + 1e-30, case + " sum_out")
    row = np.abs(y_ref).max(axis=1, keepdims=True)
    assert_close(t64(y), y_ref, T_UNIT[dt] * 1.01 * np.abs(y_ref) + 1e-5 * row, case)


@needs_cuda
def test_cuda_add_norm_f16_large_rows():
    x = (torch.randn(4, 4096, dtype=torch.float64) * 1e4).clamp(-6e4, 6e4).half().cuda()
    w = torch.ones(4096, dtype=torch.float16, device="cuda")
    y = minfer.add_norm(x, w)
    torch.cuda.synchronize()
    _, ref = norm_ref(t64(x), t64(w))
    assert torch.isfinite(y).all(), "overflow in the f16 sum of squares"
    assert_close(t64(y), ref, 2.0**-11 * 1.01 * np.abs(ref) + 1e-5 * np.abs(ref).max(), "cuda add_norm f16 1e4")


@needs_cuda
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_cuda_embed_and_add(dt):
    table = trand((1000, 96), dt, 3)
    ids = torch.tensor([0, 999, 5, 5, 123], dtype=torch.int32, device="cuda")
    y = minfer.embed(ids, table)
    torch.cuda.synchronize()
    assert torch.equal(y, table[ids.long()])
    a, b = trand((7, 96), dt, 4), trand((96,), dt, 5)
    out = minfer.add(a, b, alpha=0.5, beta=2.0)
    torch.cuda.synchronize()
    ref = 0.5 * t64(a) + 2.0 * t64(b)
    assert_close(t64(out), ref, T_UNIT[dt] * 1.01 * np.abs(ref) + 2.0**-22 * np.abs(ref) + 1e-30,
                 f"cuda add({dt})")


@needs_cuda
def test_cuda_graph_capture_refused_clearly():
    """Inside torch.cuda.graph minfer cannot order its stream switch (an event
    from outside the capture would break it): the op refuses before queueing
    anything, the capture ends cleanly, and minfer works after it."""
    x = torch.randn(4, 8, device="cuda")
    minfer.softmax(x)  # the backend exists before the capture (its creation syncs)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(minfer.MinferError, match="being captured"):
        with torch.cuda.graph(g):
            minfer.softmax(x)
    y = minfer.softmax(x)
    minfer.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, dim=-1))


@needs_cuda
def test_cuda_uses_torch_current_stream():
    """Work queued by torch on a side stream must be seen by minfer's op on the
    same stream (and minfer's result by torch's next op there)."""
    s = torch.cuda.Stream()
    n = 1 << 24
    src = torch.randn(n, device="cuda")
    a = torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for _ in range(4):
            a.copy_(src)  # queue a few large copies so a wrong stream would race
        out = minfer.add(a, alpha=2.0)
        total = out.sum()
    s.synchronize()
    assert torch.equal(out, 2.0 * src)
    assert abs(total.item() - (2.0 * src).sum().item()) <= 1e-3 * src.abs().sum().item()


@needs_torch
@pytest.mark.parametrize("q,k", [(9, 9), (3, 17), (1, 64)])
def test_torch_cpu_softmax_fast_path(q, k):
    """The packed-struct path torch tensors take: same results as the numpy
    path for every argument (key_lens, a stride-0 bias, in place, y allocated),
    the same errors, and numpy arguments mixed in still work."""
    softmax_or_skip()
    rng = np.random.default_rng(q * 7 + k)
    B, H = 3, 2
    x = rand(rng, (B, H, q, k), np.float32)
    kl = np.array([k, 0, max(k - 5, 1)], np.int32)
    bias_row = rand(rng, (1, 1, q, k), np.float32)
    bias = np.broadcast_to(bias_row, (B, H, q, k))
    ref = minfer.softmax(x, scale=0.3, causal=True, key_lens=kl, bias=bias)
    xt, tb = torch.from_numpy(x.copy()), torch.from_numpy(bias_row).expand(B, H, q, k)
    got = minfer.softmax(xt, scale=0.3, causal=True, key_lens=torch.from_numpy(kl), bias=tb)
    assert isinstance(got, torch.Tensor) and got.shape == xt.shape
    assert np.array_equal(got.numpy(), ref)
    got2 = minfer.softmax(xt, scale=0.3, causal=True, key_lens=kl, bias=tb)  # numpy key_lens: generic path
    assert np.array_equal(got2.numpy(), ref)
    minfer.softmax(xt, y=xt, scale=0.3, causal=True, key_lens=torch.from_numpy(kl), bias=tb)  # in place
    assert np.array_equal(xt.numpy(), ref)
    with pytest.raises(TypeError, match="float64"):
        minfer.softmax(torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(minfer.MinferError, match="softmax"):
        minfer.softmax(xt, y=torch.empty(B, H, q, k + 1))
    with pytest.raises(minfer.MinferError, match="key_lens"):
        minfer.softmax(xt, key_lens=torch.ones(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="dims"):
        minfer.softmax(torch.ones(1, 1, 1, 1, 2))
    with pytest.raises(TypeError, match="scale"):
        minfer.softmax(xt, scale="x")
    still_usable()


@needs_cuda
def test_cuda_errors():
    a = torch.ones(4, 5, device="cuda")
    with pytest.raises(ValueError, match="different devices"):
        minfer.gemm(a, torch.ones(5, 3))
    with pytest.raises(minfer.MinferError, match="a cols"):
        minfer.gemm(a, torch.ones(6, 3, device="cuda"))
    with pytest.raises(TypeError, match="float64"):
        minfer.add(torch.ones(3, device="cuda", dtype=torch.float64))
    # an id out of range on CUDA: reported at the next synchronize
    table = torch.ones(10, 4, device="cuda")
    try:
        minfer.embed(torch.tensor([3, 12], dtype=torch.int32, device="cuda"), table)
        minfer.synchronize("cuda")
        pytest.fail("embed with id 12 of 10 was not reported")
    except minfer.MinferError as e:
        assert "12" in e.message or "range" in e.message, e.message
    y = minfer.add(a, alpha=3.0)  # still usable
    torch.cuda.synchronize()
    assert torch.equal(y, 3.0 * a)


@needs_cuda
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("q,k", [(1, 4096), (64, 64), (17, 300)])
def test_cuda_softmax(dt, q, k):
    softmax_or_skip()
    B, H = 2, 3
    x = trand((B, H, q, k), dt, q + k, scale=3.0)
    key_lens = torch.tensor([k, 0], dtype=torch.int32, device="cuda")
    bias = trand((1, H, q, k), "f32", k).expand(B, H, q, k)  # stride-0 batch
    y = minfer.softmax(x, scale=0.125, causal=True, key_lens=key_lens, bias=bias)
    torch.cuda.synchronize()
    ref = softmax_ref(t64(x), 0.125, True, key_lens.cpu().numpy(), t64(bias))
    tol = T_UNIT[dt] * 1.01 * np.abs(ref) + 2e-6 * np.abs(ref) + 1e-7
    assert_close(t64(y), ref, tol, f"cuda softmax(dtype={dt},q={q},k={k},causal,key_lens,bias)")
