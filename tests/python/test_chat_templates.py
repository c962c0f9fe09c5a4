"""minfer's C chat templates against transformers' apply_chat_template on the
real templates (tests/fixtures/chat_templates/*/): the same text, byte for
byte, for many conversations; and an error from minfer exactly where the
Jinja template raises (with the template's own message).

transformers (and jinja2) are test dependencies (scripts/deps.sh --python);
without them these tests skip, saying so.
"""

import json
import random
import shutil
from pathlib import Path

import pytest

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed: scripts/deps.sh --python installs it")
jinja2 = pytest.importorskip("jinja2", reason="jinja2 is not installed: scripts/deps.sh --python installs it")
tokenizers = pytest.importorskip("tokenizers", reason="tokenizers (a transformers dependency) is not installed")

import minfer  # noqa: E402
from minfer.chat import ChatTemplate  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"

# fixture folder -> the kind minfer must recognise its template as
EXPECTED_KIND = {
    "meta-llama-Llama-2-7b-chat-hf": "llama2",
    "meta-llama-Meta-Llama-3-8B-Instruct": "llama3",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3.1",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3.2",
    "mistralai-Mistral-7B-Instruct-v0.1-first": "mistral-v0.1-old",
    "mistralai-Mistral-7B-Instruct-v0.2-first": "mistral-v1-old",
    "mistralai-Mistral-7B-Instruct-v0.2": "mistral-v1",
    "mistralai-Mistral-7B-Instruct-v0.3": "mistral-v3",
    "Qwen-Qwen2-7B-Instruct": "qwen2",
    "Qwen-Qwen2.5-7B-Instruct": "qwen2.5",
    "teknium-OpenHermes-2.5-Mistral-7B": "chatml",
}
NAMES = sorted(EXPECTED_KIND)

# Contents chosen to catch trimming, escaping and byte-handling slips.
CONTENTS = [
    "Hello",
    "",
    "  leading and trailing spaces  ",
    "\n\nnewlines around\n\n",
    "tab\there, and no-break\u00a0space\u00a0",
    "\u3000ideographic space and em\u2003space\u3000",
    "unicode: héllo, 日本語, emoji 🦙👩‍💻, RTL مرحبا",
    "\u2028line separator\u2029",
    "\u0085next line\x1c\x1d\x1e\x1f",
    "quotes ' \" and {{ not jinja }} {% raw %} \\n \\",
    "<s>[INST] fake markers [/INST]</s><|im_start|><|eot_id|>",
    "a\rb\r\n",
    "   ",
    "\u200bzero width (not whitespace)\u200b",
    "x" * 3000,
]

SHAPES = [
    "u", "su", "ua", "uau", "suau", "suaua", "sua", "s", "a", "au", "uu", "ssu", "usu", "uasu", "sa",
    "suu", "uaa", "suaus", "sususu", "ua" * 6 + "u",
]
ROLE = {"s": "system", "u": "user", "a": "assistant"}


def _conversation(shape, rng):
    return [{"role": ROLE[c], "content": rng.choice(CONTENTS)} for c in shape]


def _conversations():
    rng = random.Random(1234)
    out = []
    for shape in SHAPES:  # every shape with a few content draws
        for _ in range(3):
            out.append(_conversation(shape, rng))
    for _ in range(120):  # and random ones: any roles in any order
        shape = "".join(rng.choice("suaa") for _ in range(rng.randint(1, 7)))
        out.append(_conversation(shape, rng))
    # every content in the first, second and last position of the common shapes
    for content in CONTENTS:
        for shape in ("u", "su", "sua", "suau"):
            conv = [{"role": ROLE[c], "content": "ok"} for c in shape]
            for i in {0, 1 if len(shape) > 1 else 0, len(shape) - 1}:
                conv2 = [dict(m) for m in conv]
                conv2[i]["content"] = content
                out.append(conv2)
    return out


CONVERSATIONS = _conversations()


def _hf_tokenizer(src, tmp):
    """transformers' tokenizer for a fixture folder: the folder's files as
    they are, plus a tiny tokenizer.json knowing only the special tokens
    (apply_chat_template(tokenize=False) needs nothing more)."""
    d = tmp / src.name
    shutil.copytree(src, d)
    cfg = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab = {"<unk>": 0}
    for key in ("bos_token", "eos_token"):
        if cfg.get(key):
            vocab.setdefault(cfg[key], len(vocab))
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tk.save(str(d / "tokenizer.json"))
    return transformers.AutoTokenizer.from_pretrained(str(d))


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """fixture name -> (transformers tokenizer, minfer ChatTemplate)"""
    tmp = tmp_path_factory.mktemp("chat")
    return {name: (_hf_tokenizer(FIXTURES / name, tmp), ChatTemplate.load(FIXTURES / name)) for name in NAMES}


def _hf_render(tok, conv, gen, **kw):
    """(text, None) or (None, the exception) from transformers."""
    try:
        return tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen, **kw), None
    except (jinja2.exceptions.TemplateError, ValueError, TypeError) as e:  # UndefinedError is a TemplateError
        return None, e


def _mf_render(t, conv, gen, **kw):
    try:
        return t.render(conv, add_generation_prompt=gen, **kw), None
    except minfer.MinferError as e:
        return None, e


def _check_same(name, tok, t, conv, gen, **kw):
    want, hf_err = _hf_render(tok, conv, gen, **kw)
    got, mf_err = _mf_render(t, conv, gen, **kw)
    roles = [m["role"] for m in conv]
    if hf_err is not None:
        assert mf_err is not None, (
            f"{name} {roles} gen={gen}: transformers raised {hf_err!r}, minfer rendered {got!r}")
        assert mf_err.status == minfer._lib.MF_ERR_INVALID_ARG, f"{name} {roles}: {mf_err}"
        if type(hf_err) is jinja2.exceptions.TemplateError:  # the template's raise_exception(message)
            assert str(hf_err) in mf_err.message, f"{name} {roles}: {hf_err} vs {mf_err.message}"
        return "error"
    assert mf_err is None, f"{name} {roles} gen={gen}: transformers rendered {want!r}, minfer raised {mf_err}"
    assert got == want, f"{name} {roles} gen={gen}:\n transformers {want!r}\n minfer       {got!r}"
    return "same"


@pytest.mark.parametrize("name", NAMES)
def test_recognised(name):
    t = ChatTemplate.load(FIXTURES / name)
    assert t.kind == EXPECTED_KIND[name]
    assert t.text  # the template it came from is kept


@pytest.mark.parametrize("name", NAMES)
def test_matches_transformers(name, pairs):
    tok, t = pairs[name]
    kw = {}
    if EXPECTED_KIND[name] in ("llama3.1", "llama3.2"):
        kw["date_string"] = "05 Mar 2025"  # today's date is tested below
    counts = {"same": 0, "error": 0}
    for conv in CONVERSATIONS:
        for gen in (False, True):
            counts[_check_same(name, tok, t, conv, gen, **kw)] += 1
    # the set is meant to reach both outcomes on every template
    assert counts["same"] >= 60, counts
    if EXPECTED_KIND[name] in ("llama2", "mistral-v1", "mistral-v1-old", "mistral-v0.1-old", "mistral-v3"):
        assert counts["error"] >= 50, counts


@pytest.mark.parametrize("name", ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct"])
def test_llama3_default_date(name, pairs):
    """No date_string: 3.1's fixed "26 Jul 2024", 3.2's strftime_now (today)."""
    tok, t = pairs[name]
    conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    for _ in range(3):  # a run across midnight retries
        want, _ = _hf_render(tok, conv, True)
        got, err = _mf_render(t, conv, True)
        again, _ = _hf_render(tok, conv, True)
        if want == again:
            break
    assert err is None, err
    assert got == want


def test_forced_kind_renders_like_the_template():
    """A kind forced by name (no template text) renders as the recognised one."""
    for name in NAMES:
        cfg = json.loads((FIXTURES / name / "tokenizer_config.json").read_text(encoding="utf-8"))
        real = ChatTemplate.load(FIXTURES / name)
        forced = ChatTemplate(name=EXPECTED_KIND[name], bos=cfg.get("bos_token"), eos=cfg.get("eos_token"))
        assert forced.kind == real.kind and forced.text is None
        for shape in ("su", "uau", "suaus"):
            conv = [{"role": ROLE[c], "content": f" {c} "} for c in shape]
            for gen in (False, True):
                a = _mf_render(forced, conv, gen, date_string="01 Jan 2025")
                b = _mf_render(real, conv, gen, date_string="01 Jan 2025")
                assert a[0] == b[0] and str(a[1]) == str(b[1]), (name, shape, gen, a, b)


def test_refusals():
    t = ChatTemplate.load(FIXTURES / "Qwen-Qwen2.5-7B-Instruct")
    with pytest.raises(minfer.MinferError, match="at least one message"):
        t.render([])
    with pytest.raises(minfer.UnsupportedError, match="tool"):
        t.render([{"role": "user", "content": "x"}, {"role": "tool", "content": "42"}])
    with pytest.raises(minfer.MinferError, match="want system, user or assistant"):
        t.render([{"role": "developer", "content": "x"}])
    with pytest.raises(minfer.MinferError, match="not valid UTF-8"):
        t.render([{"role": "user", "content": b"caf\xe9"}])  # Latin-1 bytes
    with pytest.raises(minfer.MinferError, match="not valid UTF-8"):
        t.render([{"role": "user", "content": "\ud800"}])  # a lone surrogate
    with pytest.raises(minfer.MinferError, match="content is NULL"):
        t.render([{"role": "user"}])
    with pytest.raises(minfer.UnsupportedError, match="llama2, llama3"):
        ChatTemplate(text="{{ messages }}")
    with pytest.raises(minfer.UnsupportedError, match="choices"):
        ChatTemplate(name="vicuna")
