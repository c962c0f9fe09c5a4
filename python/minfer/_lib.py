"""Loading libminfer and the ctypes mirror of its C structs.

The structs here must match include/minfer/tensor.h and include/minfer/ops.h
field for field; ctypes inserts the same padding a C compiler does (the
binding's tests compile a probe that prints sizeof/offsetof to check it).
"""

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

# ---- enums (C ints) -----------------------------------------------------------

# mf_status
MF_OK = 0
MF_ERR_INVALID_ARG = 1
MF_ERR_UNSUPPORTED = 2
MF_ERR_OOM = 3
MF_ERR_IO = 4
MF_ERR_FORMAT = 5
MF_ERR_CUDA = 6
MF_ERR_INTERNAL = 7

# mf_dtype
MF_DTYPE_F32 = 0
MF_DTYPE_F16 = 1
MF_DTYPE_BF16 = 2
MF_DTYPE_I32 = 3
DTYPE_NAMES = {MF_DTYPE_F32: "f32", MF_DTYPE_F16: "f16", MF_DTYPE_BF16: "bf16", MF_DTYPE_I32: "i32"}

# mf_device
MF_DEVICE_CPU = 0
MF_DEVICE_CUDA = 1

# mf_epilogue, mf_norm_kind
MF_EPILOGUE_NONE = 0
MF_EPILOGUE_GELU = 1
MF_NORM_RMS = 0
MF_NORM_LAYER = 1

MF_MAX_DIMS = 4


# ---- structs ------------------------------------------------------------------

class Tensor(ctypes.Structure):
    """mf_tensor: a view (pointer, dtype, device, shape, strides in elements)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),   # mf_dtype
        ("device", ctypes.c_int),  # mf_device
        ("ndim", ctypes.c_int32),
        # 4 bytes of padding here, as in C: int64 fields are 8-aligned
        ("shape", ctypes.c_int64 * MF_MAX_DIMS),   # unused dims are 1
        ("stride", ctypes.c_int64 * MF_MAX_DIMS),  # elements; unused dims are 0
    ]


TensorP = ctypes.POINTER(Tensor)


class GemmArgs(ctypes.Structure):
    _fields_ = [
        ("a", Tensor), ("b", Tensor), ("c", Tensor),
        ("bias", TensorP),
        ("alpha", ctypes.c_float), ("beta", ctypes.c_float),
        ("epilogue", ctypes.c_int),  # mf_epilogue
    ]


class NormArgs(ctypes.Structure):
    _fields_ = [
        ("x", Tensor),
        ("residual", TensorP),
        ("sum_out", TensorP),
        ("y", Tensor),
        ("weight", Tensor),
        ("bias", TensorP),
        ("kind", ctypes.c_int),  # mf_norm_kind
        ("eps", ctypes.c_float),
    ]


class EmbedArgs(ctypes.Structure):
    _fields_ = [("ids", Tensor), ("table", Tensor), ("y", Tensor)]


class AddArgs(ctypes.Structure):
    _fields_ = [
        ("a", Tensor),
        ("b", TensorP),
        ("y", Tensor),
        ("alpha", ctypes.c_float), ("beta", ctypes.c_float),
    ]


class SoftmaxArgs(ctypes.Structure):
    _fields_ = [
        ("x", Tensor), ("y", Tensor),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_bool),  # C _Bool
        ("key_lens", TensorP),
        ("bias", TensorP),
    ]


class TopkArgs(ctypes.Structure):
    _fields_ = [
        ("x", Tensor),
        ("ids", Tensor), ("vals", Tensor), ("stats", Tensor),
        ("k", ctypes.c_int32),
        ("scale", ctypes.c_float),
    ]


# mf_moe_ffn, mf_moe_score, mf_moe_order
MF_MOE_FFN_SWIGLU = 0
MF_MOE_FFN_GELU = 1
MF_MOE_SCORE_SOFTMAX = 0
MF_MOE_SCORE_SIGMOID = 1
MF_MOE_SCORE_THEN_TOPK = 0
MF_MOE_TOPK_THEN_SCORE = 1


class MoeArgs(ctypes.Structure):
    _fields_ = [
        ("x", Tensor), ("w_router", Tensor), ("w1", Tensor), ("w2", Tensor),
        ("ffn", ctypes.c_int), ("top_k", ctypes.c_int32),
        ("score", ctypes.c_int), ("order", ctypes.c_int),
        ("renorm", ctypes.c_bool), ("routed_scale", ctypes.c_float),
        ("shared_w1", TensorP), ("shared_w2", TensorP), ("shared_gate", TensorP),
        ("residual", TensorP),
        ("out", Tensor),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
    ]


class AttentionArgs(ctypes.Structure):
    _fields_ = [
        ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
        ("lse", TensorP),
        ("cu_seqlens_q", TensorP), ("cu_seqlens_k", TensorP),
        ("k_lens", TensorP), ("slots", TensorP), ("block_table", TensorP),
        ("batch", ctypes.c_int32),
        ("max_q_len", ctypes.c_int64), ("max_k_len", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_bool),  # C _Bool
        ("window", ctypes.c_int64),
        ("num_splits", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
    ]


# ---- the serving engine (include/minfer/engine.h, generate.h) --------------------

class SamplerParams(ctypes.Structure):
    _fields_ = [
        ("temperature", ctypes.c_float), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float), ("seed", ctypes.c_uint64),
    ]


class EngineOpts(ctypes.Structure):
    _fields_ = [
        ("kv_blocks", ctypes.c_int64), ("kv_bytes", ctypes.c_int64), ("block_size", ctypes.c_int32),
        ("max_batched_tokens", ctypes.c_int64), ("max_seqs", ctypes.c_int32), ("max_model_len", ctypes.c_int64),
        ("no_prefix_cache", ctypes.c_bool),
    ]


class RequestParams(ctypes.Structure):
    _fields_ = [
        ("prompt", ctypes.POINTER(ctypes.c_int32)), ("n_prompt", ctypes.c_int64), ("max_tokens", ctypes.c_int64),
        ("n", ctypes.c_int32), ("sampler", SamplerParams),
        ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_int32),
        ("stop_ids", ctypes.POINTER(ctypes.c_int32)), ("n_stop_ids", ctypes.c_int32),
        ("ignore_eos", ctypes.c_bool), ("logprobs", ctypes.c_bool), ("top_logprobs", ctypes.c_int32),
        ("no_text", ctypes.c_bool), ("host_sampling", ctypes.c_bool),
    ]


class EngineEvent(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64), ("seq", ctypes.c_int32), ("token", ctypes.c_int32), ("logprob", ctypes.c_float),
        ("n_top", ctypes.c_int32), ("top_ids", ctypes.POINTER(ctypes.c_int32)),
        ("top_logprobs", ctypes.POINTER(ctypes.c_float)), ("text", ctypes.c_void_p), ("text_len", ctypes.c_size_t),
        ("finish", ctypes.c_int),
    ]


class EngineStepResult(ctypes.Structure):
    _fields_ = [
        ("n_events", ctypes.c_int32), ("events", ctypes.POINTER(EngineEvent)), ("n_decode", ctypes.c_int32),
        ("n_prefill", ctypes.c_int32), ("n_tokens", ctypes.c_int64), ("n_preempted", ctypes.c_int32),
    ]


class RequestInfo(ctypes.Structure):
    _fields_ = [
        ("n", ctypes.c_int32), ("n_prompt", ctypes.c_int64), ("n_cached", ctypes.c_int64),
        ("finished", ctypes.c_bool), ("n_preempted", ctypes.c_int32), ("t_queued", ctypes.c_double),
        ("t_first", ctypes.c_double), ("t_last", ctypes.c_double),
    ]


class SeqInfo(ctypes.Structure):
    _fields_ = [
        ("tokens", ctypes.POINTER(ctypes.c_int32)), ("n_tokens", ctypes.c_int64),
        ("logprobs", ctypes.POINTER(ctypes.c_float)), ("top_ids", ctypes.POINTER(ctypes.c_int32)),
        ("top_logprobs", ctypes.POINTER(ctypes.c_float)), ("n_top", ctypes.c_int32), ("text", ctypes.c_void_p),
        ("text_len", ctypes.c_size_t), ("finish", ctypes.c_int),
    ]


class EngineStats(ctypes.Structure):
    _fields_ = [
        ("n_running", ctypes.c_int32), ("n_waiting", ctypes.c_int32), ("kv_blocks", ctypes.c_int64),
        ("kv_blocks_used", ctypes.c_int64), ("kv_blocks_cached", ctypes.c_int64), ("block_size", ctypes.c_int32),
        ("max_model_len", ctypes.c_int64), ("max_batched_tokens", ctypes.c_int64), ("max_seqs", ctypes.c_int32),
        ("prompt_tokens", ctypes.c_int64), ("cached_tokens", ctypes.c_int64), ("generated_tokens", ctypes.c_int64),
        ("preemptions", ctypes.c_int64), ("steps", ctypes.c_int64), ("device_picks", ctypes.c_int64),
        ("logit_reads", ctypes.c_int64), ("kv_bytes", ctypes.c_int64),
    ]


# ---- the library ----------------------------------------------------------------

_c_status = ctypes.c_int
_vp = ctypes.c_void_p

# name -> (restype, argtypes). Ops get their args struct as a pointer.
_PROTOTYPES = {
    "mf_version": (ctypes.c_char_p, []),
    "mf_build_info": (ctypes.c_char_p, []),
    "mf_status_str": (ctypes.c_char_p, [ctypes.c_int]),
    "mf_last_error": (ctypes.c_char_p, []),
    "mf_clear_error": (None, []),
    "mf_cuda_available": (ctypes.c_bool, []),
    "mf_backend_init": (_c_status, [ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "mf_backend_free": (None, [_vp]),
    "mf_backend_name": (ctypes.c_char_p, [_vp]),
    "mf_backend_device": (ctypes.c_int, [_vp]),
    "mf_backend_sync": (_c_status, [_vp]),
    "mf_backend_set_stream": (_c_status, [_vp, _vp]),
    "mf_gemm": (_c_status, [_vp, ctypes.POINTER(GemmArgs)]),
    "mf_add_norm": (_c_status, [_vp, ctypes.POINTER(NormArgs)]),
    "mf_embed": (_c_status, [_vp, ctypes.POINTER(EmbedArgs)]),
    "mf_add": (_c_status, [_vp, ctypes.POINTER(AddArgs)]),
    "mf_softmax": (_c_status, [_vp, ctypes.POINTER(SoftmaxArgs)]),
    "mf_topk": (_c_status, [_vp, ctypes.POINTER(TopkArgs)]),
    "mf_moe": (_c_status, [_vp, ctypes.POINTER(MoeArgs)]),
    "mf_moe_workspace": (_c_status, [_vp, ctypes.POINTER(MoeArgs), ctypes.POINTER(ctypes.c_size_t)]),
    "mf_attention": (_c_status, [_vp, ctypes.POINTER(AttentionArgs)]),
    "mf_attention_workspace": (_c_status, [_vp, ctypes.POINTER(AttentionArgs), ctypes.POINTER(ctypes.c_size_t)]),
    # models, tokenizers, the serving engine
    "mf_model_load": (_c_status, [ctypes.c_char_p, _vp, _vp, ctypes.POINTER(_vp)]),
    "mf_model_free": (None, [_vp]),
    "mf_model_tokenizer": (_vp, [_vp]),
    "mf_generate_encode_prompt": (_c_status, [_vp, ctypes.c_char_p, ctypes.c_int, ctypes.c_int32,
                                              ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                              ctypes.POINTER(ctypes.c_int64)]),
    "mf_tokenizer_decode": (_c_status, [_vp, ctypes.POINTER(ctypes.c_int32), ctypes.c_int64,
                                        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]),
    "mf_tokenizer_free_buffer": (None, [_vp]),
    "mf_engine_create": (_c_status, [_vp, ctypes.POINTER(EngineOpts), ctypes.POINTER(_vp)]),
    "mf_engine_free": (None, [_vp]),
    "mf_engine_add_request": (_c_status, [_vp, ctypes.POINTER(RequestParams), ctypes.POINTER(ctypes.c_uint64)]),
    "mf_engine_step": (_c_status, [_vp, ctypes.POINTER(EngineStepResult)]),
    "mf_engine_abort": (_c_status, [_vp, ctypes.c_uint64]),
    "mf_engine_release": (_c_status, [_vp, ctypes.c_uint64]),
    "mf_engine_request_info": (_c_status, [_vp, ctypes.c_uint64, ctypes.POINTER(RequestInfo)]),
    "mf_engine_seq_info": (_c_status, [_vp, ctypes.c_uint64, ctypes.c_int32, ctypes.POINTER(SeqInfo)]),
    "mf_engine_get_stats": (_c_status, [_vp, ctypes.POINTER(EngineStats)]),
}

# Functions that may be missing from an older or partial build: their wrappers
# raise UnsupportedError instead of the import failing.
_OPTIONAL = {"mf_softmax", "mf_topk", "mf_moe", "mf_moe_workspace", "mf_attention", "mf_attention_workspace"}

_lock = threading.Lock()
_lib = None
_path = None


def _repo_root():
    return Path(__file__).resolve().parents[2]  # python/minfer/_lib.py -> repo


def candidates():
    """Where the library is looked for, in order: $MINFER_LIB, the repo's
    build/libminfer.so, then the system's library search."""
    out = []
    env = os.environ.get("MINFER_LIB")
    if env:
        return [env]  # an explicit choice is never second-guessed
    out.append(str(_repo_root() / "build" / "libminfer.so"))
    found = ctypes.util.find_library("minfer")
    if found:
        out.append(found)
    return out


def load():
    """The loaded ctypes.CDLL (loaded on first use, then cached)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        # libgomp reads OMP_WAIT_POLICY when it is loaded: passive, so that OpenMP
        # threads sleep between ops instead of spinning on a shared machine
        # (the CLI does the same; measured: an engine step 3 ms instead of 83 ms
        # on a loaded 2-core VM). A process that loaded libgomp already keeps its own.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        tried = []
        for cand in candidates():
            if os.sep in cand and not os.path.exists(cand):
                tried.append(f"{cand} (no such file)")
                continue
            try:
                lib = ctypes.CDLL(cand)
            except OSError as e:
                tried.append(f"{cand} ({e})")
                continue
            _declare(lib)
            _lib, _path = lib, cand
            return lib
        raise OSError(
            "minfer: cannot load libminfer.so; tried: " + "; ".join(tried or ["nothing"]) +
            ". Build it (cmake -B build && cmake --build build) or set MINFER_LIB to its path.")


def path():
    """The file the library was loaded from (loads it if needed)."""
    load()
    return _path


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            if name in _OPTIONAL:
                continue
            raise OSError(f"minfer: {name} is missing from the library; is it a libminfer build?")
        fn.restype = restype
        fn.argtypes = argtypes


def has(name):
    """True when the loaded library exports the C function `name`."""
    return hasattr(load(), name)


# The layout a C compiler gives these structs, for the binding's tests.
LAYOUT = {
    "mf_tensor": (Tensor, ["data", "dtype", "device", "ndim", "shape", "stride"]),
    "mf_gemm_args": (GemmArgs, ["a", "b", "c", "bias", "alpha", "beta", "epilogue"]),
    "mf_norm_args": (NormArgs, ["x", "residual", "sum_out", "y", "weight", "bias", "kind", "eps"]),
    "mf_embed_args": (EmbedArgs, ["ids", "table", "y"]),
    "mf_add_args": (AddArgs, ["a", "b", "y", "alpha", "beta"]),
    "mf_softmax_args": (SoftmaxArgs, ["x", "y", "scale", "causal", "key_lens", "bias"]),
    "mf_topk_args": (TopkArgs, ["x", "ids", "vals", "stats", "k", "scale"]),
    "mf_moe_args": (MoeArgs, ["x", "w_router", "w1", "w2", "ffn", "top_k", "score", "order", "renorm",
                              "routed_scale", "shared_w1", "shared_w2", "shared_gate", "residual", "out",
                              "workspace", "workspace_bytes"]),
    "mf_attention_args": (AttentionArgs, ["q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k", "k_lens",
                                          "slots", "block_table", "batch", "max_q_len", "max_k_len", "scale", "causal", "window",
                                          "num_splits", "workspace", "workspace_bytes"]),
    "mf_sampler_params": (SamplerParams, [f for f, _ in SamplerParams._fields_]),
    "mf_engine_opts": (EngineOpts, [f for f, _ in EngineOpts._fields_]),
    "mf_request_params": (RequestParams, [f for f, _ in RequestParams._fields_]),
    "mf_engine_event": (EngineEvent, [f for f, _ in EngineEvent._fields_]),
    "mf_engine_step_result": (EngineStepResult, [f for f, _ in EngineStepResult._fields_]),
    "mf_request_info": (RequestInfo, [f for f, _ in RequestInfo._fields_]),
    "mf_seq_info": (SeqInfo, [f for f, _ in SeqInfo._fields_]),
    "mf_engine_stats": (EngineStats, [f for f, _ in EngineStats._fields_]),
}
