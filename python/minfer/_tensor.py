"""numpy arrays and torch tensors as mf_tensor views (zero-copy).

numpy: CPU only; strides arrive in bytes and become element strides.
torch: CPU or CUDA tensors; data_ptr() and element strides as they are.
torch is never imported here: a torch tensor can only exist if the caller
imported torch already, so sys.modules tells.
"""

import ctypes
import struct
import sys

import numpy as np

from . import _lib as L

_NP_DTYPES = {
    np.dtype(np.float32): L.MF_DTYPE_F32,
    np.dtype(np.float16): L.MF_DTYPE_F16,
    np.dtype(np.int32): L.MF_DTYPE_I32,
}
_np_bf16 = None  # np.dtype of ml_dtypes.bfloat16 once looked up (False: absent)


def np_bf16():
    """numpy's bfloat16 dtype from ml_dtypes, or None when it is not installed."""
    global _np_bf16
    if _np_bf16 is None:
        try:
            import ml_dtypes
            _np_bf16 = np.dtype(ml_dtypes.bfloat16)
            _NP_DTYPES[_np_bf16] = L.MF_DTYPE_BF16
        except ImportError:
            _np_bf16 = False
    return _np_bf16 or None


def torch_module():
    return sys.modules.get("torch")


def is_torch(x):
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


_torch_codes = None  # torch dtype -> mf_dtype, built once


def _torch_dtypes(torch):
    global _torch_codes
    if _torch_codes is None:
        _torch_codes = {torch.float32: L.MF_DTYPE_F32, torch.float16: L.MF_DTYPE_F16,
                        torch.bfloat16: L.MF_DTYPE_BF16, torch.int32: L.MF_DTYPE_I32}
    return _torch_codes


# ---- the per-call fast path for torch tensors ---------------------------------------
# An mf_tensor packed with struct into a reusable buffer instead of a ctypes
# Structure built and filled field by field (the latter is most of the
# binding's per-call time: ~3 us of ~10). The format is checked against the
# ctypes mirror (whose layout tests/python checks against the C headers).
TENSOR_FMT = struct.Struct("=Qiii4x4q4q")  # data, dtype, device, ndim, pad, shape[4], stride[4]
FAST_OK = (TENSOR_FMT.size == ctypes.sizeof(L.Tensor) and L.Tensor.dtype.offset == 8 and
           L.Tensor.ndim.offset == 16 and L.Tensor.shape.offset == 24 and L.Tensor.stride.offset == 56)
_PAD_ONES = ((1, 1, 1, 1), (1, 1, 1), (1, 1), (1,), ())
_PAD_ZEROS = ((0, 0, 0, 0), (0, 0, 0), (0, 0), (0,), ())


def no_grad_needed(torch, x, what):
    """minfer's ops have no backward: a tensor that requires grad while
    autograd records would get a result that silently drops its gradient
    (or, written in place, a wrong one). Refused, with the way out."""
    if x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{what}: the tensor requires grad and minfer's ops have no backward; call them under "
                           f"torch.no_grad() or torch.inference_mode(), or pass x.detach()")


def torch_fields(x, what):
    """(device_key, mf_tensor field values) of torch tensor x: what view()
    checks, without building a ctypes struct."""
    torch = sys.modules["torch"]
    if x.requires_grad:
        no_grad_needed(torch, x, what)
    code = _torch_dtypes(torch).get(x.dtype)
    if code is None or x.layout is not torch.strided:
        _view_torch(x, what)  # raises the usual error
    if x.is_cuda:
        key, device = ("cuda", x.get_device()), L.MF_DEVICE_CUDA
    elif x.is_cpu:
        key, device = ("cpu", None), L.MF_DEVICE_CPU
    else:
        _view_torch(x, what)
        raise TypeError(f"{what}: tensors on {x.device} are not supported (cpu or cuda)")
    shape, stride = x.shape, x.stride()
    nd = len(shape)
    if nd < 1 or nd > L.MF_MAX_DIMS:
        raise ValueError(f"{what}: {nd} dims (minfer takes 1 to {L.MF_MAX_DIMS})")
    return key, (x.data_ptr(), code, device, nd, *shape, *_PAD_ONES[nd], *stride, *_PAD_ZEROS[nd])


class View:
    """One argument converted: its mf_tensor and where it lives.

    device_key: ("cpu", None) or ("cuda", index); keeps `obj` alive."""

    __slots__ = ("obj", "t", "device_key", "kind")

    def __init__(self, obj, t, device_key, kind):
        self.obj, self.t, self.device_key, self.kind = obj, t, device_key, kind


def _fill(t, data, dtype, device, shape, stride, what):
    nd = len(shape)
    if nd < 1 or nd > L.MF_MAX_DIMS:
        raise ValueError(f"{what}: {nd} dims (minfer takes 1 to {L.MF_MAX_DIMS})")
    t.data = data or None
    t.dtype = dtype
    t.device = device
    t.ndim = nd
    for i in range(L.MF_MAX_DIMS):
        t.shape[i] = shape[i] if i < nd else 1
        t.stride[i] = stride[i] if i < nd else 0


def view(x, what, writable=False):
    """x (numpy array or torch tensor) as a View; `what` names it in errors
    ("gemm: a"). writable: x is an output."""
    if isinstance(x, np.ndarray):
        return _view_numpy(x, what, writable)
    if is_torch(x):
        return _view_torch(x, what)
    raise TypeError(f"{what}: expected a numpy.ndarray or torch.Tensor, got {type(x).__name__}")


def _view_numpy(x, what, writable):
    dt = x.dtype
    np_bf16()  # registers bfloat16 when ml_dtypes is there
    code = _NP_DTYPES.get(dt)
    if code is None:
        hint = " (bfloat16 needs ml_dtypes)" if np_bf16() is None else ""
        raise TypeError(f"{what}: numpy dtype {dt} is not supported (want float32, float16, "
                        f"bfloat16 or int32{hint})")
    if writable and not x.flags.writeable:
        raise ValueError(f"{what}: the output array is read-only")
    if not x.flags.aligned:
        raise ValueError(f"{what}: the array's data is not aligned to its {dt.itemsize}-byte elements "
                         f"(use numpy.ascontiguousarray)")
    item = dt.itemsize
    strides = []
    if x.size == 0:  # numpy gives empty arrays 0 strides; no element is addressed anyway
        x_strides, st = [], 1
        for n in reversed(x.shape):
            x_strides.insert(0, st * item)
            st *= max(n, 1)
    else:
        x_strides = x.strides
    for i, (n, s) in enumerate(zip(x.shape, x_strides)):
        if n <= 1:  # a size-0/1 dim's stride is never used: keep it harmless
            strides.append(s // item if s >= 0 and s % item == 0 else 0)
            continue
        if s < 0:
            raise ValueError(f"{what}: negative stride {s} bytes on dim {i} (reversed views are not "
                             f"supported; use numpy.ascontiguousarray)")
        if s % item:
            raise ValueError(f"{what}: stride {s} bytes on dim {i} is not a multiple of the "
                             f"{item}-byte element (use numpy.ascontiguousarray)")
        strides.append(s // item)
    t = L.Tensor()
    _fill(t, x.ctypes.data, code, L.MF_DEVICE_CPU, x.shape, strides, what)
    return View(x, t, ("cpu", None), "numpy")


def _view_torch(x, what):
    torch = torch_module()
    code = _torch_dtypes(torch).get(x.dtype)
    if code is None:
        raise TypeError(f"{what}: torch dtype {x.dtype} is not supported (want float32, float16, "
                        f"bfloat16 or int32)")
    dev = x.device
    if dev.type == "cuda":
        device, key = L.MF_DEVICE_CUDA, ("cuda", dev.index if dev.index is not None
                                          else torch.cuda.current_device())
    elif dev.type == "cpu":
        device, key = L.MF_DEVICE_CPU, ("cpu", None)
    else:
        raise TypeError(f"{what}: tensors on {dev} are not supported (cpu or cuda)")
    if x.is_sparse or x.layout != torch.strided:
        raise TypeError(f"{what}: layout {x.layout} is not supported (strided tensors only)")
    no_grad_needed(torch, x, what)
    t = L.Tensor()
    _fill(t, x.data_ptr(), code, device, tuple(x.shape), tuple(x.stride()), what)
    return View(x, t, key, "torch")


def empty_like_kind(ref, shape, dtype_of=None):
    """A new uninitialised array/tensor of `shape`, of the same kind (numpy or
    torch), device and dtype as `ref` (or as `dtype_of` when given)."""
    src = dtype_of if dtype_of is not None else ref
    if is_torch(ref):
        torch = torch_module()
        return torch.empty(tuple(shape), dtype=src.dtype, device=ref.device)
    return np.empty(tuple(shape), dtype=src.dtype)
