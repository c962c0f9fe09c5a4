"""minfer.hf_attention on the CPU: a tiny random GPT-2 with
attn_implementation="minfer_softmax" against eager attention (same weights),
with and without a padding mask (the mask becomes a bias, built once per
forward and reused across layers), and the bias cache's invalidation."""

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import minfer  # noqa: E402
import minfer.hf_attention as mha  # noqa: E402


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    mha.register()
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=128, n_positions=64)
    torch.manual_seed(0)
    # a config each: the attention implementation is read from the config at run time
    eager = transformers.GPT2LMHeadModel._from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    with torch.no_grad():  # larger weights than GPT-2's init, so that attention is far from uniform
        for p in eager.parameters():
            p.mul_(8.0)
    ours = transformers.GPT2LMHeadModel._from_config(copy.deepcopy(cfg), attn_implementation="minfer_softmax").eval()
    ours.load_state_dict(eager.state_dict())
    return eager, ours


@pytest.mark.parametrize("padded", [False, True])
def test_logits_match_eager(models, padded, monkeypatch):
    eager, ours = models
    calls = []
    monkeypatch.setattr(mha, "_softmax_op", lambda *a, **k: calls.append(1) or minfer.softmax(*a, **k))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (3, 12), generator=g)
    kw = {}
    if padded:
        am = torch.ones_like(ids)
        am[0, :4] = 0  # left padding in row 0
        kw["attention_mask"] = am
    with torch.no_grad():
        a = eager(ids, **kw).logits
        b = ours(ids, **kw).logits
    assert len(calls) == 2  # one fused softmax per layer: the drop-in really ran
    rows = slice(None) if not padded else slice(1, None)  # padded query positions of row 0 may differ
    err = (a[rows] - b[rows]).abs().max().item()
    assert err <= 1e-4 * max(1.0, a.abs().max().item()), err
    if padded:
        assert (a[0, 4:] - b[0, 4:]).abs().max().item() <= 1e-4 * max(1.0, a.abs().max().item())


def test_bias_cache_follows_the_mask():
    m = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    m[0, 0, :, 0] = False
    b1 = mha._bias_of(m, 5, torch.float32)
    assert mha._bias_of(m, 5, torch.float32) is b1  # same mask object, unchanged: reused
    assert torch.isinf(b1[0, 0, :, 0]).all() and (b1[1] == 0).all()
    m[1, 0, :, 2] = False  # changed in place: rebuilt
    b2 = mha._bias_of(m, 5, torch.float32)
    assert b2 is not b1 and torch.isinf(b2[1, 0, :, 2]).all()
    assert mha._bias_of(m, 4, torch.float32).shape[-1] == 4  # other key length: rebuilt
    assert mha._bias_of(m, 5, torch.float16).dtype == torch.float16
    assert mha._bias_of(None, 5, torch.float32) is None
    # the softmax with that bias: masked keys get 0
    x = torch.randn(2, 1, 3, 5)
    y = minfer.softmax(x, bias=mha._bias_of(m, 5, torch.float32))
    assert (y[0, 0, :, 0] == 0).all() and (y[1, 0, :, 2] == 0).all()


def test_grad_mode_takes_torch_ops(models):
    """With autograd recording, minfer's ops (no backward) refuse tensors that
    require grad, and the drop-in computes the same function with torch ops:
    equal to the kernel's result (scale, bias, causal, a blind row) and
    gradients reach the inputs."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 6, 9, generator=g)
    bias = torch.zeros(2, 1, 6, 9)
    bias[1, 0, 2, :] = float("-inf")  # a fully masked row
    bias[0, 0, :, 3] = float("-inf")
    want = minfer.softmax(x, scale=0.3, causal=True, bias=bias)
    got = mha._softmax_autograd(torch, x, 0.3, True, bias)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert (got[1, :, 2] == 0).all()
    xg = x.clone().requires_grad_(True)
    with pytest.raises(RuntimeError, match="requires grad"):
        minfer.softmax(xg, scale=0.3)
    with torch.no_grad():
        minfer.softmax(xg, scale=0.3)  # fine without autograd
    eager, ours = models
    ours.train()
    try:
        ids = torch.randint(0, 128, (2, 10), generator=g)
        loss = ours(ids, labels=ids).loss
        loss.backward()
        assert ours.transformer.h[0].attn.c_attn.weight.grad is not None
    finally:
        ours.eval()
        ours.zero_grad(set_to_none=True)
