"""Peers of `minfer bench model`: Hugging Face transformers on the same synthetic
configs, random weights, one process, one CSV.

On the GPU host (air-gapped; torch and transformers installed, no download):

    python3 bench/model_peers.py                      # --quick (default): < 5 min on an H100
    python3 bench/model_peers.py --full               # every config x batch x seq that fits
    python3 bench/model_peers.py --minfer build       # + build/minfer bench model, same cases
    python3 bench/model_peers.py --full --append --out docs/results/model.csv
    python3 bench/model_peers.py --dry-run [--full]   # the cases and memory estimates; no CUDA
    python3 bench/model_peers.py --device cpu --configs tiny   # smoke test, seconds, never published

scripts/gpu-check.sh calls it as `python3 bench/model_peers.py --out FILE` (the
quick subset) under its per-benchmark timeout; rows are written as cases
finish, so a cut-off run keeps what it measured. --minfer needs minfer's
libraries on LD_LIBRARY_PATH, as gpu-check.sh's deps stage exports them.

Configs (the presets of src/model/synthetic.c, checked against that file when
it is there; a mismatch is reported):
  small     GPT-2 shaped, 12 layers, hidden 768, 12 heads      (vocab 50257, 16384 learned positions,
  medium    GPT-2 shaped, 24 layers, hidden 1024, 16 heads      tanh GELU, ffn 4 x hidden, biases, tied)
  large     GPT-2 shaped, 32 layers, hidden 4096, 32 heads
  llama-7b  Llama-2-7B shaped: 32 layers, hidden 4096, 32 heads (no GQA), ffn 11008, vocab 32000, untied
  tiny, tiny-gpt2   2 layers, hidden 64 (smoke tests only)
Each is built with AutoModelForCausalLM.from_config (random init, directly on
the device in the chosen dtype), once per attention implementation:
hf_eager (attn_implementation="eager") and hf_sdpa ("sdpa"), and on request
hf_static_compile (SDPA + static KV cache + torch.compile "reduce-overhead").

Cases: --quick is small and medium at batch {1, 8} x seq {128, 2048} and
llama-7b at batch 1 x seq 512; --full is every config at batch
{1, 4, 8, 16, 32} x seq {128, 512, 2048, 8192}; --configs/--batch/--seq
override. Before a case runs its memory is estimated (weights + KV cache of
seq + gen tokens + the prefill's largest transients: MLP and hidden-state
temporaries, eager attention's (batch, heads, seq, seq) scores in bf16 and
float32 and the causal mask, the last-token logits). A case whose estimate is
above the device's memory is recorded as "skip_mem" without running; one that
runs out anyway (torch.cuda.OutOfMemoryError) is recorded as "oom" (or
"oom_decode" when its prefill was measured). A GPT-2 case whose seq + gen
exceeds its learned positions is "skip_max_pos".

Method (everything under torch.inference_mode(), input ids uniform random):
  prefill   model(input_ids, use_cache=True, logits_to_keep=1): one forward
            over batch x seq new tokens writing the KV cache and computing the
            last token's logits, as minfer's prefill does. CUDA events around
            each call (perf_counter on the CPU), --warmup runs first, then
            --iters timed runs (fewer, at least 3, when one takes long:
            --budget-s per phase); p50, p5 and p95 (nearest rank).
            prefill_tok_s = batch x seq / p50.
  ttft      generate(max_new_tokens=1): median wall time from the call to the
            first token (greedy), generate()'s own overhead included.
  decode    generate(min_new_tokens = max_new_tokens = --gen), greedy,
            use_cache=True: decode_ms_step = (T(gen) - T(1)) / (gen - 1) with
            T the median time of generate() for that many new tokens, i.e. the
            prefill and first token subtracted; decode_tok_s = batch /
            decode_ms_step (tokens of all sequences per second), what minfer's
            dec_tok/s counts. Each run is checked to have produced exactly
            seq + gen tokens per sequence.
  peak      torch.cuda.max_memory_allocated over the whole case (weights
            included), reset before it; GB = 1e9 bytes.

--minfer BUILD runs `BUILD/minfer bench model --synthetic CONFIG --batch B
--seq S --gen N --iters I --dtype D --format csv` per config (after the HF
models are freed) and maps its rows into the same columns as impl
"minfer_<attn>": fwd_ms (median) -> prefill_ms_p50 (minfer reports no
percentiles), dec_tok/s -> decode_tok_s, dec_ms -> decode_ms_step, ttft_ms,
mem_MB (weights + session as planned, not a measured peak) / 1e3 ->
peak_mem_gb. Sizes minfer skips (its session does not fit) are rows with
status "skipped: REASON".

Output: --out (docs/results/model.csv on CUDA, out/model_cpu_smoke.csv on the
CPU), overwritten unless --append; rows are written as each case finishes.
Columns: device, commit, date, impl, config, batch, seq, dtype,
prefill_ms_p50, prefill_ms_p5, prefill_ms_p95, prefill_tok_s, decode_tok_s,
ttft_ms, peak_mem_gb, status, then decode_ms_step, gen, est_mem_gb, note (the
torch/transformers versions, or what minfer's memory column means). A short
table is printed last, with minfer's speed-up over each HF row when --minfer
ran.
"""

import argparse
import csv
import datetime
import math
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))

# The presets of src/model/synthetic.c (kv_heads < heads would be GQA).
CONFIGS = {
    "small": dict(arch="gpt2", layers=12, hidden=768, heads=12, kv_heads=12, ffn=3072, vocab=50257, max_pos=16384),
    "medium": dict(arch="gpt2", layers=24, hidden=1024, heads=16, kv_heads=16, ffn=4096, vocab=50257, max_pos=16384),
    "large": dict(arch="gpt2", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=16384, vocab=50257, max_pos=16384),
    "llama-7b": dict(arch="llama", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000,
                     max_pos=4096),
    "tiny": dict(arch="llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=512, max_pos=1024),
    "tiny-gpt2": dict(arch="gpt2", layers=2, hidden=64, heads=4, kv_heads=4, ffn=256, vocab=512, max_pos=1024),
}
TINY = ("tiny", "tiny-gpt2")
FULL_BATCH = [1, 4, 8, 16, 32]
FULL_SEQ = [128, 512, 2048, 8192]
QUICK = [("small", [1, 8], [128, 2048]), ("medium", [1, 8], [128, 2048]), ("llama-7b", [1], [512])]
TINY_CASES = ([1, 4], [32, 128])  # the smoke test's (batches, seqs)
IMPLS = {"hf_eager": "eager", "hf_sdpa": "sdpa", "hf_static_compile": "sdpa"}
# hf_static_compile: the strongest PyTorch decode set-up HF documents: SDPA, a
# static KV cache (generation_config.cache_implementation = "static") and the
# forward compiled with torch.compile(mode="reduce-overhead") (CUDA Graphs).
# Each new shape compiles first: the untimed warm-up runs absorb that.
COMPILED = {"hf_static_compile"}
DEFAULT_IMPLS = "hf_eager,hf_sdpa"  # hf_static_compile on request: its compiles take minutes per shape
COLUMNS = ["device", "commit", "date", "impl", "config", "batch", "seq", "dtype", "prefill_ms_p50", "prefill_ms_p5",
           "prefill_ms_p95", "prefill_tok_s", "decode_tok_s", "ttft_ms", "peak_mem_gb", "status",
           "decode_ms_step", "gen", "est_mem_gb", "note"]
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
GB = 1e9


def commit():
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL).strip() or "unknown"
    except Exception:  # noqa: BLE001 - no git, not a checkout
        return "unknown"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- shapes and memory ----------------------------------------------------------------------------


def param_count(c):
    """Parameters of the HF model (equal to minfer's for these presets)."""
    h, f, v, L = c["hidden"], c["ffn"], c["vocab"], c["layers"]
    kv = c["kv_heads"] * (h // c["heads"])
    if c["arch"] == "gpt2":  # wte (tied) + wpe; per layer qkv, o, fc, proj with biases, 2 LayerNorms; final LN
        per = h * 3 * h + 3 * h + h * h + h + h * f + f + f * h + h + 4 * h
        return v * h + c["max_pos"] * h + L * per + 2 * h
    per = h * h + 2 * h * kv + h * h + 3 * h * f + 2 * h  # q, k, v, o, gate/up/down, 2 RMSNorms
    return 2 * v * h + L * per + h  # embedding + untied lm_head; final norm


def estimate(c, impl, B, S, gen, dtype):
    """Rough upper estimate of the peak bytes of one case, by part."""
    e = DTYPE_BYTES[dtype]
    h, f, H, L = c["hidden"], c["ffn"], c["heads"], c["layers"]
    kv_dim = c["kv_heads"] * (h // H)
    T = B * S
    w = param_count(c) * e
    kv = 2 * L * B * (S + gen) * kv_dim * e
    kv += kv // L  # generate()'s DynamicCache grows by torch.cat: one layer's old copy is live
    act = T * (8 * h + 4 * f) * e  # residual, norms, qkv, attention out; fc/gate/up and the activation's temporaries
    if impl == "hf_eager":  # scores, scaled, masked (dtype) and the float32 softmax, + the (B, 1, S, S) mask
        attn = B * H * S * S * (e + e + 4) + B * S * S * e
    else:  # fused SDPA: q, k, v, out copies only
        attn = 4 * T * h * e
    logits = B * c["vocab"] * (e + 4 + 4)  # last token: dtype, float32 upcast, scores in generate()
    slack = 256 << 20  # cuBLAS workspaces, small temporaries
    return dict(weights=w, kv=kv, act=act, attn=attn, logits=logits, total=w + kv + act + attn + logits + slack)


def check_synthetic_c(path=os.path.join(ROOT, "src", "model", "synthetic.c")):
    """Compares CONFIGS with the presets in synthetic.c; returns mismatch lines ([] if it agrees or is absent)."""
    try:
        src = open(path, encoding="utf-8").read()
    except OSError:
        return []
    bad = []
    m = re.search(r"gpt2_shaped\(int32_t.*?s\.vocab = (\d+), s\.max_pos = (\d+)", src, re.S)
    gpt2_vocab, gpt2_pos = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    for name, kind, args in re.findall(r'strcmp\(name, "([\w-]+)"\)\)\s*\*s = (gpt2_shaped|llama_shaped)\(([^)]*)\)',
                                       src):
        if name not in CONFIGS or name == "tiny-gpt2":
            continue
        c = CONFIGS[name]
        try:
            a = [int(x) for x in args.split(",")]
        except ValueError:
            bad.append(f"{name}: cannot read '{args}'")
            continue
        if kind == "gpt2_shaped":
            got = dict(arch="gpt2", layers=a[0], hidden=a[1], heads=a[2], kv_heads=a[2], ffn=4 * a[1],
                       vocab=gpt2_vocab, max_pos=gpt2_pos)
        else:
            got = dict(arch="llama", layers=a[0], hidden=a[1], heads=a[2], kv_heads=a[3], ffn=a[4], vocab=a[5],
                       max_pos=a[6])
        diff = {k: (c[k], got[k]) for k in got if got[k] is not None and c[k] != got[k]}
        if diff:
            bad.append(f"{name}: here vs synthetic.c: " + ", ".join(f"{k} {x} vs {y}" for k, (x, y) in diff.items()))
    return bad


def cases(a):
    """[(config, batch, seq)] in run order."""
    if a.configs:
        names = a.configs.split(",")
        for n in names:
            if n not in CONFIGS:
                sys.exit(f"model_peers: unknown config '{n}' (want: {', '.join(CONFIGS)})")
        groups = []
        for n in names:
            if n in TINY:
                bs, ss = TINY_CASES
            elif a.full:
                bs, ss = FULL_BATCH, FULL_SEQ
            else:
                q = dict((c, (b, s)) for c, b, s in QUICK)
                bs, ss = q.get(n, ([1, 8], [128, 2048]))
            groups.append((n, bs, ss))
    else:
        groups = [(n, FULL_BATCH, FULL_SEQ) for n in ("small", "medium", "large", "llama-7b")] if a.full else QUICK
    out = []
    for n, bs, ss in groups:
        bs = [int(x) for x in a.batch.split(",")] if a.batch else bs
        ss = [int(x) for x in a.seq.split(",")] if a.seq else ss
        out += [(n, b, s) for b in bs for s in ss]
    return out


def precheck(c, impl, B, S, a, capacity):
    """(status or None, estimate dict) before a case runs."""
    est = estimate(c, impl, B, S, a.gen, a.dtype)
    if c["arch"] == "gpt2" and S + a.gen > c["max_pos"]:
        return f"skip_max_pos ({S}+{a.gen} > {c['max_pos']})", est
    if capacity and est["total"] > capacity:
        return f"skip_mem (est {est['total'] / GB:.1f} GB > {capacity / GB:.1f} GB)", est
    return None, est


def dry_run(a, todo, impls):
    capacity = a.mem_gb * (1 << 30)
    print(f"# capacity {capacity / GB:.1f} GB (--mem-gb {a.mem_gb} GiB), dtype {a.dtype}, gen {a.gen}; GB = 1e9 bytes")
    for line in check_synthetic_c():
        print(f"# WARNING config differs from src/model/synthetic.c: {line}")
    print(f"{'config':>9} {'params':>8} {'impl':>9} {'batch':>5} {'seq':>5} {'weights':>8} {'kv':>8} {'act':>8} "
          f"{'attn':>8} {'total':>8}  status")
    n_run = 0
    for name, B, S in todo:
        c = CONFIGS[name]
        for impl in impls:
            st, e = precheck(c, impl, B, S, a, capacity)
            n_run += st is None
            print(f"{name:>9} {param_count(c) / 1e9:7.3f}B {impl:>9} {B:5d} {S:5d} {e['weights'] / GB:8.2f} "
                  f"{e['kv'] / GB:8.2f} {e['act'] / GB:8.2f} {e['attn'] / GB:8.2f} {e['total'] / GB:8.2f}  "
                  f"{st or 'run'}")
    print(f"# {len(todo)} cases x {len(impls)} implementations, {n_run} to run")
    if a.minfer:
        for name, bs, ss in minfer_calls(todo):
            print("# " + " ".join(minfer_cmd(a, name, bs, ss)))
    meta_check(todo)


def meta_check(todo):
    """With torch and transformers at hand: builds each config on the meta device (no memory, no CUDA)
    and compares its parameter count with param_count()."""
    import importlib.util
    if not (importlib.util.find_spec("torch") and importlib.util.find_spec("transformers")):
        print("# (torch/transformers not importable here: parameter counts not cross-checked)")
        return
    import torch
    for name in dict.fromkeys(n for n, _, _ in todo):
        with torch.device("meta"):
            m = build_hf(torch, CONFIGS[name], "sdpa", torch.float32)
        n = sum(p.numel() for p in m.parameters())
        ok = n == param_count(CONFIGS[name])
        print(f"# {name}: HF model on the meta device has {n} parameters, estimate {param_count(CONFIGS[name])}: "
              f"{'ok' if ok else 'MISMATCH'}")


# ---- Hugging Face -----------------------------------------------------------------------------------


def hf_config(c):
    import transformers
    if c["arch"] == "gpt2":
        return transformers.GPT2Config(n_layer=c["layers"], n_embd=c["hidden"], n_head=c["heads"],
                                       n_inner=c["ffn"], vocab_size=c["vocab"], n_positions=c["max_pos"],
                                       activation_function="gelu_new", layer_norm_epsilon=1e-5,
                                       tie_word_embeddings=True, bos_token_id=c["vocab"] - 1,
                                       eos_token_id=c["vocab"] - 1)
    return transformers.LlamaConfig(hidden_size=c["hidden"], intermediate_size=c["ffn"],
                                    num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                                    num_key_value_heads=c["kv_heads"], vocab_size=c["vocab"],
                                    max_position_embeddings=c["max_pos"], rms_norm_eps=1e-5,
                                    tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)


def build_hf(torch, c, attn, dtype):
    """Random-initialised model, created in `dtype` on the current default device (a `with torch.device`)."""
    import transformers
    cfg = hf_config(c)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # parameters are created in dtype directly: no float32 copy of 7B weights
    try:
        m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    finally:
        torch.set_default_dtype(old)
    got = getattr(m.config, "_attn_implementation", attn)
    if got != attn:
        raise RuntimeError(f"asked for attn_implementation={attn}, the model uses {got}")
    m.generation_config.pad_token_id = cfg.eos_token_id
    return m.eval()


class Timer:
    """CUDA events on a GPU, perf_counter on the CPU; returns milliseconds."""

    def __init__(self, torch, cuda):
        self.torch, self.cuda = torch, cuda
        if cuda:
            self.t0 = torch.cuda.Event(enable_timing=True)
            self.t1 = torch.cuda.Event(enable_timing=True)

    def __call__(self, fn):
        if self.cuda:
            self.t0.record()
            out = fn()
            self.t1.record()
            self.t1.synchronize()
            return self.t0.elapsed_time(self.t1), out
        t = time.perf_counter()
        out = fn()
        return 1e3 * (time.perf_counter() - t), out


def nearest_rank(sorted_ms, q):
    return sorted_ms[max(0, math.ceil(q * len(sorted_ms)) - 1)]


def repeat(timer, fn, warmup, iters, budget_s, check=None):
    """Timed runs after warm-up; the count shrinks (not below 3) so a phase takes about budget_s."""
    first = None
    for _ in range(warmup):
        ms, out = timer(fn)
        first = ms if first is None else min(first, ms)
        if check:
            check(out)
        del out
    if first:
        iters = max(3, min(iters, int(budget_s * 1e3 / max(first, 1e-3))))
    samples = []
    for _ in range(iters):
        ms, out = timer(fn)
        if check:
            check(out)
        del out
        samples.append(ms)
    return sorted(samples)


def last_logits_kw(model):
    """The forward() argument that computes only the last position's logits (renamed in transformers 4.50)."""
    import inspect
    params = inspect.signature(model.forward).parameters
    for k in ("logits_to_keep", "num_logits_to_keep"):
        if k in params:
            return {k: 1}
    return {}


def run_hf_case(torch, model, c, B, S, a, dev, timer):
    """Measures one case; returns a dict of result columns (status 'ok', 'oom' or 'oom_decode')."""
    r = {"status": "ok"}
    g = torch.Generator(device="cpu").manual_seed(1000 * B + S)
    ids = torch.randint(0, c["vocab"], (B, S), generator=g).to(dev)
    mask = torch.ones_like(ids)
    kw = last_logits_kw(model) if a.logits_to_keep else {}
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    phase = "prefill"
    try:
        with torch.inference_mode():
            pre = repeat(timer, lambda: model(input_ids=ids, use_cache=True, **kw), a.warmup, a.iters, a.budget_s)
            p50 = statistics.median(pre)
            r.update(prefill_ms_p50=p50, prefill_ms_p5=nearest_rank(pre, 0.05), prefill_ms_p95=nearest_rank(pre, 0.95),
                     prefill_tok_s=B * S / (p50 / 1e3))
            phase = "decode"

            def gen(n):
                return lambda: model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                              do_sample=False, num_beams=1, use_cache=True)

            def length_is(n):
                def check(out):
                    if tuple(out.shape) != (B, S + n):
                        raise RuntimeError(f"generate() returned shape {tuple(out.shape)}, expected {(B, S + n)}")
                return check

            gi = max(3, a.iters // 2)
            t1 = statistics.median(repeat(timer, gen(1), 1, gi, a.budget_s, length_is(1)))
            tn = statistics.median(repeat(timer, gen(a.gen), 1, gi, a.budget_s, length_is(a.gen)))
            step = (tn - t1) / (a.gen - 1)
            r.update(ttft_ms=t1, decode_ms_step=step, decode_tok_s=B / (step / 1e3) if step > 0 else float("nan"))
            if step <= 0:  # only seen on a busy CPU: timing noise larger than gen - 1 steps
                r["status"] = "decode_noise"
    except torch.cuda.OutOfMemoryError:
        r["status"] = "oom" if phase == "prefill" else "oom_decode"
    if dev.type == "cuda":
        r["peak_mem_gb"] = torch.cuda.max_memory_allocated() / GB
    return r


def free_cuda(torch, dev):
    import gc
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


# ---- minfer ------------------------------------------------------------------------------------------


def minfer_calls(todo):
    """Groups the cases per config into as few `minfer bench model` calls as cover them exactly:
    one call when a config's cases are a full batch x seq product, else one per batch."""
    calls = []
    for name in dict.fromkeys(n for n, _, _ in todo):
        mine = [(b, s) for n, b, s in todo if n == name]
        bs, ss = list(dict.fromkeys(b for b, _ in mine)), list(dict.fromkeys(s for _, s in mine))
        if len(bs) * len(ss) == len(set(mine)):
            calls.append((name, bs, ss))
        else:
            calls += [(name, [b], [s for bb, s in mine if bb == b]) for b in bs]
    return calls


def minfer_cmd(a, name, bs, ss, attn):
    exe = os.path.join(a.minfer, "minfer")
    return [exe, "bench", "model", "--synthetic", name, "--batch", ",".join(map(str, bs)), "--seq",
            ",".join(map(str, ss)), "--gen", str(a.gen), "--iters", str(a.minfer_iters), "--dtype", a.dtype,
            "--backend", "cpu" if a.device == "cpu" else "cuda", "--attn", attn, "--format", "csv"]


def f(row, key):
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None


def run_minfer(a, name, bs, ss, base, attn):
    """Rows of one `minfer bench model --attn ATTN` call, in this script's columns (impl minfer_ATTN)."""
    impl = f"minfer_{attn}"
    cmd = minfer_cmd(a, name, bs, ss, attn)
    print("model_peers: " + " ".join(cmd), file=sys.stderr, flush=True)
    rows, seen = [], set()
    note = "minfer: peak_mem_gb = weights + session (KV cache, scratch) as planned, not measured"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.minfer_timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [dict(base, impl=impl, config=name, batch=b, seq=s, status=f"error: {e}"[:200])
                for b in bs for s in ss]
    for r in csv.DictReader(p.stdout.splitlines()):
        try:
            b, s = int(r["batch"]), int(r["seq"])
        except (KeyError, ValueError):
            continue
        seen.add((b, s))
        mem = f(r, "mem_MB")
        rows.append(dict(base, device=r.get("device") or base["device"], impl=impl, config=name, batch=b,
                         seq=s, dtype=r.get("dtype", a.dtype), prefill_ms_p50=f(r, "fwd_ms"),
                         prefill_tok_s=f(r, "prefill_tok/s"), decode_tok_s=f(r, "dec_tok/s"), ttft_ms=f(r, "ttft_ms"),
                         decode_ms_step=f(r, "dec_ms"), peak_mem_gb=mem / 1e3 if mem is not None else None,
                         status="ok", note=note))
    skipped = {(int(b), int(s)): why.strip() for b, s, why in
               re.findall(r"batch (\d+) seq (\d+) skipped: ([^\n\r]*)", p.stderr)}
    last = next((ln for ln in reversed(p.stderr.splitlines()) if "error" in ln), f"exit {p.returncode}")
    for b in bs:
        for s in ss:
            if (b, s) not in seen:
                why = f"skipped: {skipped[(b, s)]}" if (b, s) in skipped else f"error: {last.strip()}"
                rows.append(dict(base, impl=impl, config=name, batch=b, seq=s, status=why[:300]))
    return rows


# ---- output --------------------------------------------------------------------------------------------


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}" if abs(v) < 1 else f"{v:.2f}" if abs(v) < 1e5 else f"{v:.0f}"
    return str(v)


class Sink:
    """The CSV file, rows written (and flushed) as they come; keeps them for the summary."""

    def __init__(self, path, append):
        self.rows = []
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        exists = append and os.path.exists(path) and os.path.getsize(path) > 0
        if exists:
            with open(path, newline="") as fh:
                head = next(csv.reader(fh), [])
            if head != COLUMNS:
                sys.exit(f"model_peers: {path} has other columns ({','.join(head)}); not appending")
        self.fh = open(path, "a" if exists else "w", newline="")
        self.w = csv.DictWriter(self.fh, fieldnames=COLUMNS)
        if not exists:
            self.w.writeheader()

    def add(self, row):
        self.rows.append(row)
        self.w.writerow({k: fmt(row.get(k)) for k in COLUMNS})
        self.fh.flush()


def summary(rows):
    print(f"\n{'impl':>15} {'config':>9} {'batch':>5} {'seq':>5} {'prefill_ms':>10} {'prefill_tok/s':>13} "
          f"{'decode_tok/s':>12} {'ttft_ms':>9} {'mem_GB':>7}  status")
    for r in rows:
        print(f"{r['impl']:>15} {r['config']:>9} {r['batch']:5d} {r['seq']:5d} {fmt(r.get('prefill_ms_p50')):>10} "
              f"{fmt(r.get('prefill_tok_s')):>13} {fmt(r.get('decode_tok_s')):>12} {fmt(r.get('ttft_ms')):>9} "
              f"{fmt(r.get('peak_mem_gb')):>7}  {r['status']}")
    for mimpl in sorted({r["impl"] for r in rows if r["impl"].startswith("minfer_")}):
        mi = {(r["config"], r["batch"], r["seq"]): r for r in rows if r["impl"] == mimpl and r["status"] == "ok"}
        if not mi:
            continue
        print(f"\n{mimpl} speed-up over HF (prefill: HF ms / minfer ms; decode: minfer tok/s / HF tok/s):")
        for r in rows:
            m = mi.get((r["config"], r["batch"], r["seq"]))
            if r["impl"].startswith("minfer_") or not m or r["status"] != "ok":
                continue
            pre = r["prefill_ms_p50"] / m["prefill_ms_p50"] if m.get("prefill_ms_p50") else None
            dec = m["decode_tok_s"] / r["decode_tok_s"] if m.get("decode_tok_s") and r.get("decode_tok_s") else None
            print(f"  {r['config']:>9} b{r['batch']:<3d} s{r['seq']:<5d} vs {r['impl']:<9}: prefill x{fmt(pre)}, "
                  f"decode x{fmt(dec)}")


# ---- main ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="the default subset (< 5 min on an H100)")
    mode.add_argument("--full", action="store_true", help="every config x batch {1,4,8,16,32} x seq {128..8192}")
    ap.add_argument("--configs", help=f"comma-separated, of: {', '.join(CONFIGS)}")
    ap.add_argument("--batch", help="comma-separated batch sizes (override)")
    ap.add_argument("--seq", help="comma-separated prompt lengths (override)")
    ap.add_argument("--impls", default=DEFAULT_IMPLS, help="comma-separated, of: " + ", ".join(IMPLS))
    ap.add_argument("--dtype", default="bf16", choices=list(DTYPE_BYTES))
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: smoke tests only")
    ap.add_argument("--gen", type=int, help="new tokens per generate() for the decode rate (>= 2; default 32, CPU 8)")
    ap.add_argument("--warmup", type=int, help="untimed runs first (default 2, CPU 1)")
    ap.add_argument("--iters", type=int, help="timed prefill runs (default 10, CPU 3); generate(): half, at least 3")
    ap.add_argument("--budget-s", type=float, help="seconds per timed phase, >= 3 runs (default 3, CPU 0.5)")
    ap.add_argument("--no-logits-to-keep", dest="logits_to_keep", action="store_false",
                    help="prefill computes every position's logits (HF's default forward) instead of the last")
    ap.add_argument("--out", help="CSV (default docs/results/model.csv; on --device cpu out/model_cpu_smoke.csv)")
    ap.add_argument("--append", action="store_true", help="append to --out instead of overwriting it")
    ap.add_argument("--minfer", metavar="BUILD_DIR", help="also run BUILD_DIR/minfer bench model on the same cases")
    ap.add_argument("--minfer-attn", default="flash,classic",
                    help="comma-separated attention paths of minfer to run (flash, classic): impl minfer_<attn>")
    ap.add_argument("--minfer-iters", type=int, default=5)
    ap.add_argument("--minfer-timeout", type=float, default=3600, help="seconds per minfer call")
    ap.add_argument("--threads", type=int, default=1, help="--device cpu: torch threads (1: no spinning)")
    ap.add_argument("--dry-run", action="store_true", help="print the cases and memory estimates; no CUDA")
    ap.add_argument("--mem-gb", type=float, default=79.0, help="device memory in GiB for --dry-run's fit check")
    a = ap.parse_args()
    cpu = a.device == "cpu"
    for k, gpu_v, cpu_v in (("gen", 32, 8), ("warmup", 2, 1), ("iters", 10, 3), ("budget_s", 3.0, 0.5)):
        if getattr(a, k) is None:
            setattr(a, k, cpu_v if cpu else gpu_v)
    if a.gen < 2:
        ap.error("--gen wants at least 2 (the decode rate is T(gen) - T(1))")
    impls = a.impls.split(",")
    for i in impls:
        if i not in IMPLS:
            ap.error(f"unknown implementation '{i}' (want: {', '.join(IMPLS)})")
    if cpu and not a.configs:
        a.configs = "tiny"
    todo = cases(a)
    if a.minfer and not os.path.exists(os.path.join(a.minfer, "minfer")):
        ap.error(f"--minfer: no {os.path.join(a.minfer, 'minfer')}")
    if a.dry_run:
        dry_run(a, todo, impls)
        return 0

    import torch
    import transformers
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("model_peers: no CUDA device (use --dry-run, or --device cpu --configs tiny for a smoke test)")
    for line in check_synthetic_c():
        print(f"model_peers: WARNING config differs from src/model/synthetic.c: {line}", file=sys.stderr)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    if dev.type == "cuda":
        device_name = torch.cuda.get_device_name()
        capacity = torch.cuda.mem_get_info()[1]
    else:
        import platform
        torch.set_num_threads(a.threads)
        device_name = f"cpu {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
        capacity = None
    out = a.out or (os.path.join(ROOT, "docs", "results", "model.csv") if dev.type == "cuda"
                    else os.path.join(ROOT, "out", "model_cpu_smoke.csv"))
    sink = Sink(out, a.append)
    cm = commit()
    note = f"torch {torch.__version__}, transformers {transformers.__version__}"
    print(f"model_peers: {device_name}, commit {cm}, {note}, {len(todo)} cases x {impls} -> {out}", file=sys.stderr)
    timer = Timer(torch, dev.type == "cuda")

    for name in dict.fromkeys(n for n, _, _ in todo):
        c = CONFIGS[name]
        mine = [(b, s) for n, b, s in todo if n == name]
        for impl in impls:
            model = None
            for B, S in mine:
                base = dict(device=device_name, commit=cm, date=utc_now(), impl=impl, config=name, batch=B, seq=S,
                            dtype=a.dtype, gen=a.gen, note=note)
                st, est = precheck(c, impl, B, S, a, capacity)
                base["est_mem_gb"] = est["total"] / GB
                if st:
                    sink.add(dict(base, status=st))
                    continue
                res = {}
                try:
                    if model is None:
                        t = time.perf_counter()
                        with dev:
                            model = build_hf(torch, c, IMPLS[impl], dtype)
                            if impl in COMPILED:
                                model.generation_config.cache_implementation = "static"
                                model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                        print(f"model_peers: built {name} ({param_count(c) / 1e6:.1f}M params, {impl}) in "
                              f"{time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
                    res = run_hf_case(torch, model, c, B, S, a, dev, timer)
                except torch.cuda.OutOfMemoryError:
                    res = {"status": "oom"}
                except Exception as e:  # noqa: BLE001 - record the case and go on
                    res = {"status": f"error: {type(e).__name__}: {e}".replace("\n", " ")[:300]}
                free_cuda(torch, dev)
                row = dict(base, **res)
                sink.add(row)
                print(f"model_peers: {impl} {name} b{B} s{S}: prefill {fmt(row.get('prefill_ms_p50'))} ms, "
                      f"decode {fmt(row.get('decode_tok_s'))} tok/s, ttft {fmt(row.get('ttft_ms'))} ms, "
                      f"peak {fmt(row.get('peak_mem_gb'))} GB: {row['status']}", file=sys.stderr, flush=True)
            del model
            free_cuda(torch, dev)
        if a.minfer:  # after the HF models of this config are gone
            for cname, bs, ss in minfer_calls([(n, b, s) for n, b, s in todo if n == name]):
                for attn in [x for x in a.minfer_attn.split(",") if x]:
                    base = dict(device=device_name, commit=cm, date=utc_now(), dtype=a.dtype, gen=a.gen)
                    for r in run_minfer(a, cname, bs, ss, base, attn):
                        r["est_mem_gb"] = None
                        sink.add(r)
    sink.fh.close()
    summary(sink.rows)
    print(f"\nmodel_peers: {len(sink.rows)} rows -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
