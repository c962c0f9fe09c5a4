#!/usr/bin/env python3
"""Load test of an OpenAI-compatible server (`minfer serve`, or any other) with the
definitions of vLLM's `vllm bench serve`.

    python3 bench/serve_bench.py --base-url http://127.0.0.1:8000 --model NAME \\
        [--num-prompts 64] [--rate inf | R ...] [--max-concurrency C ...] \\
        [--input-len 64] [--output-len 64] [--range-ratio 0.5] [--seed 0] \\
        [--api-key KEY] [--device TEXT] [--csv docs/results/serve.csv] [--note TEXT]

Requests: streamed /v1/completions with token-id prompts of seeded random lengths in
[L (1 - r), L (1 + r)] cut from the tokenized text below (so lengths are exact for any
tokenizer), output lengths the same way, greedy, ignore_eos (every request produces its
output length, as vLLM's random dataset does). Arrivals: Poisson at --rate requests/s
(exponential gaps from the seed; inf: all at once), at most --max-concurrency in flight.
Each --rate x --max-concurrency pair is one run and one CSV row.

Reported, as `vllm bench serve` defines them:
  request throughput  completed requests / duration (first send to last response)
  output tokens/s     sum of usage.completion_tokens / duration
  TTFT                send -> the first chunk that carries text
  TPOT                per request: (latency - TTFT) / (output tokens - 1)
  ITL                 gaps between consecutive text chunks, all requests pooled
  E2E                 send -> [DONE]
with mean, p50, p90 and p99 in ms.

HTTP: the Python standard library (asyncio streams, HTTP/1.1, chunked transfer), one
connection per request, so the figures include no client library's overhead.
"""

import argparse
import asyncio
import csv
import datetime
import json
import math
import os
import platform
import random
import shlex
import subprocess
import sys
import time
import urllib.parse
import urllib.request

TEXT = (
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
    "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
    "And God said, Let there be light: and there was light. And God saw the light, that it was good: and "
    "God divided the light from the darkness. And God called the light Day, and the darkness he called "
    "Night. And the evening and the morning were the first day. Blessed are the meek: for they shall "
    "inherit the earth. The LORD is my shepherd; I shall not want. He maketh me to lie down in green "
    "pastures: he leadeth me beside the still waters. Ask, and it shall be given you; seek, and ye shall "
    "find; knock, and it shall be opened unto you. A soft answer turneth away wrath: but grievous words "
    "stir up anger. To every thing there is a season, and a time to every purpose under the heaven. "
)


def percentile(xs, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def http_json(base, path, body, key):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


async def stream_request(host, port, path, body, key, timeout):
    """One streamed request. Returns (ok, error, t_send, [(t, text, n_tokens?)], usage)."""
    t_send = time.perf_counter()
    data = json.dumps(body).encode()
    chunks, usage = [], None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n"
                + (f"Authorization: Bearer {key}\r\n" if key else "") + "\r\n")
        writer.write(head.encode() + data)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(status_line.split()[1])
        chunked = False
        while True:
            line = await asyncio.wait_for(reader.readline(), timeout)
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            if k.strip().lower() == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
        buf = b""
        done = False

        def take_events():
            nonlocal buf, done, usage
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if not line.startswith(b"data: "):
                        continue  # ": ping" comments
                    payload = line[6:]
                    if payload == b"[DONE]":
                        done = True
                        continue
                    obj = json.loads(payload)
                    if "error" in obj:
                        raise RuntimeError(obj["error"].get("message", "error event"))
                    if obj.get("usage"):
                        usage = obj["usage"]
                    for c in obj.get("choices") or []:
                        if c.get("text"):
                            chunks.append((time.perf_counter(), c["text"]))

        while not done:
            if chunked:
                size_line = await asyncio.wait_for(reader.readline(), timeout)
                if not size_line:
                    break
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                piece = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
                piece = piece[:-2]
            else:
                piece = await asyncio.wait_for(reader.read(65536), timeout)
                if not piece:
                    break
            if status != 200:
                buf += piece
                continue
            buf += piece
            take_events()
        writer.close()
        if status != 200:
            return False, f"HTTP {status}: {buf[:200]!r}", t_send, chunks, usage, time.perf_counter()
        if not done:
            return False, "stream ended without [DONE]", t_send, chunks, usage, time.perf_counter()
        return True, "", t_send, chunks, usage, time.perf_counter()
    except Exception as e:  # noqa: BLE001 - a failed request is counted, not fatal
        return False, f"{type(e).__name__}: {e}", t_send, chunks, usage, time.perf_counter()


async def run_load(args, reqs, rate, max_conc):
    u = urllib.parse.urlparse(args.base_url)
    host, port = u.hostname, u.port or 80
    rng = random.Random(args.seed + 1)
    sem = asyncio.Semaphore(max_conc) if max_conc else None
    results = []

    async def one(body):
        if sem:
            async with sem:
                results.append(await stream_request(host, port, "/v1/completions", body, args.api_key, args.timeout))
        else:
            results.append(await stream_request(host, port, "/v1/completions", body, args.api_key, args.timeout))

    tasks = []
    t0 = time.perf_counter()
    for i, body in enumerate(reqs):
        tasks.append(asyncio.ensure_future(one(body)))
        if rate != math.inf and i + 1 < len(reqs):
            await asyncio.sleep(rng.expovariate(rate))
    await asyncio.gather(*tasks)
    return results, t0, time.perf_counter()


def summarize(results, t0, t1):
    ok = [r for r in results if r[0]]
    failed = [r for r in results if not r[0]]
    duration = t1 - t0
    ttft, tpot, itl, e2e, out_tokens = [], [], [], [], 0
    for _, _, t_send, chunks, usage, t_end in ok:
        n_out = usage["completion_tokens"] if usage else len(chunks)
        out_tokens += n_out
        if chunks:
            first = chunks[0][0] - t_send
            ttft.append(first)
            lat = t_end - t_send
            e2e.append(lat)
            if n_out > 1:
                tpot.append((lat - first) / (n_out - 1))
            itl.extend(b[0] - a[0] for a, b in zip(chunks, chunks[1:]))
    prompt_tokens = sum(r[4]["prompt_tokens"] for r in ok if r[4])
    s = {"duration_s": duration, "completed": len(ok), "failed": len(failed),
         "req_per_s": len(ok) / duration if duration > 0 else 0.0,
         "output_tok_per_s": out_tokens / duration if duration > 0 else 0.0,
         "total_tok_per_s": (out_tokens + prompt_tokens) / duration if duration > 0 else 0.0,
         "output_tokens": out_tokens, "prompt_tokens": prompt_tokens}
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e)):
        s[f"{name}_mean_ms"] = 1e3 * sum(xs) / len(xs) if xs else float("nan")
        for p in (50, 90, 99):
            s[f"{name}_p{p}_ms"] = 1e3 * percentile(xs, p)
    s["errors"] = sorted({r[1] for r in failed})[:3]
    return s


def device_name():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"CPU {model} ({os.cpu_count()} cores)"


def git_commit():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
    try:
        c = subprocess.run(["git", "-C", here, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True,
                           timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--", "src", "include", "tools",
                                "CMakeLists.txt"], capture_output=True, text=True, timeout=10).stdout.strip()
        return (c + "+dirty" if dirty else c) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


FIELDS = ["device", "commit", "date", "server", "model", "num_prompts", "rate", "max_concurrency", "input_len",
          "output_len", "range_ratio", "seed", "duration_s", "completed", "failed", "req_per_s", "output_tok_per_s",
          "total_tok_per_s", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_mean_ms",
          "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "itl_mean_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms",
          "e2e_mean_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "note", "command"]


def append_csv(path, row):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in row.items()})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True, help="the served model name")
    ap.add_argument("--api-key", default=os.environ.get("MINFER_API_KEY"))
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--rate", type=float, nargs="+", default=[math.inf], help="requests/s (inf: all at once)")
    ap.add_argument("--max-concurrency", type=int, nargs="+", default=[0], help="0: unlimited")
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--range-ratio", type=float, default=0.0, help="lengths uniform in L (1 -/+ r)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per read")
    ap.add_argument("--warmup", type=int, default=2, help="requests sent alone before the runs")
    ap.add_argument("--device", default=None, help="device column (default: this machine's CPU)")
    ap.add_argument("--server", default="minfer serve", help="server column")
    ap.add_argument("--csv", default=None, help="append one row per run (e.g. docs/results/serve.csv)")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    if not 0 <= args.range_ratio < 1:
        ap.error("--range-ratio must be in [0, 1)")

    # Token pool: the text above, tokenized by the server (repeated until long enough).
    pool = []
    while len(pool) < 4 * args.input_len * (1 + args.range_ratio) + 16:
        pool += http_json(args.base_url, "/tokenize", {"prompt": TEXT, "add_special_tokens": False},
                          args.api_key)["tokens"]
    rng = random.Random(args.seed)

    def length(mean):
        lo, hi = max(1, int(mean * (1 - args.range_ratio))), max(1, int(mean * (1 + args.range_ratio)))
        return rng.randint(lo, hi)

    reqs = []
    for _ in range(args.num_prompts):
        n_in, n_out = length(args.input_len), length(args.output_len)
        off = rng.randrange(0, len(pool) - n_in)
        reqs.append({"model": args.model, "prompt": pool[off:off + n_in], "max_tokens": n_out, "temperature": 0,
                     "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})

    if args.warmup:
        warm = [dict(r, max_tokens=4) for r in reqs[:args.warmup]]
        asyncio.run(run_load(args, warm, math.inf, 1))

    device = args.device or device_name()
    commit = git_commit()
    cmd = " ".join(shlex.quote(a) for a in ["python3", "bench/serve_bench.py", *sys.argv[1:]])
    print(f"{'rate':>6} {'conc':>5} {'ok':>4} {'fail':>4} {'req/s':>7} {'out tok/s':>10} "
          f"{'TTFT p50':>9} {'p90':>8} {'p99':>8} {'TPOT p50':>9} {'p99':>8} {'ITL p50':>8} {'p99':>8}  (ms)")
    for rate in args.rate:
        for conc in args.max_concurrency:
            results, t0, t1 = asyncio.run(run_load(args, reqs, rate, conc))
            s = summarize(results, t0, t1)
            print(f"{rate:>6g} {conc or 'inf':>5} {s['completed']:>4} {s['failed']:>4} {s['req_per_s']:>7.2f} "
                  f"{s['output_tok_per_s']:>10.1f} {s['ttft_p50_ms']:>9.1f} {s['ttft_p90_ms']:>8.1f} "
                  f"{s['ttft_p99_ms']:>8.1f} {s['tpot_p50_ms']:>9.2f} {s['tpot_p99_ms']:>8.2f} "
                  f"{s['itl_p50_ms']:>8.2f} {s['itl_p99_ms']:>8.2f}", flush=True)
            if s["errors"]:
                print("  errors:", "; ".join(s["errors"]), file=sys.stderr)
            if args.csv:
                append_csv(args.csv, dict(
                    s, device=device, commit=commit,
                    date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    server=args.server, model=args.model, num_prompts=args.num_prompts,
                    rate="inf" if rate == math.inf else rate, max_concurrency=conc or "inf",
                    input_len=args.input_len, output_len=args.output_len, range_ratio=args.range_ratio,
                    seed=args.seed, note=args.note, command=cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
