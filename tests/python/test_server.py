# `minfer serve` end to end: the real binary on the default model
# (models/minfer-kjv-3m) on the CPU, on a free loopback port, driven by
# clients nobody here wrote: the official `openai` package and curl, plus
# raw HTTP for what those clients never send (bad JSON, bad UTF-8, huge
# bodies). Bounded: a few hundred requests, loopback only, ~1 minute.
#
# The binary: $MINFER_BIN, else the `minfer` beside $MINFER_LIB, else build/minfer.
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "minfer-kjv-3m"
KEY = "sk-test-minfer"
NAME = "kjv"

openai = pytest.importorskip(
    "openai", reason="the official `openai` package is not installed (scripts/deps.sh --python installs it)")


def _binary():
    if os.environ.get("MINFER_BIN"):
        return Path(os.environ["MINFER_BIN"])
    if os.environ.get("MINFER_LIB"):
        return Path(os.environ["MINFER_LIB"]).parent / "minfer"
    return REPO / "build" / "minfer"


class Server:
    """A `minfer serve` process on a free port (--port 0: it prints the one it bound)."""

    def __init__(self, *extra, env=None):
        binary = _binary()
        if not binary.exists():
            pytest.skip(f"no minfer binary at {binary} (build it, or set MINFER_BIN)")
        self.log = tempfile.NamedTemporaryFile(prefix="minfer-serve-", suffix=".log", delete=False)
        cmd = [str(binary), "serve", "-m", str(MODEL), "--served-model-name", NAME, "--port", "0",
               "--backend", "cpu", "--api-key", KEY, *extra]
        e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        self.port = None
        t0 = time.time()
        while time.time() - t0 < 60:
            if self.proc.poll() is not None:
                raise AssertionError(f"minfer serve exited {self.proc.returncode}:\n{self.text()}")
            m = re.search(r"listening on http://[^:]+:(\d+)", self.text())
            if m and self.port is None:
                self.port = int(m.group(1))
            if self.port is not None:
                try:
                    if self.request("GET", "/health")[0] == 200:
                        break
                except OSError:
                    pass
            time.sleep(0.05)
        else:
            self.stop()
            raise AssertionError(f"minfer serve did not become healthy in 60 s:\n{self.text()}")
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0, timeout=60)

    def text(self):
        return Path(self.log.name).read_text(errors="replace")

    def request(self, method, path, body=None, headers=None, key=KEY, timeout=60):
        """(status, headers, body bytes) of one request on a new connection."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def post(self, path, body, **kw):
        status, _, data = self.request("POST", path, body, **kw)
        return status, json.loads(data)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics", key=None)
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line.startswith("#") or not line:
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def metric(self, name, **labels):
        labels = dict(labels, model_name=NAME)
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return self.metrics()[f"{name}{{{want}}}"]

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"minfer serve did not stop within {timeout} s:\n{self.text()}")
        return self.proc.returncode


@pytest.fixture(scope="module")
def server():
    # llama2: the default model has no chat template of its own; its
    # tokenizer is Llama-2's layout (<s>, </s>), so the Llama-2 template fits.
    s = Server("--chat-template", "llama2", "--max-body-mb", "1", "--ping-interval", "0.5")
    yield s
    rc = s.stop()
    log = s.text()
    assert rc == 0, f"exit status {rc}:\n{log}"
    assert "job(s) left at exit" not in log, log


def greedy(server, prompt, max_tokens=16, **kw):
    r = server.client.completions.create(model=NAME, prompt=prompt, max_tokens=max_tokens, temperature=0, **kw)
    return r


def sse_events(raw):
    """The data payloads of an SSE byte stream, checking its framing (comments allowed)."""
    text = raw.decode("utf-8")  # must be valid UTF-8
    assert text.endswith("\n\n"), text[-200:]
    out = []
    for block in text[:-2].split("\n\n"):
        lines = [ln for ln in block.split("\n") if not ln.startswith(":")]  # ": ping" comments
        if not lines:
            continue
        assert len(lines) == 1 and lines[0].startswith("data: "), repr(block)
        out.append(lines[0][6:])
    assert out and out[-1] == "[DONE]", out[-3:]
    return out


# ---- the basics -------------------------------------------------------------------------------

def test_health_models_metrics_need_no_key(server):
    assert server.request("GET", "/health", key=None)[0] == 200
    status, _, data = server.request("GET", "/metrics", key=None)
    assert status == 200
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket"):
        assert name.encode() in data, name
    models = server.client.models.list()
    assert [m.id for m in models.data] == [NAME]


def test_completion_plain_matches_generate(server):
    r = greedy(server, "And God said", max_tokens=16)
    c = r.choices[0]
    assert r.object == "text_completion" and r.model == NAME and r.id.startswith("cmpl-")
    assert c.text and c.finish_reason in ("stop", "length") and c.index == 0
    n_prompt = server.post("/tokenize", {"prompt": "And God said"})[1]["count"]
    assert r.usage.prompt_tokens == n_prompt
    assert 1 <= r.usage.completion_tokens <= 16
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The same greedy continuation as `minfer generate` (mf_generate) on the same model.
    out = subprocess.run([str(_binary()), "generate", "-m", str(MODEL), "-p", "And God said", "-n", "16",
                          "--temp", "0", "--backend", "cpu"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip("\n") == c.text


def test_stream_equals_plain_with_usage(server):
    plain = greedy(server, "In the beginning", max_tokens=20)
    chunks = list(server.client.completions.create(
        model=NAME, prompt="In the beginning", max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == plain.choices[0].text
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finish == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens
    assert all(ch.usage is None for ch in chunks[:-1])


def test_chat_plain_and_streamed(server):
    msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who made the heaven?"}]
    r = server.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=12, temperature=0)
    c = r.choices[0]
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert c.message.role == "assistant" and isinstance(c.message.content, str) and c.message.content
    assert r.usage.prompt_tokens == server.post("/tokenize", {"messages": msgs})[1]["count"]
    chunks = list(server.client.chat.completions.create(model=NAME, messages=msgs, max_tokens=12, temperature=0,
                                                        stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == c.message.content
    assert chunks[-1].choices[0].finish_reason == c.finish_reason
    # max_tokens absent: the context bounds it (256 positions).
    r = server.client.chat.completions.create(model=NAME, messages=msgs, temperature=0)
    assert r.usage.prompt_tokens + r.usage.completion_tokens <= 256


def test_n_and_seed_reproducible(server):
    kw = dict(model=NAME, prompt="The LORD is", max_tokens=12, temperature=1.0, top_p=0.95, n=3)
    a = server.client.completions.create(seed=7, **kw)
    b = server.client.completions.create(seed=7, **kw)
    c = server.client.completions.create(seed=8, **kw)
    assert [ch.index for ch in a.choices] == [0, 1, 2]
    ta, tb, tc = ([ch.text for ch in x.choices] for x in (a, b, c))
    assert ta == tb
    assert ta != tc
    assert 3 <= a.usage.completion_tokens <= 3 * 12
    # Streamed with the same seed: the same three texts.
    chunks = list(server.client.completions.create(seed=7, stream=True, **kw))
    streamed = ["", "", ""]
    for ch in chunks:
        for choice in ch.choices:
            streamed[choice.index] += choice.text
    assert streamed == ta
    # Greedy: every choice is the greedy text.
    g = server.client.completions.create(model=NAME, prompt="The LORD is", max_tokens=12, temperature=0, n=2)
    assert g.choices[0].text == g.choices[1].text == greedy(server, "The LORD is", 12).choices[0].text


def test_logprobs(server):
    r = greedy(server, "And the earth", max_tokens=8, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == r.usage.completion_tokens
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert val <= 0 and 1 <= len(top) <= 3
        assert abs(max(top.values()) - val) < 1e-4  # greedy: the chosen token is the most likely
        assert sum(2.718281828 ** v for v in top.values()) <= 1 + 1e-4
    assert lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens).startswith(r.choices[0].text[:1])
    chat = server.client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Say amen."}], max_tokens=6, temperature=0,
        logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 2
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4
        assert isinstance(e.bytes, list)
    # Without logprobs, none.
    assert greedy(server, "And the earth", max_tokens=2).choices[0].logprobs is None


def test_stop_strings_and_token_prompts(server):
    full = greedy(server, "And God said", max_tokens=24).choices[0].text
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    cut = greedy(server, "And God said", max_tokens=24, stop=[stop, "zzzz"]).choices[0]
    assert cut.text == full[:full.index(stop)] and cut.finish_reason == "stop"
    ids = server.post("/tokenize", {"prompt": "And God said"})[1]["tokens"]
    assert greedy(server, ids, max_tokens=24).choices[0].text == full
    # A list of prompts: one choice each, in order.
    many = greedy(server, ["And God said", "In the beginning"], max_tokens=8)
    assert [c.index for c in many.choices] == [0, 1]
    assert many.choices[0].text == greedy(server, "And God said", 8).choices[0].text
    assert many.choices[1].text == greedy(server, "In the beginning", 8).choices[0].text
    # ignore_eos runs to max_tokens.
    r = server.client.completions.create(model=NAME, prompt="Amen.", max_tokens=40, temperature=0,
                                         extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 40 and r.choices[0].finish_reason == "length"


def test_tokenize_detokenize_and_utf8(server):
    status, t = server.post("/tokenize", {"prompt": "And God said", "return_token_strs": True})
    assert status == 200 and t["count"] == len(t["tokens"]) == len(t["token_strs"]) and t["max_model_len"] > 0
    status, d = server.post("/detokenize", {"tokens": t["tokens"]})
    assert status == 200 and d["prompt"].endswith("And God said")
    # A character the vocabulary lacks comes as byte-fallback tokens; one of
    # them alone can never be a character: U+FFFD, as HF's decode gives.
    ids = server.post("/tokenize", {"prompt": "\u20ac", "add_special_tokens": False})[1]["tokens"]
    assert len(ids) >= 3
    assert server.post("/detokenize", {"tokens": ids})[1]["prompt"].endswith("\u20ac")
    assert server.post("/detokenize", {"tokens": ids[-2:-1]})[1]["prompt"] == "\ufffd"
    status, e = server.post("/detokenize", {"tokens": [1, 999999]})
    assert status == 400 and "999999" in e["error"]["message"]


def test_prefix_cache_reported_in_usage(server):
    prompt = " ".join(PROMPTS * 4)  # well over one KV block of tokens
    first = greedy(server, prompt, max_tokens=4)
    again = greedy(server, prompt, max_tokens=4)
    assert first.usage.prompt_tokens == again.usage.prompt_tokens >= 80
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < again.usage.prompt_tokens, again.usage
    assert again.choices[0].text == first.choices[0].text


# ---- errors -------------------------------------------------------------------------------------

def test_errors_through_the_openai_client(server):
    with pytest.raises(openai.BadRequestError) as e:
        server.client.completions.create(model=NAME, prompt="x", max_tokens=-1)
    assert e.value.status_code == 400 and "max_tokens" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        server.client.completions.create(model=NAME, prompt="x", max_tokens=4, frequency_penalty=0.5)
    assert "frequency_penalty" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:  # longer than the context
        server.client.completions.create(model=NAME, prompt="x", max_tokens=100000)
    assert "context" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        server.client.completions.create(model="gpt-4", prompt="x", max_tokens=4)
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model=NAME, prompt="x", max_tokens=4)


@pytest.mark.parametrize("body,status,needle", [
    (b'{"prompt": "x", "max_tokens": 4', 400, "malformed JSON"),
    (b'{"prompt": "x", "max_tokens": "four"}', 400, 'max_tokens: expected an integer, got "four"'),
    (b'{"prompt": "x", "temperature": "hot"}', 400, "temperature"),
    (b'{"prompt": "x", "max_tokens": -3}', 400, "max_tokens: -3"),
    (b'{"prompt": "x", "n": 99}', 400, "n: 99"),
    (b'{"prompt": "x", "stop": 5}', 400, "stop"),
    (b'{"prompt": [1, "a"]}', 400, "prompt"),
    (b'{"prompt": "\xff\xfe"}', 400, "not valid UTF-8"),
    (b'{"prompt": [1, 99999]}', 400, "99999"),
    (b'{"prompt": "x", "model": "nope"}', 404, "nope"),
    (b'[]', 400, "JSON object"),
])
def test_bad_input(server, body, status, needle):
    st, _, data = server.request("POST", "/v1/completions", body)
    err = json.loads(data)["error"]
    assert st == status and needle in err["message"], (st, err)
    assert err["code"] == status and err["type"]


def test_http_level_errors(server):
    st, _, data = server.request("POST", "/v1/completions", b'{"prompt": "x"}', key=None)
    assert st == 401 and "API key" in json.loads(data)["error"]["message"]
    st, _, _ = server.request("POST", "/v1/completions", b'{"prompt": "x"}', key="sk-wrong")
    assert st == 401
    assert server.request("GET", "/v1/nothing")[0] == 404
    assert server.request("GET", "/v1/completions")[0] == 405
    # A huge body: refused from its Content-Length, before it is sent (a
    # client that sends it anyway meets a closed connection).
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % (2 << 20))
    r = http.client.HTTPResponse(s)
    r.begin()
    assert r.status == 413 and "max-body-mb" in json.loads(r.read())["error"]["message"]
    s.close()
    # Chunked upload (no Content-Length) past the limit: 413 too.
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.putrequest("POST", "/v1/completions")
    c.putheader("Authorization", f"Bearer {KEY}")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    piece = b"a" * 65536
    try:
        for _ in range(24):
            c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        c.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert c.getresponse().status == 413
    c.close()
    # The server still serves.
    assert greedy(server, "Amen", 2).usage.completion_tokens >= 1


# ---- SSE framing with curl ----------------------------------------------------------------------------

def test_curl_sse_framing(server):
    curl = shutil.which("curl")
    if not curl:
        pytest.skip("curl is not installed")
    body = json.dumps({"model": NAME, "prompt": "And God said", "max_tokens": 16, "temperature": 0, "stream": True,
                       "logprobs": 1, "stream_options": {"include_usage": True}})
    out = subprocess.run([curl, "-sN", "--fail-with-body", "-H", "Content-Type: application/json",
                          "-H", f"Authorization: Bearer {KEY}", "-d", body, server.url + "/v1/completions"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    events = sse_events(out.stdout)
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert text == greedy(server, "And God said", 16).choices[0].text
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
    n_tok = sum(len(c["choices"][0]["logprobs"]["tokens"]) for c in chunks
                if c["choices"] and c["choices"][0]["logprobs"])
    assert n_tok == chunks[-1]["usage"]["completion_tokens"]
    # curl -N with a chat request: the role chunk first.
    body = json.dumps({"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                       "stream": True})
    out = subprocess.run([curl, "-sN", "-H", f"Authorization: Bearer {KEY}", "-d", body,
                          server.url + "/v1/chat/completions"], capture_output=True, timeout=60)
    events = sse_events(out.stdout)
    assert json.loads(events[0])["choices"][0]["delta"]["role"] == "assistant"


# ---- disconnects, concurrency ---------------------------------------------------------------------

def _wait_metric(server, name, at_least, timeout=20, **labels):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if server.metric(name, **labels) >= at_least:
            return
        time.sleep(0.02)
    raise AssertionError(f"{name}{labels} stayed below {at_least} for {timeout} s: {server.metrics()}")


def _wait_idle(server, timeout=20):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if server.metric("vllm:num_requests_running") == 0 and server.metric("vllm:num_requests_waiting") == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"requests still running after {timeout} s: {server.metrics()}")


def test_disconnect_aborts_and_frees_blocks(server):
    _wait_idle(server)
    usage0 = server.metric("vllm:kv_cache_usage_perc")
    gen0 = server.metric("vllm:generation_tokens_total")
    aborts0 = server.metric("vllm:request_success_total", finished_reason="abort")
    # 16 prompts x n 16 x 240 tokens: seconds of work even for this tiny model.
    n, max_tokens = 16 * 16, 240
    body = json.dumps({"model": NAME, "prompt": PROMPTS * 2, "max_tokens": max_tokens, "n": 16,
                       "temperature": 1.0, "seed": 3, "ignore_eos": True, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b"data: " not in got:  # the first chunk
        part = s.recv(4096)
        assert part, got
        got += part
    assert got.startswith(b"HTTP/1.1 200")
    s.close()
    _wait_metric(server, "vllm:request_success_total", aborts0 + 1, finished_reason="abort")
    _wait_idle(server)
    assert server.metric("vllm:kv_cache_usage_perc") == usage0
    generated = server.metric("vllm:generation_tokens_total") - gen0
    assert generated < n * max_tokens, f"the request ran to the end ({generated} tokens) instead of aborting"
    # A non-streamed request whose client leaves is aborted too.
    aborts1 = server.metric("vllm:request_success_total", finished_reason="abort")
    body = json.dumps({"model": NAME, "prompt": PROMPTS * 2, "max_tokens": max_tokens, "n": 16,
                       "temperature": 1.0, "seed": 4, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    _wait_metric(server, "vllm:num_requests_running", 1)
    s.close()
    _wait_metric(server, "vllm:request_success_total", aborts1 + 1, finished_reason="abort")
    _wait_idle(server)
    assert server.metric("vllm:kv_cache_usage_perc") == usage0


PROMPTS = ["And God said", "In the beginning", "The LORD is my shepherd", "And it came to pass",
           "Blessed are", "Thou shalt not", "And the earth was", "Let there be"]


def test_64_concurrent_streams_equal_alone(server):
    reqs = [(PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS) % 2), 8 + i % 17) for i in range(64)]
    alone = {}
    for prompt, mt in set(reqs):
        alone[(prompt, mt)] = greedy(server, prompt, mt).choices[0].text

    def streamed(req):
        prompt, mt = req
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
        text, finish = "", None
        for ch in client.completions.create(model=NAME, prompt=prompt, max_tokens=mt, temperature=0, stream=True):
            text += ch.choices[0].text
            finish = ch.choices[0].finish_reason or finish
        return text, finish

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(streamed, reqs))
    took = time.time() - t0
    assert took < 120
    for req, (text, finish) in zip(reqs, results):
        assert finish in ("stop", "length")
        assert text == alone[req], (req, text, alone[req])
    _wait_idle(server)


# ---- shutdown -------------------------------------------------------------------------------------------

def _stream_in_thread(srv, out, **kw):
    def run():
        body = dict(model=NAME, prompt="And it came to pass", temperature=0, stream=True, **kw)
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        r = c.getresponse()
        out["status"] = r.status
        data = b""
        while True:
            part = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
            if not part:
                break
            data += part
            out.setdefault("first", time.time())
        out["data"] = data
    t = threading.Thread(target=run)
    t.start()
    return t


def test_sigterm_lets_streams_finish_then_exits_0():
    srv = Server("--shutdown-timeout", "20")
    try:
        out = {}
        t = _stream_in_thread(srv, out, max_tokens=200, ignore_eos=True)
        t0 = time.time()
        while "first" not in out and time.time() - t0 < 30:
            time.sleep(0.01)
        assert "first" in out
        srv.proc.send_signal(signal.SIGTERM)
        t.join(60)
        events = sse_events(out["data"])
        chunks = [json.loads(e) for e in events[:-1]]
        assert all("error" not in c for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert srv.proc.wait(timeout=30) == 0
        assert "stopped" in srv.text()
    finally:
        srv.stop(signal.SIGKILL)


def test_sigterm_deadline_aborts_with_an_error_event():
    srv = Server("--shutdown-timeout", "0")
    try:
        out = {}
        t = _stream_in_thread(srv, out, max_tokens=240, ignore_eos=True, n=16)
        t0 = time.time()
        while "first" not in out and time.time() - t0 < 30:
            time.sleep(0.01)
        srv.proc.send_signal(signal.SIGTERM)
        t.join(60)
        assert srv.proc.wait(timeout=30) == 0
        events = sse_events(out["data"])
        last = json.loads(events[-2])
        assert "error" in last and last["error"]["code"] == 503, last
        # New connections are refused once it stopped listening.
        with pytest.raises(OSError):
            srv.request("GET", "/health", key=None, timeout=2)
    finally:
        srv.stop(signal.SIGKILL)


def _send_raw(srv, path, body):
    """A socket whose request was sent whole (read the answer with _read_raw)."""
    body = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    return s


def _read_raw(s):
    """(status, body) of a _send_raw answer (the server closes the connection);
    status None: the connection was reset or closed without an answer."""
    data = b""
    try:
        while True:
            part = s.recv(65536)
            if not part:
                break
            data += part
    except ConnectionResetError:
        data = b""
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return (int(head.split(b" ")[1]) if head else None), body


def test_jobs_queued_for_prep_workers():
    # Bodies are parsed and tokenized by 2 prep workers, off the HTTP threads.
    # Six long /tokenize keep them busy, so a completion after them (most
    # likely) waits in the prep queue: its client leaves there, and later a
    # SIGTERM comes with jobs queued. Whenever each lands, nothing may leak
    # or hang: answers are whole, the running gauge returns to 0, the KV
    # blocks are freed, and the server drains and exits 0 with no job left.
    verse = "And God said, Let there be light: and there was light. "
    text = verse * (600 * 1024 // len(verse))
    srv = Server("--max-body-mb", "4", "--shutdown-timeout", "20")
    try:
        _wait_idle(srv)
        usage0 = srv.metric("vllm:kv_cache_usage_perc")
        alone = srv.post("/tokenize", {"prompt": text})[1]["count"]
        socks = [_send_raw(srv, "/tokenize", {"prompt": text}) for _ in range(6)]
        gone = _send_raw(srv, "/v1/completions", {"prompt": "And God said", "max_tokens": 240, "ignore_eos": True,
                                                   "stream": True})
        gone.close()  # left while queued (or, on a fast machine, just after)
        for s in socks:
            status, body = _read_raw(s)
            assert status == 200, body[:300]
            assert json.loads(body)["count"] == alone
        _wait_idle(srv)
        assert srv.metric("vllm:kv_cache_usage_perc") == usage0
        # SIGTERM with prep jobs queued: each is answered (200, or 503 once
        # draining) and the server exits 0. A connection that MHD had not
        # accepted, or whose body it had not read, when it stopped listening
        # is closed without an answer (the drain waits for jobs, not uploads).
        socks = [_send_raw(srv, "/tokenize", {"prompt": text}) for _ in range(4)]
        socks.append(_send_raw(srv, "/v1/completions", {"prompt": "And God said", "max_tokens": 8}))
        time.sleep(0.2)  # the bodies read (the outcome is checked whatever the timing)
        srv.proc.send_signal(signal.SIGTERM)
        statuses = [_read_raw(s) for s in socks]
        assert all(st in (200, 503, None) for st, _ in statuses), [(st, b[:200]) for st, b in statuses]
        assert srv.proc.wait(timeout=60) == 0
        assert "job(s) left at exit" not in srv.text()
    finally:
        srv.stop(signal.SIGKILL)


# ---- start-up ---------------------------------------------------------------------------------------------

def test_bad_options_and_template_refused_at_start():
    binary = _binary()
    if not binary.exists():
        pytest.skip(f"no minfer binary at {binary}")
    r = subprocess.run([str(binary), "serve", "-m", str(MODEL), "--port", "99999"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--port 99999" in r.stderr
    r = subprocess.run([str(binary), "serve", "-m", str(MODEL), "--http-threads", "0"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--http-threads 0" in r.stderr
    r = subprocess.run([str(binary), "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--api-key" in r.stdout
    r = subprocess.run([str(binary), "serve", "-m", str(MODEL), "--port", "0", "--chat-template", "nonesuch"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "nonesuch" in r.stderr and "llama2" in r.stderr, r.stderr
    r = subprocess.run([str(binary), "serve", "-m", str(REPO / "no-such-model"), "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no-such-model" in r.stderr


def test_chat_without_template_is_refused():
    srv = Server()  # the default model has no chat template of its own
    try:
        with pytest.raises(openai.BadRequestError) as e:
            srv.client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert "--chat-template" in str(e.value)
        assert greedy(srv, "Amen", 2).usage.completion_tokens >= 1  # completions still work
    finally:
        assert srv.stop() == 0


def test_queue_full_is_429():
    srv = Server("--max-seqs", "1", "--max-queue", "1")
    try:
        out1, out2 = {}, {}
        t1 = _stream_in_thread(srv, out1, max_tokens=240, ignore_eos=True)  # runs (the one sequence slot)
        _wait_metric(srv, "vllm:num_requests_running", 1)
        t2 = _stream_in_thread(srv, out2, max_tokens=4)                     # waits: the queue is full
        _wait_metric(srv, "vllm:num_requests_waiting", 1)
        with pytest.raises(openai.RateLimitError) as e:
            srv.client.completions.create(model=NAME, prompt="Amen", max_tokens=4)
        assert "--max-queue" in str(e.value)
        t1.join(60)
        t2.join(60)
        assert out1["status"] == out2["status"] == 200
        assert sse_events(out2["data"])[-1] == "[DONE]"
    finally:
        assert srv.stop() == 0


def test_one_http_thread_serves():
    # --http-threads 1: MHD's single polling thread (no pool), the mode before the pool.
    srv = Server("--http-threads", "1")
    try:
        plain = greedy(srv, "In the beginning", max_tokens=12)
        chunks = list(srv.client.completions.create(model=NAME, prompt="In the beginning", max_tokens=12,
                                                    temperature=0, stream=True))
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == plain.choices[0].text
        assert srv.post("/tokenize", {"prompt": "In the beginning"})[0] == 200
    finally:
        assert srv.stop() == 0


def test_sse_pings_while_a_stream_waits():
    # One sequence slot, three long requests ahead: the streamed one waits in the queue with
    # nothing to send, and gets ": ping" comments (--ping-interval 0.05; the ticker runs every
    # 0.25 s) that a client ignores and a dead client fails on. Its events are whole after them.
    srv = Server("--max-seqs", "1", "--ping-interval", "0.05")
    try:
        ahead = [{} for _ in range(3)]
        threads = [_stream_in_thread(srv, o, max_tokens=240, ignore_eos=True) for o in ahead]
        _wait_metric(srv, "vllm:num_requests_running", 1)
        out = {}
        t = _stream_in_thread(srv, out, max_tokens=4)
        for th in threads + [t]:
            th.join(60)
        assert all(o["status"] == 200 for o in ahead) and out["status"] == 200
        assert b": ping\n\n" in out["data"], out["data"][:300]
        events = sse_events(out["data"])
        assert len(events) >= 2 and events[-1] == "[DONE]"
    finally:
        assert srv.stop() == 0


def _loading_server(tmp_path):
    """A server whose checkpoint's config.json is a FIFO: the load blocks opening it until a
    writer comes, which holds the server in its loading state for as long as a test needs."""
    binary = _binary()
    if not binary.exists():
        pytest.skip(f"no minfer binary at {binary}")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.mkfifo(ckpt / "config.json")
    log = tmp_path / "serve.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([str(binary), "serve", "-m", str(ckpt), "--port", "0", "--backend", "cpu",
                                 "--api-key", KEY], stdout=f, stderr=subprocess.STDOUT,
                                env=dict(os.environ, OMP_NUM_THREADS="1"))
    t0 = time.time()
    while time.time() - t0 < 30:
        m = re.search(r"listening on http://[^:]+:(\d+)", log.read_text(errors="replace"))
        if m:
            return proc, int(m.group(1)), ckpt, log
        assert proc.poll() is None, log.read_text(errors="replace")
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("minfer serve did not listen in 30 s:\n" + log.read_text(errors="replace"))


def _get(port, method, path, body=None, key=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = f"Bearer {key}"
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def test_health_503_while_loading_then_sigterm_stops_the_load(tmp_path):
    proc, port, _, log = _loading_server(tmp_path)
    try:
        for _ in range(3):  # still loading each time: the FIFO has no writer
            status, data = _get(port, "GET", "/health")  # no key needed
            assert status == 503 and "still loading" in json.loads(data)["error"]["message"], data
        status, data = _get(port, "POST", "/v1/completions", {"prompt": "Amen", "max_tokens": 2}, key=KEY)
        assert status == 503 and "still loading" in json.loads(data)["error"]["message"], data
        proc.send_signal(signal.SIGTERM)  # the load cannot finish; the signal must not wait for it
        assert proc.wait(timeout=10) == 0, log.read_text(errors="replace")
        assert "SIGTERM while loading" in log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_failed_load_exits_1_naming_the_file(tmp_path):
    proc, port, ckpt, log = _loading_server(tmp_path)
    try:
        assert _get(port, "GET", "/health")[0] == 503
        os.close(os.open(ckpt / "config.json", os.O_WRONLY))  # releases the loader's open(): not a regular file
        assert proc.wait(timeout=30) == 1
        text = log.read_text(errors="replace")
        assert "config.json" in text and "not a regular file" in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
