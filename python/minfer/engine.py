"""Models and the serving engine (include/minfer/engine.h) from Python.

    import minfer
    m = minfer.Model("models/minfer-kjv-3m")            # CPU unless backend="cuda"
    eng = minfer.Engine(m, max_seqs=16)
    a = eng.add_request(m.encode("In the beginning"), max_tokens=20)
    b = eng.add_request(m.encode("And God said"), max_tokens=20, temperature=0.8, seed=1, n=2)
    while not eng.finished(a) or not eng.finished(b):
        for ev in eng.step():                           # one iteration over everything running
            print(ev.id, ev.seq, ev.token, ev.text)
    print(eng.result(a)["text"])

Requests can be added and aborted between steps; `generate` runs a batch
of prompts to the end. One thread drives an engine (as the C API says).
"""

import ctypes
import math
from collections import namedtuple

from . import _lib as L

FINISH = {0: None, 1: "eos", 2: "stop", 3: "length", 4: "abort"}

Event = namedtuple("Event", "id seq token logprob top text finish")


def _check(status, what):
    if status != L.MF_OK:
        from . import _raise_for
        _raise_for(status, what)


class Model:
    """A Hugging Face checkpoint folder loaded on a backend ("cpu", "cuda" or "auto")."""

    def __init__(self, path, backend="cpu"):
        lib = L.load()
        self._lib = lib
        self._be = ctypes.c_void_p()
        self._m = ctypes.c_void_p()
        _check(lib.mf_backend_init(str(backend).encode(), ctypes.byref(self._be)), f"backend {backend}")
        st = lib.mf_model_load(str(path).encode(), self._be, None, ctypes.byref(self._m))
        if st != L.MF_OK:
            lib.mf_backend_free(self._be)
            self._be = None
            _check(st, f"model {path}")
        self._tok = lib.mf_model_tokenizer(self._m)

    def encode(self, text, bos="auto"):
        """Token ids of a prompt, BOS added as the tokenizer does (bos: auto | add | none)."""
        if not self._tok:
            raise ValueError("this model has no tokenizer")
        modes = {"auto": 0, "add": 1, "none": 2}
        if bos not in modes:
            raise ValueError(f"bos {bos!r}: want auto, add or none")
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_int64()
        _check(self._lib.mf_generate_encode_prompt(self._tok, text.encode(), modes[bos], 0, ctypes.byref(ids),
                                                   ctypes.byref(n)), "encode")
        out = [ids[i] for i in range(n.value)]
        self._lib.mf_tokenizer_free_buffer(ids)
        return out

    def decode(self, ids):
        """The text of token ids (bytes that form no character come out as U+FFFD)."""
        if not self._tok:
            raise ValueError("this model has no tokenizer")
        arr = (ctypes.c_int32 * len(ids))(*ids)
        text = ctypes.c_void_p()
        n = ctypes.c_size_t()
        _check(self._lib.mf_tokenizer_decode(self._tok, arr, len(ids), ctypes.byref(text), ctypes.byref(n)), "decode")
        out = ctypes.string_at(text, n.value).decode("utf-8", errors="replace")
        self._lib.mf_tokenizer_free_buffer(text)
        return out

    def close(self):
        if getattr(self, "_m", None):
            self._lib.mf_model_free(self._m)
            self._m = None
        if getattr(self, "_be", None):
            self._lib.mf_backend_free(self._be)
            self._be = None

    def __del__(self):
        self.close()


class Engine:
    """Continuous batching over a paged KV cache with prefix caching.

    Sizes (0 or None: the engine's defaults): kv_blocks or kv_bytes (the KV
    pool), block_size (tokens per block), max_batched_tokens (token rows per
    step), max_seqs (sequences per step), max_model_len; prefix_cache."""

    def __init__(self, model, *, kv_blocks=0, kv_bytes=0, block_size=0, max_batched_tokens=0, max_seqs=0,
                 max_model_len=0, prefix_cache=True):
        self._lib = L.load()
        self.model = model  # kept alive while the engine is
        o = L.EngineOpts(kv_blocks=int(kv_blocks or 0), kv_bytes=int(kv_bytes or 0), block_size=int(block_size or 0),
                         max_batched_tokens=int(max_batched_tokens or 0), max_seqs=int(max_seqs or 0),
                         max_model_len=int(max_model_len or 0), no_prefix_cache=not prefix_cache)
        self._e = ctypes.c_void_p()
        _check(self._lib.mf_engine_create(model._m, ctypes.byref(o), ctypes.byref(self._e)), "engine")
        self._done = set()

    def add_request(self, prompt, *, max_tokens=16, n=1, temperature=0.0, top_k=0, top_p=0.0, min_p=0.0,
                    repetition_penalty=0.0, seed=0, stop=None, stop_ids=None, ignore_eos=False, logprobs=False,
                    top_logprobs=0, text=True):
        """Queues a request (prompt: token ids) and returns its id."""
        ids = list(prompt)
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        stops = [s.encode() for s in (stop or [])]
        c_stop = (ctypes.c_char_p * max(1, len(stops)))(*stops)
        sids = list(stop_ids or [])
        c_sids = (ctypes.c_int32 * max(1, len(sids)))(*sids)
        sp = L.SamplerParams(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                             min_p=float(min_p), repetition_penalty=float(repetition_penalty), seed=int(seed))
        p = L.RequestParams(prompt=arr, n_prompt=len(ids), max_tokens=int(max_tokens), n=int(n), sampler=sp,
                            stop=c_stop, n_stop=len(stops), stop_ids=c_sids, n_stop_ids=len(sids),
                            ignore_eos=bool(ignore_eos), logprobs=bool(logprobs), top_logprobs=int(top_logprobs),
                            no_text=not text)
        rid = ctypes.c_uint64()
        _check(self._lib.mf_engine_add_request(self._e, ctypes.byref(p), ctypes.byref(rid)), "add_request")
        return rid.value

    def step(self):
        """One iteration: a list of Events (id, seq, token, logprob, top, text, finish)."""
        r = L.EngineStepResult()
        st = self._lib.mf_engine_step(self._e, ctypes.byref(r))
        out = []
        for i in range(r.n_events):
            ev = r.events[i]
            top = [(ev.top_ids[j], ev.top_logprobs[j]) for j in range(ev.n_top)]
            text = ctypes.string_at(ev.text, ev.text_len).decode("utf-8", errors="replace") if ev.text_len else ""
            fin = FINISH.get(ev.finish, "?")
            out.append(Event(ev.id, ev.seq, ev.token if ev.token >= 0 else None,
                             None if math.isnan(ev.logprob) else ev.logprob, top, text, fin))
        _check(st, "step")
        return out

    def abort(self, rid):
        _check(self._lib.mf_engine_abort(self._e, int(rid)), "abort")

    def release(self, rid):
        _check(self._lib.mf_engine_release(self._e, int(rid)), "release")

    def info(self, rid):
        i = L.RequestInfo()
        _check(self._lib.mf_engine_request_info(self._e, int(rid), ctypes.byref(i)), "request_info")
        return {"n": i.n, "n_prompt": i.n_prompt, "n_cached": i.n_cached, "finished": i.finished,
                "n_preempted": i.n_preempted, "t_queued": i.t_queued, "t_first": i.t_first, "t_last": i.t_last}

    def finished(self, rid):
        return self.info(rid)["finished"]

    def result(self, rid, seq=0):
        """Sequence `seq` of a request so far: tokens, text, finish, logprobs."""
        s = L.SeqInfo()
        _check(self._lib.mf_engine_seq_info(self._e, int(rid), int(seq), ctypes.byref(s)), "seq_info")
        toks = [s.tokens[i] for i in range(s.n_tokens)]
        lps = [s.logprobs[i] for i in range(s.n_tokens)] if s.logprobs else None
        return {"tokens": toks, "text": ctypes.string_at(s.text, s.text_len).decode("utf-8", errors="replace"),
                "finish": FINISH.get(s.finish), "logprobs": lps}

    def stats(self):
        s = L.EngineStats()
        _check(self._lib.mf_engine_get_stats(self._e, ctypes.byref(s)), "stats")
        return {f: getattr(s, f) for f, _ in L.EngineStats._fields_}

    def generate(self, prompts, **params):
        """Runs prompts (lists of token ids) to the end together; a result dict per prompt."""
        rids = [self.add_request(p, **params) for p in prompts]
        while not all(self.finished(r) for r in rids):
            self.step()
        n = params.get("n", 1)
        out = [[self.result(r, i) for i in range(n)] if n > 1 else self.result(r) for r in rids]
        for r in rids:
            self.release(r)
        return out

    def close(self):
        if getattr(self, "_e", None):
            self._lib.mf_engine_free(self._e)
            self._e = None

    def __del__(self):
        self.close()
