"""minfer's fused scale + mask + softmax as a Hugging Face transformers
attention implementation.

    import minfer.hf_attention as mha
    mha.register()                       # once, before loading the model
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="minfer_softmax")

The attention is GPT-2-style eager attention with its three middle steps
fused: scores = Q @ K^T (torch.matmul), then one minfer.softmax call that
applies the scale, the causal mask (from indices: bottom-right aligned, as a
KV cache needs), any attention mask (as an additive bias broadcast over
heads) and the softmax in one pass, in place on the scores; then @ V. The
scale follows the module: 1/sqrt(head_dim) when `scale_attn_weights` (GPT-2),
divided by layer_idx + 1 when `scale_attn_by_inverse_layer_idx`; otherwise
the `scaling` the model passes, else 1/sqrt(head_dim).

Masks: the name is also registered with transformers' AttentionMaskInterface
(when it has one) using its SDPA mask builder, so a purely causal batch gets
no mask tensor at all (the kernel computes causality from indices) and a
padded batch a boolean (batch, 1, q, k) mask, turned into a 0/-inf bias here.
A float mask (older transformers build additive ones) is used as the bias
as it is.

While autograd records (training, or scores that require grad), the same
function runs as torch ops instead: minfer's kernel has no backward.

torch and transformers are imported only when register() or the attention
function runs, so importing this module needs neither.
"""

import weakref

from . import softmax as _softmax_op  # the package's binding (runs on torch's current stream)

NAME = "minfer_softmax"


def _softmax(x, y, scale, causal, bias):
    return _softmax_op(x, y=y, scale=scale, causal=causal, bias=bias)


def _softmax_autograd(torch, x, scale, causal, bias):
    """The same function in torch ops, for when autograd records (minfer's
    kernel has no backward): scale, bias, the bottom-right causal mask, an
    f32 softmax; a fully masked row gives zeros, as the kernel's does."""
    u = x.float() * scale
    if bias is not None:
        u = u + bias.float()
    if causal:
        q, k = x.shape[-2], x.shape[-1]
        i = torch.arange(q, device=x.device)[:, None]
        j = torch.arange(k, device=x.device)[None, :]
        u = u.masked_fill(j > i + (k - q), float("-inf"))
    blind = torch.isneginf(u).all(dim=-1, keepdim=True)
    w = torch.softmax(u.masked_fill(blind, 0.0), dim=-1).masked_fill(blind, 0.0)
    return w.to(x.dtype)


# Every layer of one forward pass gets the same mask tensor: its bias is
# built once and reused while the mask is that object, unchanged (version
# counter), for the same key length and dtype.
_bias_cache = None  # (weakref to the mask, its _version, key_len, dtype, bias)


def _scale_of(module, query, kwargs):
    head_dim = query.shape[-1]
    if hasattr(module, "scale_attn_weights"):  # GPT-2 and relatives
        scale = head_dim ** -0.5 if module.scale_attn_weights else 1.0
        if getattr(module, "scale_attn_by_inverse_layer_idx", False):
            scale /= float(getattr(module, "layer_idx", 0) + 1)
        return scale
    scaling = kwargs.get("scaling")
    return float(scaling) if scaling is not None else head_dim ** -0.5


def _bias_of(attention_mask, key_len, dtype):
    """The attention mask as an additive bias (batch|1, heads|1, q, k), or None."""
    global _bias_cache
    import torch
    if attention_mask is None:
        return None
    c = _bias_cache
    if (c is not None and c[0]() is attention_mask and c[1] == attention_mask._version and c[2] == key_len and
            c[3] == dtype):
        return c[4]
    bias = _bias_build(torch, attention_mask, key_len, dtype)
    try:
        _bias_cache = (weakref.ref(attention_mask), attention_mask._version, key_len, dtype, bias)
    except TypeError:  # not weak-referenceable: no cache
        _bias_cache = None
    return bias


def _bias_build(torch, attention_mask, key_len, dtype):
    mask = attention_mask[..., :key_len]
    if mask.dtype == torch.bool:  # True = attend
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        return bias.masked_fill_(~mask, float("-inf"))
    if mask.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        mask = mask.to(dtype)
    if mask.stride(-1) not in (0, 1) and mask.shape[-1] > 1:
        mask = mask.contiguous()
    return mask


def minfer_attention_forward(module, query, key, value, attention_mask, dropout=0.0, head_mask=None, **kwargs):
    """query: (batch, heads, q_len, head_dim); key, value: (batch, kv_heads, k_len, head_dim).
    Returns (attn_output (batch, q_len, heads, head_dim), attn_weights (batch, heads, q_len, k_len))."""
    import torch
    if key.shape[1] != query.shape[1]:  # grouped-query attention: share each K/V head
        rep = query.shape[1] // key.shape[1]
        key = key.repeat_interleave(rep, dim=1)
        value = value.repeat_interleave(rep, dim=1)
    scores = torch.matmul(query, key.transpose(-1, -2))  # (batch, heads, q_len, k_len), contiguous
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True) and not getattr(module, "is_cross_attention", False)
    causal = bool(is_causal) and query.shape[-2] > 1
    bias = _bias_of(attention_mask, key.shape[-2], scores.dtype)
    if scores.requires_grad and torch.is_grad_enabled():  # training: torch's ops, which have a backward
        weights = _softmax_autograd(torch, scores, _scale_of(module, query, kwargs), causal, bias)
    else:
        weights = _softmax(scores, scores, _scale_of(module, query, kwargs), causal, bias)
    weights = weights.to(value.dtype)
    if dropout and module.training:
        weights = torch.nn.functional.dropout(weights, p=dropout, training=True)
    if head_mask is not None:
        weights = weights * head_mask
    out = torch.matmul(weights, value)
    return out.transpose(1, 2).contiguous(), weights


def register(name=NAME):
    """Registers minfer_attention_forward under `name` with transformers'
    AttentionInterface (and the SDPA mask builder under the same name with
    AttentionMaskInterface, where transformers has it). Returns the name."""
    from transformers import AttentionInterface
    AttentionInterface.register(name, minfer_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # older transformers: models build their 4-D masks themselves
        return name
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
