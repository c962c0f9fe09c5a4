"""The serving engine through the binding (minfer.Model, minfer.Engine) on
the default model, on the CPU and on CUDA (skipped without a device; the
kernel emulator's build runs them: MINFER_LIB=build-emu/libminfer.so, .ci/run):
requests added while others run give what they give alone, abort frees the
pool, the prefix cache serves a repeated prompt, logprobs are
log-probabilities, bad requests raise naming the value."""

import math
from pathlib import Path

import pytest

import minfer

MODEL = Path(__file__).resolve().parents[2] / "models" / "minfer-kjv-3m"


@pytest.fixture(scope="module", params=["cpu", "cuda"])
def model(request):
    if request.param == "cuda" and not minfer.cuda_available():
        pytest.skip("no CUDA device")
    m = minfer.Model(MODEL, backend=request.param)
    yield m
    m.close()


def test_encode_decode(model):
    ids = model.encode("In the beginning God created the heaven and the earth.")
    assert len(ids) > 5
    assert model.decode(ids).endswith("In the beginning God created the heaven and the earth.")


def test_joining_requests_give_what_they_give_alone(model):
    prompts = [model.encode(t) for t in ("In the beginning", "And God said, Let there be light",
                                           "The LORD is my shepherd", "Blessed are the meek")]
    alone = []
    for p in prompts:
        eng = minfer.Engine(model, max_seqs=4)
        alone.append(eng.generate([p], max_tokens=24)[0]["tokens"])
        eng.close()
    eng = minfer.Engine(model, max_seqs=4, kv_blocks=6, block_size=16)  # small: preemption
    streamed = {}

    def step():
        for ev in eng.step():
            if ev.token is not None:
                streamed.setdefault(ev.id, []).append(ev.token)

    a = eng.add_request(prompts[0], max_tokens=24)
    for _ in range(3):
        step()
    b = eng.add_request(prompts[1], max_tokens=24)  # joins a running batch
    step()
    c = eng.add_request(prompts[2], max_tokens=24)
    d = eng.add_request(prompts[3], max_tokens=24)
    while not all(eng.finished(r) for r in (a, b, c, d)):
        step()
    for r, want in zip((a, b, c, d), alone):
        assert eng.result(r)["tokens"] == want
        assert streamed[r] == want  # the events carried every token once, in order
    assert eng.stats()["preemptions"] > 0


def test_abort_frees_blocks_and_prefix_cache(model):
    eng = minfer.Engine(model, max_seqs=2, block_size=16)
    p = model.encode("And the earth was without form, and void; and darkness was upon the face of the deep. " * 3)
    r = eng.add_request(p, max_tokens=100)
    eng.step()
    eng.step()
    assert eng.stats()["kv_blocks_used"] > 0
    eng.abort(r)
    assert eng.stats()["kv_blocks_used"] == 0
    assert eng.result(r)["finish"] == "abort"
    with pytest.raises(minfer.MinferError, match="finished already"):
        eng.abort(r)
    eng.release(r)
    r2 = eng.add_request(p, max_tokens=4)
    while not eng.finished(r2):
        eng.step()
    assert eng.info(r2)["n_cached"] >= 16 * ((len(p) - 1) // 16) - 16  # the prompt's full blocks were cached
    assert eng.info(r2)["n_cached"] > 0


def test_logprobs_and_n(model):
    eng = minfer.Engine(model, max_seqs=4)
    p = model.encode("The LORD said unto Moses")
    r = eng.add_request(p, max_tokens=8, n=3, temperature=1.0, seed=5, logprobs=True, top_logprobs=5)
    events = []
    while not eng.finished(r):
        events += eng.step()
    seqs = {ev.seq for ev in events}
    assert seqs == {0, 1, 2}
    for ev in events:
        if ev.token is None:
            continue
        assert ev.logprob <= 0 and len(ev.top) == 5
        tops = [lp for _, lp in ev.top]
        assert tops == sorted(tops, reverse=True)
        assert sum(math.exp(lp) for lp in tops) <= 1 + 1e-5
        assert ev.logprob <= tops[0] + 1e-6
    # sequence i is the request with seed 5 + i alone
    for i in range(3):
        one = eng.generate([p], max_tokens=8, temperature=1.0, seed=5 + i)[0]["tokens"]
        assert eng.result(r, i)["tokens"] == one


def test_bad_requests(model):
    eng = minfer.Engine(model, max_seqs=2)
    with pytest.raises(minfer.MinferError, match="prompt has 0 tokens"):
        eng.add_request([], max_tokens=4)
    with pytest.raises(minfer.MinferError, match="max_tokens 0"):
        eng.add_request([1, 2], max_tokens=0)
    with pytest.raises(minfer.MinferError, match="top_p 2"):
        eng.add_request([1, 2], max_tokens=4, top_p=2.0)
    with pytest.raises(minfer.MinferError, match="no request 12345"):
        eng.abort(12345)
    with pytest.raises(minfer.MinferError, match="block_size 48"):
        minfer.Engine(model, block_size=48)
    r = eng.add_request([1, 2], max_tokens=2)  # still usable
    while not eng.finished(r):
        eng.step()
