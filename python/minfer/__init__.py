"""minfer: a thin ctypes binding over libminfer's kernel-level ops.

Ops take numpy arrays (run on the CPU backend) or torch tensors (CUDA tensors
run on the CUDA backend, on torch's current stream; CPU tensors on the CPU
backend), zero-copy. Outputs are allocated when not given and returned.
dtypes: float32, float16, bfloat16 (numpy: via ml_dtypes, if installed) and
int32 for ids/lengths. Shapes, strides and dtypes are checked by the library;
a failure raises MinferError naming the status and the bad value, and the
library stays usable.

    import numpy as np, minfer
    c = minfer.gemm(a, b.T)                      # a @ b.T, b.T is a free view
    y, s = minfer.add_norm(x, w, residual=r, sum_out=True)

The library is found via $MINFER_LIB, else <repo>/build/libminfer.so, else
the system's search path; it is loaded on first use. torch is optional and
never imported by minfer itself.
"""

import atexit
import contextlib
import ctypes
import math
import operator
import struct
import threading

from . import _lib as L
from . import _tensor as T

__version__ = "0.1.0"  # tests check that it matches mf_version()

__all__ = [
    "MinferError", "UnsupportedError", "version", "build_info", "cuda_available", "library_path",
    "backend", "synchronize", "gemm", "add_norm", "embed", "add", "softmax", "moe", "attention", "Model", "Engine",
]


# ---- errors ---------------------------------------------------------------------

class MinferError(RuntimeError):
    """A libminfer call failed. .status (int), .status_name ("MF_ERR_INVALID_ARG"),
    .message (mf_last_error(): it names the bad value)."""

    def __init__(self, status, status_name, message):
        self.status, self.status_name, self.message = status, status_name, message
        super().__init__(f"{status_name}: {message}")


class UnsupportedError(MinferError):
    """MF_ERR_UNSUPPORTED: valid arguments this backend/build cannot handle,
    or an op this library does not implement."""


def _raise_for(status, fallback=""):
    if status == L.MF_OK:
        return
    lib = L.load()
    name = (lib.mf_status_str(status) or b"MF_ERR_UNKNOWN").decode()
    msg = (lib.mf_last_error() or b"").decode(errors="replace") or fallback or "(no message)"
    cls = UnsupportedError if status == L.MF_ERR_UNSUPPORTED else MinferError
    raise cls(status, name, msg)


# ---- library information ----------------------------------------------------------

def version():
    """libminfer's version string ("0.1.0")."""
    return L.load().mf_version().decode()


def build_info():
    """One line saying how the library was built (CUDA archs, BLAS, OpenMP)."""
    return L.load().mf_build_info().decode()


def cuda_available():
    """True when the library has the CUDA backend and a device is usable."""
    return bool(L.load().mf_cuda_available())


def library_path():
    """The libminfer file in use."""
    return L.path()


# ---- backends: one per device, created on first use -----------------------------

class Backend:
    """A libminfer backend (mf_backend*). Get one with minfer.backend()."""

    def __init__(self, key):
        self.key = key  # ("cpu", None) | ("cuda", index)
        self.lock = threading.Lock()  # set_stream + op must not interleave
        self.stream = _UNSET  # the cudaStream_t (int) last given to mf_backend_set_stream
        self._handle = ctypes.c_void_p()
        lib = L.load()
        with _on_device(key):
            _raise_for(lib.mf_backend_init(key[0].encode(), ctypes.byref(self._handle)))

    @property
    def handle(self):
        if not self._handle:
            raise MinferError(L.MF_ERR_INVALID_ARG, "MF_ERR_INVALID_ARG", "backend already freed")
        return self._handle

    @property
    def name(self):
        return L.load().mf_backend_name(self.handle).decode()

    def sync(self):
        """Wait for queued work; raises on an asynchronous error (CUDA)."""
        with self.lock, _on_device(self.key):
            _raise_for(L.load().mf_backend_sync(self.handle))

    def set_stream(self, stream):
        """CUDA: run later ops on this cudaStream_t (an int address, None =
        the legacy default stream). Ops called with torch tensors set torch's
        current stream themselves."""
        with self.lock:
            self.stream = _UNSET
            _raise_for(L.load().mf_backend_set_stream(self.handle, stream or None))
            self.stream = stream or 0

    def free(self):
        """Frees the backend (waits for its queued work first); minfer.backend()
        then makes a new one for the device."""
        with self.lock, _on_device(self.key):
            if self._handle:
                L.load().mf_backend_free(self._handle)
                self._handle = ctypes.c_void_p()
        with _backends_lock:
            if _backends.get(self.key) is self:
                del _backends[self.key]

    def __repr__(self):
        dev = self.key[0] if self.key[1] is None else f"{self.key[0]}:{self.key[1]}"
        return f"<minfer.Backend {dev}>"


_UNSET = object()
_backends = {}
_backends_lock = threading.Lock()


def _parse_device(device):
    if isinstance(device, tuple):
        return device
    s = str(device)  # accepts torch.device too
    if s == "cpu":
        return ("cpu", None)
    if s == "cuda" or s.startswith("cuda:"):
        idx = int(s[5:]) if s.startswith("cuda:") else None
        if idx is None:
            torch = T.torch_module()
            idx = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0
        return ("cuda", idx)
    raise ValueError(f"unknown device {device!r} (want 'cpu', 'cuda' or 'cuda:N')")


def _on_device(key):
    """Make key's CUDA device current (via torch, when it is loaded)."""
    torch = T.torch_module()
    if key[0] == "cuda" and torch is not None and torch.cuda.is_available():
        return torch.cuda.device(key[1])
    return contextlib.nullcontext()


def backend(device="cpu"):
    """The cached Backend for device ("cpu", "cuda", "cuda:N" or a torch.device)."""
    key = _parse_device(device)
    with _backends_lock:
        be = _backends.get(key)
        if be is None:
            be = _backends[key] = Backend(key)
        return be


def synchronize(device="cuda"):
    """Wait for the device's queued minfer work and report asynchronous
    errors (e.g. an embedding id out of range on CUDA)."""
    backend(device).sync()


@atexit.register
def _free_backends():
    with _backends_lock:
        bes = list(_backends.values())
    for be in bes:
        be.free()


# ---- calling an op ---------------------------------------------------------------
# Per call, only what can change is looked up: the backend (a dict get), the
# CUDA device (switched only when torch's current one differs, and never with
# one visible device) and torch's current stream (the raw handle, passed to
# mf_backend_set_stream only when it changed). The C library validates every
# argument; Python checks only what it needs to build the call.

_NULLCTX = contextlib.nullcontext()
_cuda_devices = None  # torch.cuda.device_count(), asked once
_raw_stream = None    # torch's current-stream query: raw handle (int) for a device index


def _cuda_enter(torch, idx):
    """A context making device idx current: the null context when it is already."""
    global _cuda_devices
    if _cuda_devices is None:
        _cuda_devices = torch.cuda.device_count()
    if _cuda_devices <= 1 or torch.cuda.current_device() == idx:
        return _NULLCTX
    return torch.cuda.device(idx)


def _current_stream(torch, idx):
    global _raw_stream
    if _raw_stream is None:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own compiler uses
        _raw_stream = raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)
    return _raw_stream(idx)


def _run(key, fn, argp):
    """fn(backend handle, argp) on the backend of device key, on torch's
    current stream for CUDA; raises on a failed status."""
    be = _backends.get(key) or backend(key)
    with be.lock:
        if key[0] == "cuda":
            torch = T.torch_module()
            with _cuda_enter(torch, key[1]) if torch is not None else _on_device(key):
                stream = (_current_stream(torch, key[1]) or 0) if torch is not None else 0
                if stream != be.stream:
                    be.stream = _UNSET
                    _raise_for(L.load().mf_backend_set_stream(be.handle, stream or None))
                    be.stream = stream
                st = fn(be.handle, argp)
        else:
            st = fn(be.handle, argp)
        if st:
            _raise_for(st)


def _call(op, fn_name, args, views):
    """Run C function fn_name(be, &args) on the backend all views live on."""
    lib = L.load()
    fn = getattr(lib, fn_name, None)
    if fn is None:
        raise UnsupportedError(L.MF_ERR_UNSUPPORTED, "MF_ERR_UNSUPPORTED",
                               f"{op}: not implemented in this library ({fn_name} is missing from {L.path()})")
    first = views[0]
    for v in views[1:]:
        if v.device_key != first.device_key:
            raise ValueError(f"{op}: arguments on different devices ({_dev(first)} and {_dev(v)})")
    _run(first.device_key, fn, ctypes.byref(args))


def _dev(v):
    return v.device_key[0] if v.device_key[1] is None else f"{v.device_key[0]}:{v.device_key[1]}"


def _opt(x, what, views, writable=False):
    """Pointer to x's mf_tensor, or NULL for None."""
    if x is None:
        return None
    v = T.view(x, what, writable)
    views.append(v)
    return ctypes.pointer(v.t)


def _i32(x, what):
    """x as a C int32 field takes it: ctypes would silently wrap a larger value."""
    v = operator.index(x)
    if not -(1 << 31) <= v < (1 << 31):
        raise ValueError(f"{what} {v} does not fit an int32")
    return v


def _float(x, what):
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a number, got {type(x).__name__}") from None


# ---- ops ----------------------------------------------------------------------------

def gemm(a, b, c=None, bias=None, alpha=1.0, beta=0.0, gelu=False):
    """c = act(alpha * a @ b + beta * c + bias); returns c.

    a: (m, k) or (batch, m, k); b: (k, n) or (batch, k, n); transposed views
    (x.T, tensor.t()) are free. c: (m, n) or (batch, m, n) row-major, allocated
    with a's dtype when None (then beta must be 0). bias: (n), c's dtype.
    gelu: tanh-approximate GELU after the bias. Accumulation is f32. a and b
    share a dtype, except on the CPU, where b (a weight) may be f16/bf16 with
    f32 a and c: read in its dtype and widened in registers."""
    va, vb = T.view(a, "gemm: a"), T.view(b, "gemm: b")
    if c is None:
        if _float(beta, "gemm: beta") != 0.0:
            raise ValueError("gemm: beta != 0 reads c, but c is None")
        nd_a, nd_b = len(a.shape), len(b.shape)
        if nd_a != nd_b or nd_a not in (2, 3):
            raise ValueError(f"gemm: a has {nd_a} dims and b has {nd_b} (want both 2 or both 3)")
        shape = (a.shape[-2], b.shape[-1])
        if nd_a == 3:
            shape = (max(a.shape[0], b.shape[0]),) + shape
        c = T.empty_like_kind(a, shape)
    views = [va, vb, T.view(c, "gemm: c", writable=True)]
    args = L.GemmArgs(a=views[0].t, b=views[1].t, c=views[2].t)
    args.bias = _opt(bias, "gemm: bias", views)
    args.alpha = _float(alpha, "gemm: alpha")
    args.beta = _float(beta, "gemm: beta")
    args.epilogue = L.MF_EPILOGUE_GELU if gelu else L.MF_EPILOGUE_NONE
    _call("gemm", "mf_gemm", args, views)
    return c


_NORM_KINDS = {"rms": L.MF_NORM_RMS, "layer": L.MF_NORM_LAYER}


def add_norm(x, weight, residual=None, bias=None, kind="rms", eps=1e-5, sum_out=None, y=None):
    """Fused residual add + norm over rows: s = x + residual; y = norm(s) * weight (+ bias).

    x, residual, y, sum_out: (rows, dim), rows contiguous. kind: "rms" or
    "layer" (bias: LayerNorm only). sum_out: None (not written), True
    (allocated) or an array (may be x or residual). y: allocated like x when
    None; may be x (in place). Returns y, or (y, sum_out) when sum_out is given."""
    if kind not in _NORM_KINDS:
        raise ValueError(f"add_norm: kind {kind!r} (want 'rms' or 'layer')")
    vx = T.view(x, "add_norm: x")
    if y is None:
        y = T.empty_like_kind(x, tuple(x.shape))
    want_sum = sum_out is not None
    if sum_out is True:
        sum_out = T.empty_like_kind(x, tuple(x.shape))
    elif sum_out is False:
        raise ValueError("add_norm: sum_out is None, True or an array (not False)")
    views = [vx, T.view(y, "add_norm: y", writable=True),
             T.view(weight, "add_norm: weight")]
    args = L.NormArgs(x=views[0].t, y=views[1].t, weight=views[2].t)
    args.residual = _opt(residual, "add_norm: residual", views)
    args.sum_out = _opt(sum_out, "add_norm: sum_out", views, writable=True)
    args.bias = _opt(bias, "add_norm: bias", views)
    args.kind = _NORM_KINDS[kind]
    args.eps = _float(eps, "add_norm: eps")
    _call("add_norm", "mf_add_norm", args, views)
    return (y, sum_out) if want_sum else y


def embed(ids, table, out=None):
    """out[t, :] = table[ids[t], :]; ids: (n) int32, table: (vocab, dim).
    out: (n, dim), allocated with table's dtype when None. An id out of range
    raises (CPU at once; CUDA at the next minfer.synchronize())."""
    vi, vt = T.view(ids, "embed: ids"), T.view(table, "embed: table")
    if out is None:
        if len(ids.shape) != 1 or len(table.shape) != 2:
            raise ValueError(f"embed: ids has {len(ids.shape)} dims and table {len(table.shape)} "
                             f"(want 1 and 2)")
        out = T.empty_like_kind(table, (ids.shape[0], table.shape[1]))
    views = [vi, vt, T.view(out, "embed: out", writable=True)]
    args = L.EmbedArgs(ids=views[0].t, table=views[1].t, y=views[2].t)
    _call("embed", "mf_embed", args, views)
    return out


def add(a, b=None, alpha=1.0, beta=1.0, out=None):
    """out = alpha * a + beta * b (b None: out = alpha * a). a, b, out
    contiguous; b's element count divides a's and it is broadcast over a's
    leading elements (a bias row). out: allocated like a; may be a or b."""
    va = T.view(a, "add: a")
    if out is None:
        out = T.empty_like_kind(a, tuple(a.shape))
    views = [va, T.view(out, "add: out", writable=True)]
    args = L.AddArgs(a=views[0].t, y=views[1].t)
    args.b = _opt(b, "add: b", views)
    args.alpha = _float(alpha, "add: alpha")
    args.beta = _float(beta, "add: beta")
    _call("add", "mf_add", args, views)
    return out


# softmax with torch tensors (the HF attention drop-in calls it once per layer
# and step): the args struct packed into a per-thread buffer (_tensor.py).
_SM = L.SoftmaxArgs
_SM_TAIL = struct.Struct("=f?3xQQ")  # scale, causal, key_lens*, bias*
_SM_FAST = (T.FAST_OK and _SM.x.offset == 0 and _SM.y.offset == 88 and _SM.scale.offset == 176 and
            _SM.causal.offset == 180 and _SM.key_lens.offset == 184 and _SM.bias.offset == 192 and
            ctypes.sizeof(_SM) == 200)
_SM_EXTRA = (200, 288)  # key_lens and bias mf_tensors follow the args in the buffer
_tls = threading.local()
_sm_fn = None


def _softmax_fn():
    """mf_softmax taking a plain address (a prototype of its own: the declared
    one wants a SoftmaxArgs pointer), or None when the library lacks it."""
    global _sm_fn
    if _sm_fn is None:
        lib = L.load()
        if not hasattr(lib, "mf_softmax"):
            return None
        f = lib["mf_softmax"]  # a new function object, separate from lib.mf_softmax
        f.restype, f.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]
        _sm_fn = f
    return _sm_fn


def _softmax_torch(torch, x, y, scale, causal, key_lens, bias):
    fn = _softmax_fn()
    if fn is None:
        return None
    buf = getattr(_tls, "buf", None)
    if buf is None:
        buf = _tls.buf = (ctypes.c_int64 * 47)()  # 376 bytes, 8-aligned
        _tls.addr = ctypes.addressof(buf)
    addr = _tls.addr
    pack = T.TENSOR_FMT.pack_into
    key, f = T.torch_fields(x, "softmax: x")
    pack(buf, 0, *f)
    if y is not x:
        ky, f = T.torch_fields(y, "softmax: y")
        if ky != key:
            raise ValueError(f"softmax: arguments on different devices ({_dev_key(key)} and {_dev_key(ky)})")
    pack(buf, 88, *f)
    ptrs = [0, 0]
    for i, (t, what) in enumerate(((key_lens, "softmax: key_lens"), (bias, "softmax: bias"))):
        if t is not None:
            kt, f = T.torch_fields(t, what)
            if kt != key:
                raise ValueError(f"softmax: arguments on different devices ({_dev_key(key)} and {_dev_key(kt)})")
            pack(buf, _SM_EXTRA[i], *f)
            ptrs[i] = addr + _SM_EXTRA[i]
    _SM_TAIL.pack_into(buf, 176, _float(scale, "softmax: scale"), bool(causal), ptrs[0], ptrs[1])
    _run(key, fn, addr)
    return y


def _dev_key(key):
    return key[0] if key[1] is None else f"{key[0]}:{key[1]}"


def softmax(x, y=None, scale=1.0, causal=False, key_lens=None, bias=None):
    """y = softmax(scale * x + bias + mask) along the last dim.

    x, y: (rows, cols) or (batch, heads, q_len, k_len), last dim contiguous;
    y allocated like x when None; may be x (in place). causal: query i sees
    key j iff j <= i + k_len - q_len. key_lens: (batch) int32, keys j >=
    key_lens[b] masked. bias: additive, broadcastable by stride 0 / size 1.
    A fully masked row gives zeros."""
    torch = T.torch_module()
    if (_SM_FAST and torch is not None and isinstance(x, torch.Tensor) and
            (y is None or isinstance(y, torch.Tensor)) and
            (key_lens is None or isinstance(key_lens, torch.Tensor)) and
            (bias is None or isinstance(bias, torch.Tensor))):
        if y is None:
            y = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
        if _softmax_torch(torch, x, y, scale, causal, key_lens, bias) is not None:
            return y
    vx = T.view(x, "softmax: x")
    if y is None:
        y = T.empty_like_kind(x, tuple(x.shape))
    views = [vx, T.view(y, "softmax: y", writable=True)]
    args = L.SoftmaxArgs(x=views[0].t, y=views[1].t)
    args.scale = _float(scale, "softmax: scale")
    args.causal = bool(causal)
    args.key_lens = _opt(key_lens, "softmax: key_lens", views)
    args.bias = _opt(bias, "softmax: bias", views)
    _call("softmax", "mf_softmax", args, views)
    return y


def topk(x, k, scale=1.0):
    """Per row of x (rows, n), f32/f16/bf16, rows contiguous: the k (1 ..
    min(n, 1024)) largest values, best first (equal values: the lower index
    first), and the row's softmax statistics. Returns (ids (rows, k) int32,
    vals (rows, k) f32, stats (rows, 2) f32: max, sum of exp((x - max) *
    scale)), allocated like x. See mf_topk in include/minfer/ops.h for -inf,
    NaN and +inf rows."""
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"topk: k must be an integer, got {type(k).__name__}") from None
    if not 1 <= k <= 1024:  # checked here too: the C int32 would wrap a larger k
        raise ValueError(f"topk: k {k} not in [1, 1024] (MF_TOPK_MAX)")
    vx = T.view(x, "topk: x")
    rows = x.shape[0] if len(x.shape) == 2 else 0
    ids = T.empty_like_kind(x, (rows, k), dtype_of=_int32_like(x))
    vals, stats = _empty_f32(x, (rows, k)), _empty_f32(x, (rows, 2))
    views = [vx, T.view(ids, "topk: ids", writable=True), T.view(vals, "topk: vals", writable=True),
             T.view(stats, "topk: stats", writable=True)]
    args = L.TopkArgs(x=views[0].t, ids=views[1].t, vals=views[2].t, stats=views[3].t)
    args.k = k
    args.scale = _float(scale, "topk: scale")
    _call("topk", "mf_topk", args, views)
    return ids, vals, stats


def _int32_like(ref):
    """An empty int32 array of ref's kind (numpy or torch): a dtype source for empty_like_kind."""
    if T.is_torch(ref):
        torch = T.torch_module()
        return torch.empty(0, dtype=torch.int32)
    import numpy as np
    return np.empty(0, dtype=np.int32)


_MOE_FFN = {"swiglu": L.MF_MOE_FFN_SWIGLU, "gelu": L.MF_MOE_FFN_GELU}
_MOE_SCORE = {"softmax": L.MF_MOE_SCORE_SOFTMAX, "sigmoid": L.MF_MOE_SCORE_SIGMOID}
_MOE_ORDER = {"score_topk": L.MF_MOE_SCORE_THEN_TOPK, "topk_score": L.MF_MOE_TOPK_THEN_SCORE}


def moe(x, w_router, w1, w2, top_k, ffn="swiglu", score="softmax", order="score_topk", renorm=True,
        routed_scale=1.0, shared_w1=None, shared_w2=None, shared_gate=None, residual=None, out=None,
        workspace=None):
    """A Mixture-of-Experts layer (dropless): out = residual + sum_j w_j FFN_{e_j}(x) (+ gated shared FFN).

    x: (T, H); w_router: (E, H); w1: (E, 2I, H) gate|up rows for "swiglu",
    (E, I, H) for "gelu" (tanh GELU); w2: (E, H, I) (torch Linear layouts).
    score "softmax"|"sigmoid", order "score_topk" (Mixtral, Qwen) |
    "topk_score"; renorm: the k weights divided by their sum; routed_scale
    multiplies them. shared_w1 (2Is|Is, H) / shared_w2 (H, Is): an always-on
    shared expert, shared_gate (1, H): its sigmoid gate (Qwen-MoE).
    workspace: a contiguous scratch array/tensor on x's device (int32 is fine);
    allocated here when None (the size comes from mf_moe_workspace). Returns out (allocated like x)."""
    for name, table, val in (("ffn", _MOE_FFN, ffn), ("score", _MOE_SCORE, score), ("order", _MOE_ORDER, order)):
        if val not in table:
            raise ValueError(f"moe: {name} {val!r} (want one of {sorted(table)})")
    vx = T.view(x, "moe: x")
    if out is None:
        out = T.empty_like_kind(x, tuple(x.shape))
    views = [vx, T.view(w_router, "moe: w_router"), T.view(w1, "moe: w1"), T.view(w2, "moe: w2"),
             T.view(out, "moe: out", writable=True)]
    args = L.MoeArgs(x=views[0].t, w_router=views[1].t, w1=views[2].t, w2=views[3].t, out=views[4].t)
    args.ffn, args.score, args.order = _MOE_FFN[ffn], _MOE_SCORE[score], _MOE_ORDER[order]
    args.top_k = _i32(top_k, "moe: top_k")
    args.renorm = bool(renorm)
    args.routed_scale = _float(routed_scale, "moe: routed_scale")
    args.shared_w1 = _opt(shared_w1, "moe: shared_w1", views)
    args.shared_w2 = _opt(shared_w2, "moe: shared_w2", views)
    args.shared_gate = _opt(shared_gate, "moe: shared_gate", views)
    args.residual = _opt(residual, "moe: residual", views)
    lib = L.load()
    if not hasattr(lib, "mf_moe_workspace"):
        raise UnsupportedError(L.MF_ERR_UNSUPPORTED, "MF_ERR_UNSUPPORTED", "moe: not in this library")
    key = vx.device_key
    be = backend(key)
    need = ctypes.c_size_t(0)
    with be.lock, _on_device(key):
        _raise_for(lib.mf_moe_workspace(be.handle, ctypes.byref(args), ctypes.byref(need)))
    if workspace is None:
        workspace = T.empty_like_kind(x, (need.value // 4 + 1,), dtype_of=_I32Like(x))
    # The library carves its scratch from the start of one run of bytes: a
    # view that skips or repeats elements (expand, a step) would let it write
    # outside the memory the view covers.
    contiguous = workspace.is_contiguous() if T.is_torch(workspace) else workspace.flags["C_CONTIGUOUS"]
    if not contiguous:
        raise ValueError("moe: workspace must be contiguous (one run of bytes)")
    wv = T.view(workspace, "moe: workspace", writable=True)
    if (wv.t.data or 0) % 16:
        raise ValueError(f"moe: workspace at {wv.t.data or 0:#x} is not 16-byte aligned")
    views.append(wv)
    args.workspace = wv.t.data
    nbytes = workspace.numel() * workspace.element_size() if T.is_torch(workspace) else workspace.nbytes
    args.workspace_bytes = min(need.value, nbytes)  # too small: the library says so
    _call("moe", "mf_moe", args, views)
    return out


class _I32Like:
    """dtype_of for empty_like_kind: int32 of x's kind (numpy or torch)."""

    def __init__(self, x):
        if T.is_torch(x):
            self.dtype = T.torch_module().int32
        else:
            import numpy as np
            self.dtype = np.int32
def _host_ints(x):
    """An int32 index array's values on the host (a device tensor is copied: one sync)."""
    if T.is_torch(x):
        return [int(v) for v in x.detach().to("cpu").tolist()]
    return [int(v) for v in x.tolist()]


def _empty_f32(ref, shape):
    if T.is_torch(ref):
        torch = T.torch_module()
        return torch.empty(tuple(shape), dtype=torch.float32, device=ref.device)
    import numpy as np
    return np.empty(tuple(shape), dtype=np.float32)


def attention(q, k, v, *, causal=False, scale=None, window=0, cu_seqlens_q=None, cu_seqlens_k=None,
              max_q_len=None, max_k_len=None, k_lens=None, slots=None, block_table=None, return_lse=False,
              out=None, num_splits=0):
    """Flash attention (mf_attention); returns o, or (o, lse) with return_lse.

    Three modes, picked by the index arrays given (int32, on q's device):
      fixed:  q (batch, q_len, n_heads, D); k, v (batch, k_len, n_kv_heads, D)
      packed: q (total_q, n_heads, D), k, v (total_k, n_kv_heads, D) with
              cu_seqlens_q and cu_seqlens_k (batch + 1)
      cache:  q (total_q, n_heads, D) with cu_seqlens_q; k, v the cache
              (n_slots, max_len, n_kv_heads, D); k_lens (batch) keys per
              sequence; slots (batch) or None (slot b).
      paged:  cache mode with block_table (batch, max_blocks) int32: k, v a
              pool (n_blocks, block_size, n_kv_heads, D); key j of sequence b
              is row j % block_size of block block_table[b, j // block_size].
    causal: bottom-right aligned (query i sees keys j <= i + k_len - q_len);
    window > 0 (causal only): at most `window` keys ending at the query's own
    position. scale None: 1 / sqrt(D). max_q_len / max_k_len: host bounds of the
    lengths, computed from the index arrays (a device sync) when None. A query
    that sees no key gives o = 0 and lse = -inf. lse: (rows, n_heads) float32
    (fixed: (batch, q_len, n_heads)), natural log. out: o, allocated like q
    when None. num_splits: split-KV count (0: the backend chooses)."""
    vq = T.view(q, "attention: q")
    if out is None:
        out = T.empty_like_kind(q, tuple(q.shape))
    views = [vq, T.view(k, "attention: k"), T.view(v, "attention: v"),
             T.view(out, "attention: out", writable=True)]
    args = L.AttentionArgs(q=views[0].t, k=views[1].t, v=views[2].t, o=views[3].t)
    lse = None
    if return_lse:
        lse = _empty_f32(q, tuple(q.shape[:-1]))
        args.lse = _opt(lse, "attention: lse", views, writable=True)
    args.cu_seqlens_q = _opt(cu_seqlens_q, "attention: cu_seqlens_q", views)
    args.cu_seqlens_k = _opt(cu_seqlens_k, "attention: cu_seqlens_k", views)
    args.k_lens = _opt(k_lens, "attention: k_lens", views)
    args.slots = _opt(slots, "attention: slots", views)
    args.block_table = _opt(block_table, "attention: block_table", views)
    if cu_seqlens_q is None:
        args.batch = q.shape[0] if len(q.shape) == 4 else 0
    else:
        n = len(cu_seqlens_q)
        args.batch = n - 1 if n > 0 else 0
        cq = None
        if max_q_len is None:
            cq = _host_ints(cu_seqlens_q)
            max_q_len = max((cq[i + 1] - cq[i] for i in range(len(cq) - 1)), default=0)
        if max_k_len is None:
            if cu_seqlens_k is not None:
                ck = _host_ints(cu_seqlens_k)
                max_k_len = max((ck[i + 1] - ck[i] for i in range(len(ck) - 1)), default=0)
            elif k_lens is not None:
                max_k_len = max(_host_ints(k_lens), default=0)
            else:
                max_k_len = 0
    args.max_q_len = int(max_q_len or 0)
    args.max_k_len = int(max_k_len or 0)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] > 0 else 1.0
    args.scale = _float(scale, "attention: scale")
    args.causal = bool(causal)
    args.window = int(window)
    args.num_splits = _i32(num_splits, "attention: num_splits")
    _call_attention(args, views)
    return (out, lse) if return_lse else out


def _call_attention(args, views):
    """mf_attention with split-KV workspace: asked for, allocated on q's device
    (torch CUDA), kept alive until the op is queued (the caching allocator
    orders its reuse on the stream)."""
    lib = L.load()
    ws_fn = getattr(lib, "mf_attention_workspace", None)
    key = views[0].device_key
    if ws_fn is None or key[0] != "cuda":
        _call("attention", "mf_attention", args, views)
        return
    be = backend(key)
    nbytes = ctypes.c_size_t(0)
    with be.lock, _on_device(key):
        _raise_for(ws_fn(be.handle, ctypes.byref(args), ctypes.byref(nbytes)))
    ws = None
    if nbytes.value:
        torch = T.torch_module()
        ws = torch.empty(nbytes.value, dtype=torch.uint8, device=views[0].obj.device)
        args.workspace, args.workspace_bytes = ws.data_ptr(), nbytes.value
    _call("attention", "mf_attention", args, views)
    del ws


from .engine import Engine, Model  # noqa: E402  (models and the serving engine)
