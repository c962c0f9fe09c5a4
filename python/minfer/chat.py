"""Chat templates (include/minfer/chat.h): a conversation rendered into the
prompt text a chat model was trained on, as transformers'
apply_chat_template(messages, tokenize=False) renders it.

    from minfer.chat import ChatTemplate
    t = ChatTemplate.load("path/to/checkpoint")          # recognises its template
    t = ChatTemplate(name="llama3", bos="<|begin_of_text|>")  # or force a kind
    text = t.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)

Errors raise minfer.MinferError (UnsupportedError for a template minfer does
not know or a tool message), with the library's message.
"""

import ctypes

from . import _lib as L
from . import _raise_for

__all__ = ["ChatTemplate", "KINDS"]

# mf_chat_kind, by value
KINDS = ("none", "llama2", "llama3", "llama3.1", "llama3.2", "mistral-v1", "mistral-v1-old", "mistral-v0.1-old",
         "mistral-v3", "chatml", "qwen2", "qwen2.5")


class _Message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class _Opts(ctypes.Structure):
    _fields_ = [("add_generation_prompt", ctypes.c_bool), ("date_string", ctypes.c_char_p)]


_vp = ctypes.c_void_p
_PROTOTYPES = {
    "mf_chat_template_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "mf_chat_template_new": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                            ctypes.POINTER(_vp)]),
    "mf_chat_template_free": (None, [_vp]),
    "mf_chat_template_kind": (ctypes.c_int, [_vp]),
    "mf_chat_template_text": (ctypes.c_char_p, [_vp]),
    "mf_chat_render": (ctypes.c_int, [_vp, ctypes.POINTER(_Message), ctypes.c_int64, ctypes.POINTER(_Opts),
                                      ctypes.POINTER(_vp), ctypes.POINTER(ctypes.c_size_t)]),
    "mf_chat_free_buffer": (None, [_vp]),
}
_declared = None


def _lib():
    global _declared
    lib = L.load()
    if _declared is not lib:
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)  # AttributeError: a library built before chat templates
            fn.restype, fn.argtypes = restype, argtypes
        _declared = lib
    return lib


def _utf8(s, what):
    """str -> UTF-8 bytes for C (None stays None); strict, no NUL inside."""
    if s is None:
        return None
    if isinstance(s, bytes):
        b = s  # raw bytes pass through: the library checks them
    elif isinstance(s, str):
        b = s.encode("utf-8", "surrogatepass")  # a lone surrogate reaches C, which refuses it
    else:
        raise TypeError(f"{what} must be str or bytes, got {type(s).__name__}")
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL character (the C API takes NUL-terminated text)")
    return b


class ChatTemplate:
    """An mf_chat_template. ChatTemplate.load(dir, name=None) reads a
    checkpoint folder; ChatTemplate(text=None, name=None, bos=None, eos=None)
    builds one from memory (text recognised, or the kind `name` forced)."""

    def __init__(self, text=None, name=None, bos=None, eos=None, _handle=None):
        self._h = _vp()
        if _handle is not None:
            self._h = _handle
            return
        lib = _lib()
        _raise_for(lib.mf_chat_template_new(_utf8(text, "text"), _utf8(name, "name"), _utf8(bos, "bos"),
                                            _utf8(eos, "eos"), ctypes.byref(self._h)))

    @classmethod
    def load(cls, dir, name=None):
        lib = _lib()
        h = _vp()
        _raise_for(lib.mf_chat_template_load(_utf8(str(dir), "dir"), _utf8(name, "name"), ctypes.byref(h)))
        return cls(_handle=h)

    @property
    def kind(self):
        """The kind's name ("llama3.1", ...)."""
        k = _lib().mf_chat_template_kind(self._h)
        return KINDS[k] if 0 <= k < len(KINDS) else "?"

    @property
    def text(self):
        """The template text it was recognised from, or None."""
        t = _lib().mf_chat_template_text(self._h)
        return None if t is None else t.decode("utf-8")

    def render(self, messages, add_generation_prompt=False, date_string=None):
        """messages: [{"role": ..., "content": ...}] -> the prompt (str)."""
        if not self._h:
            raise ValueError("ChatTemplate already closed")
        lib = _lib()
        keep = []  # the bytes the C array points into
        arr = (_Message * max(len(messages), 1))()
        for i, m in enumerate(messages):
            role = _utf8(m.get("role"), f"messages[{i}].role")
            content = _utf8(m.get("content"), f"messages[{i}].content")
            keep += [role, content]
            arr[i] = _Message(role, content)
        opts = _Opts(bool(add_generation_prompt), _utf8(date_string, "date_string"))
        out, n = _vp(), ctypes.c_size_t()
        _raise_for(lib.mf_chat_render(self._h, arr, len(messages), ctypes.byref(opts), ctypes.byref(out),
                                      ctypes.byref(n)))
        try:
            return ctypes.string_at(out.value, n.value).decode("utf-8")
        finally:
            lib.mf_chat_free_buffer(out)

    def close(self):
        if self._h:
            _lib().mf_chat_template_free(self._h)
            self._h = _vp()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self):
        return f"<minfer.chat.ChatTemplate {self.kind}>"
