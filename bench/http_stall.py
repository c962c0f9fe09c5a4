#!/usr/bin/env python3
"""How long one big /tokenize stalls a running SSE stream of `minfer serve`.

    python3 bench/http_stall.py [--bin build/minfer ...] [--model models/minfer-kjv-3m] \\
        [--threads 1 4] [--repeats 3] [--kb 800] [--max-tokens 240]

Starts one server per --bin and --threads value (--http-threads N, CPU
backend), then, for each repeat and each server in turn (interleaved):
streams a greedy ignore_eos completion, and once 20 chunks have come POSTs a
--kb KB /tokenize on another connection. Prints the largest gap between the
stream's chunks while the /tokenize ran, the largest and the median gap in
the whole stream, and the /tokenize time. When the tokenizing runs on an HTTP polling thread,
a stream on the same thread waits for it; on a prep worker it does not.
"""

import argparse
import http.client
import json
import re
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def start(binary, model, threads):
    p = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--backend", "cpu",
                          "--http-threads", str(threads)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:  # "ready on http://127.0.0.1:PORT"
        m = re.search(r"ready on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        raise SystemExit(f"minfer serve --http-threads {threads} did not start")
    threading.Thread(target=p.stderr.read, daemon=True).start()  # keep stderr drained
    return p, port


def trial(port, text, max_tokens):
    times, started = [], threading.Event()

    def stream():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        body = {"prompt": "And God said", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            print(f"stream: HTTP {r.status}: {r.read()[:300]!r}")
        for line in iter(r.readline, b""):
            if line.startswith(b"data: "):
                times.append(time.perf_counter())
                if len(times) == 20:
                    started.set()
        started.set()
        c.close()

    t = threading.Thread(target=stream)
    t.start()
    started.wait(120)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.perf_counter()
    c.request("POST", "/tokenize", json.dumps({"prompt": text}), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()[:200]
    r.read()
    t1 = time.perf_counter()
    c.close()
    t.join()
    gaps = [(b - a, a, b) for a, b in zip(times, times[1:])]
    during = max((g for g, a, b in gaps if b >= t0 and a <= t1), default=0.0)
    median = sorted(g for g, _, _ in gaps)[len(gaps) // 2]
    return during, max(g for g, _, _ in gaps), median, t1 - t0, len(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", nargs="+", default=[str(REPO / "build" / "minfer")],
                    help="binaries to compare (servers numbered in the output, in this order)")
    ap.add_argument("--model", default=str(REPO / "models" / "minfer-kjv-3m"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kb", type=int, default=800)
    ap.add_argument("--max-tokens", type=int, default=240)  # the default model's context is 256
    a = ap.parse_args()
    verse = "And God said, Let there be light: and there was light. "
    text = verse * (a.kb * 1024 // len(verse))
    servers = {(b, n): start(binary, a.model, n) for b, binary in enumerate(a.bin) for n in a.threads}
    try:
        print(f"/tokenize body {len(text) // 1024} KB; stream max_tokens {a.max_tokens}")
        for b, binary in enumerate(a.bin):
            print(f"bin {b}: {binary}")
        print("bin  http-threads  repeat  max gap during /tokenize (ms)  max gap in stream (ms)  median gap (ms)  "
              "/tokenize (ms)  chunks")
        for rep in range(a.repeats):
            for (b, n), (_, port) in servers.items():
                during, worst, median, tok, chunks = trial(port, text, a.max_tokens)
                print(f"{b:3d}  {n:12d}  {rep:6d}  {1e3 * during:29.1f}  {1e3 * worst:22.1f}  {1e3 * median:15.1f}  "
                      f"{1e3 * tok:14.1f}  {chunks:6d}")
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait(60)


if __name__ == "__main__":
    main()
