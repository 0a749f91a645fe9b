"""Model and Context: Python objects over libsparsekv's skv_model and skv_context."""

import collections
import contextlib
import ctypes
import functools
import numbers
import os
import threading
import warnings
import weakref
from ctypes import byref, c_int

import numpy as np

from . import _lib as L

_lib = L.lib

# ---------------------------------------------------------------------------------------------
# Errors


class Error(Exception):
    """A libsparsekv call failed. .status is the skv_status code, .status_name its name, and the
    message is the library's sentence."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def status_name(self):
        if self.status is None:
            return None
        s = _lib.skv_status_str(self.status)
        return s.decode() if s else str(self.status)


class InvalidArgumentError(Error, ValueError):
    """A bad argument (SKV_ERR_INVALID_ARG); also a ValueError."""

    status = 1


class IOError_(Error, OSError):
    """A file could not be opened or read (SKV_ERR_IO); also an OSError."""

    status = 2


# exported as sparsekv.IOError (the trailing _ only keeps the builtin's name free in this module)
IOError_.__name__ = IOError_.__qualname__ = "IOError"


class FormatError(Error):
    """A file is not a valid GGUF / model of a supported shape (SKV_ERR_FORMAT)."""

    status = 3


class UnsupportedError(Error):
    """Valid, but not supported: an architecture, tensor type or option (SKV_ERR_UNSUPPORTED)."""

    status = 4


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed (SKV_ERR_NOMEM); also a MemoryError."""

    status = 5


class StateError(Error):
    """The call does not fit the object's state: closed, full, busy (SKV_ERR_STATE)."""

    status = 6


# where pickle finds them (a worker process's error comes back) and what tracebacks print
for _cls in (Error, InvalidArgumentError, IOError_, FormatError, UnsupportedError,
             OutOfMemoryError, StateError):
    _cls.__module__ = "sparsekv"
del _cls


_BY_STATUS = {c.status: c for c in (InvalidArgumentError, IOError_, FormatError,
                                    UnsupportedError, OutOfMemoryError, StateError)}


# The library's words name its C calls; from Python, the method that does the same.
_PY_NAMES = (("skv_context_accumulate_attention(ctx, true)", "ctx.accumulate_attention(True)"),)


# What the score functions of Python policies raised inside library calls (sparsekv/_policy.py):
# (policy name, the words written into the library's message) -> exception, the newest last, at
# most _POLICY_RAISED_MAX kept (a call that fails on several heads at once reports one). The
# error a call returns is raised from the entry its message names: calls in other threads leave
# their own entries.
_policy_raised = collections.OrderedDict()
_policy_raised_lock = threading.Lock()
_POLICY_RAISED_MAX = 64


def _policy_cause(msg):
    with _policy_raised_lock:
        for key in reversed(_policy_raised):
            name, words = key
            if ("policy '%s' failed" % name) in msg and words[:100] in msg:
                return _policy_raised.pop(key)
    return None


def _raise(err, fallback="libsparsekv call failed"):
    msg = err.msg.decode("utf-8", "replace") or fallback
    for c_name, py_name in _PY_NAMES:
        msg = msg.replace(c_name, py_name)
    cls = _BY_STATUS.get(err.status, Error)
    cause = _policy_cause(msg) if _policy_raised else None
    if cause is not None and not isinstance(cause, Exception):
        raise cause  # KeyboardInterrupt, SystemExit: as they were, not as a library error
    if cause is not None:
        raise cls(msg, err.status) from cause
    raise cls(msg, err.status)


def _check(status, err):
    if status != L.OK:
        if err.status == L.OK:
            err.status = status
        _raise(err)


def _bad_arg(msg):
    return InvalidArgumentError(msg, 1)


def _policy_rows():
    """The library's policy registry, one dict per row (sparsekv.policies())."""
    if not L.have("skv_policy_describe"):
        return [{"name": n} for n in ("sink_recent", "random", "attention", "pyramid")]
    out = []
    for i in range(_lib.skv_policy_count()):
        buf = ctypes.create_string_buffer(ctypes.sizeof(L.skv_policy_about) + 256)
        a = L.skv_policy_about.from_buffer(buf)  # room for fields newer than _lib.py
        err = L.skv_err()
        if _lib.skv_policy_describe(i, byref(a), byref(err)) != L.OK:
            _raise(err)
        d = {}
        for f, _ in L.skv_policy_about._fields_:
            v = getattr(a, f)
            d[f] = v.decode() if isinstance(v, bytes) else v
        out.append(d)
    return out


def _policy_row(name):
    """The registry row (a dict) of a policy or alias, or None when the registry does not know
    it."""
    canon = _lib.skv_policy_canonical(name.encode()) if isinstance(name, str) else None
    for row in _policy_rows() if canon else ():
        if row["name"] == canon.decode():
            return row
    return None


def _policy_reads(name):
    """(canonical name, the set of skv_compress_params fields it reads) of a policy or alias,
    or (None, None) when the registry does not know it."""
    row = _policy_row(name)
    if row is None or "params" not in row:
        return None, None
    return row["name"], {f for f in (row["params"] or "").split(",") if f}


# ---------------------------------------------------------------------------------------------
# Helpers

_KV_TYPES = ("f32", "f16", "q8_0")
_MAX_THREADS = 1024  # SKV_MAX_THREADS (sparsekv.h), the CLI's -t range (0 here: all cores)


def _int(v, what, lo=L.INT_MIN, hi=L.INT_MAX):
    """v as a Python int in [lo, hi] (default: a C int's range), else InvalidArgumentError
    naming the parameter. ctypes would wrap a value outside its C type (2**32 + 2 -> 2), and
    int() would take a bool, a float or a str: each is refused, as the CLI refuses them."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _bad_arg("%s must be an integer, got %r" % (what, v))
    v = int(v)
    if not lo <= v <= hi:
        raise _bad_arg("%s must be an integer in [%d, %d], got %d" % (what, lo, hi, v))
    return v


def _text(text, what="text"):
    """str (encoded as UTF-8) or bytes (as they are): anything else is refused, where bytes()
    would turn an int n into n NULs and an array into its raw buffer."""
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(text, bytes):
        return text
    raise TypeError("%s must be str or bytes, got %s" % (what, type(text).__name__))


def _type_id(name):
    if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
        return _int(name, "kv_type")
    out = c_int(0)
    if not isinstance(name, str) or not _lib.skv_type_from_name(name.encode(), byref(out)):
        raise _bad_arg("unknown type %r (e.g. %s)" % (name, ", ".join(_KV_TYPES)))
    return out.value


def _type_name(t):
    s = _lib.skv_type_name(t)
    return s.decode() if s else str(t)


def _tokens(ids, what="tokens", item="token id"):
    """ids (list, tuple, NumPy array of integers) as a contiguous int32 array; item names one
    of them in the messages."""
    if isinstance(ids, (str, bytes)):
        raise TypeError("%s must be %ss, not text%s" % (
            what, item, " (tokenize it first)" if item == "token id" else ""))
    a = np.asarray(ids)
    if a.ndim != 1:
        a = a.reshape(-1) if a.size == 0 else a
    if a.ndim != 1:
        raise _bad_arg("%s must be a 1-D sequence of %ss, got shape %s" % (what, item, a.shape))
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise _bad_arg("%s must be integers, got dtype %s" % (what, a.dtype))
    if a.size and (a.min() < L.INT_MIN or a.max() > L.INT_MAX):
        raise _bad_arg("%s: a %s does not fit in int32" % (what, item))
    return np.ascontiguousarray(a, dtype=np.int32)


def _sized(call, cap):
    """libsparsekv's convention for a caller's output buffer: call(cap) fills a buffer of cap
    items and returns (n, buffer) where n >= 0 is the count written, n < 0 asks for a capacity
    of -n and INT_MIN is a failure. Tries cap, then once the capacity asked for. Returns
    buffer[:n], or None when the call failed."""
    for _ in range(2):
        n, buf = call(cap)
        if n >= 0:
            return buf[:n]
        if n == L.INT_MIN:
            break
        cap = -n
    return None


def _i32p(a):
    return a.ctypes.data_as(L.P_i32)


def _f32p(a):
    return a.ctypes.data_as(L.P_f32)


def default_model_path():
    """The embedded default model: stories260K.gguf shipped with the package (pip install) or
    models/stories260K.gguf in the source tree. $SKV_DEFAULT_MODEL (as for the CLI; $SKV_MODEL,
    its older name, too) overrides both."""
    for var in ("SKV_DEFAULT_MODEL", "SKV_MODEL"):
        env = os.environ.get(var)
        if env:
            if not os.path.isfile(env):  # say where the path came from, as the CLI does
                raise Error("%s=%s cannot be read (unset it for the embedded model)" % (var, env))
            return env
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.path.join(here, "data", "stories260K.gguf"),
             os.path.join(os.path.dirname(os.path.dirname(here)), "models", "stories260K.gguf")]
    for c in cands:
        if os.path.isfile(c):
            return c
    raise Error("no default model: none of %s exists (pass a path to Model())" % ", ".join(cands))


def _hparams_dict(h):
    """skv_hparams as a dict: every field of the structure, strings decoded, enums named."""
    d = {}
    for name, ctype in L.skv_hparams._fields_:
        v = getattr(h, name)
        if ctype is ctypes.c_bool:
            v = bool(v)
        elif isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif name == "rope_mode":
            v = L.ROPE_MODES.get(v, v)
        elif name == "rope_scaling":
            v = L.ROPE_SCALINGS.get(v, v)
        d[name] = v
    return d


# ---------------------------------------------------------------------------------------------
# Model


class Model:
    """A GGUF model (read-only weights, memory-mapped). Model(None) loads the embedded default
    (stories260K). Use as a context manager, or call close(); contexts keep their model alive."""

    def __init__(self, path=None):
        self._ptr = None
        if path is None:
            path = default_model_path()
        self.path = os.fspath(path)
        if "\0" in (self.path if isinstance(self.path, str) else self.path.decode("latin-1")):
            raise _bad_arg("a model path cannot hold a NUL character: %r" % (self.path,))
        err = L.skv_err()
        ptr = _lib.skv_model_load(os.fsencode(self.path), byref(err))
        if not ptr:
            _raise(err, "cannot load model '%s'" % self.path)
        self._ptr = ptr
        self._closing = False
        self._n_contexts = 0
        # guards the lifetime: contexts and calls under way hold the C model (re-entrant: a
        # context's finalizer may run in a garbage collection inside a guarded region)
        self._life = threading.RLock()
        self._busy = 0
        self._finalizer = weakref.finalize(self, _lib.skv_model_free, ptr)
        # not at interpreter exit: a daemon thread may still be inside a call (the OS takes
        # the memory back anyway)
        self._finalizer.atexit = False
        self._vocab = _lib.skv_model_vocab(ptr)
        self._hparams = _hparams_dict(_lib.skv_model_hparams(ptr).contents)

    # -- lifetime
    def close(self):
        """Frees the model now, or when its last open context is freed (no new contexts can
        be made after close)."""
        self._closing = True
        self._maybe_free()

    def _maybe_free(self):
        with self._life:
            if self._closing and self._n_contexts == 0 and self._busy == 0 and \
                    self._ptr is not None:
                self._ptr = None
                self._finalizer()

    @contextlib.contextmanager
    def _use(self):
        """Holds the C model for a call: close() from another thread frees it after."""
        with self._life:
            self._p()
            self._busy += 1
        try:
            yield
        finally:
            with self._life:
                self._busy -= 1
            self._maybe_free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __copy__(self):
        raise TypeError("a sparsekv.Model cannot be copied: share it (threads may use one model "
                        "through their own contexts)")

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        raise TypeError("a sparsekv.Model cannot be pickled (it holds C memory): load the file "
                        "in each process, sparsekv.Model(path)")

    def _p(self):
        if self._ptr is None:
            raise StateError("the model is closed", 6)
        return self._ptr

    def __repr__(self):
        h = self._hparams
        return "<sparsekv.Model %r: %d layers, %d heads (%d kv), vocab %d>" % (
            os.path.basename(self.path), h["n_layer"], h["n_head"], h["n_head_kv"], h["n_vocab"])

    # -- properties
    @property
    def hparams(self):
        """The model's hyperparameters as a dict (a copy)."""
        return dict(self._hparams)

    @property
    def n_vocab(self):
        """Tokens in the vocabulary: ids are 0..n_vocab-1."""
        return self._hparams["n_vocab"]

    @property
    def weight_bytes(self):
        """Bytes of the weights as held in memory (file mapping or repacked)."""
        return int(_lib.skv_model_weight_bytes(self._p()))

    @property
    def weight_type(self):
        """The type most weights are stored in ("f32", "f16", "q8_0", "q4_k", ...)."""
        return _type_name(_lib.skv_model_weight_type(self._p()))

    @property
    def bos(self):
        """The beginning-of-sequence token id."""
        self._p()
        return int(_lib.skv_vocab_bos(self._vocab))

    @property
    def eos(self):
        """The end-of-sequence token id (generate also stops at the other end-of-generation
        tokens the vocabulary marks)."""
        self._p()
        return int(_lib.skv_vocab_eos(self._vocab))

    # -- tokenizer
    def tokenize(self, text, bos=None, special=False):
        """Token ids of text (str, or bytes taken as they are; anything else is a TypeError) as
        an int32 array; BOS first when bos, or, with bos=None (the default), BOS and EOS where
        the vocabulary asks for them (tokenizer.ggml.add_bos_token: Llama, Mistral, Phi yes;
        Qwen2, GPT-2 no; add_eos_token), as the CLI does. special=True turns the text of special
        tokens ("<s>", "<|im_start|>", ...) into their ids; otherwise such text is encoded as
        ordinary text."""
        self._p()
        data = _text(text)
        as_vocab = bos is None  # BOS and EOS as the vocabulary asks (skv_tokenize_ex's add_special)
        if as_vocab:
            bos = bool(_lib.skv_vocab_add_bos(self._vocab))
        if special and not L.have("skv_tokenize_ex"):
            raise UnsupportedError("this libsparsekv cannot parse special tokens", 4)
        def call(cap):
            out = np.empty(max(cap, 1), dtype=np.int32)
            if special and as_vocab:  # BOS and EOS as the vocabulary asks, specials parsed
                n = _lib.skv_tokenize_ex(self._vocab, data, len(data), True, True, _i32p(out),
                                         cap)
            elif special:
                # BOS by hand, so that bos means the same with and without special
                n = _lib.skv_tokenize_ex(self._vocab, data, len(data), False, True,
                                         _i32p(out[1:] if bos else out), cap - int(bool(bos)))
                if n >= 0 and bos:
                    out[0] = self.bos
                    n += 1
                elif n < 0 and n != L.INT_MIN and bos:
                    n -= 1
            elif as_vocab:
                n = _lib.skv_tokenize_ex(self._vocab, data, len(data), True, False, _i32p(out),
                                         cap)
            else:
                n = _lib.skv_tokenize(self._vocab, data, len(data), bool(bos), _i32p(out), cap)
            return n, out

        ids = _sized(call, len(data) + 4)
        if ids is None:
            raise Error("could not tokenize the text (out of memory or invalid arguments)")
        return ids.copy()

    def detokenize(self, ids, strip_leading_space=False):
        """Text of token ids (BOS/EOS give nothing; SentencePiece's space before the first word
        is dropped after BOS, as in generated text, and kept otherwise unless
        strip_leading_space). Invalid UTF-8 from byte tokens is replaced."""
        return self.detokenize_bytes(ids, strip_leading_space).decode("utf-8", "replace")

    def detokenize_bytes(self, ids, strip_leading_space=False):
        """detokenize's bytes, as the tokens hold them (no UTF-8 replacement)."""
        self._p()
        a = self._check_ids(ids)
        def call(cap):
            buf = ctypes.create_string_buffer(cap)
            n = _lib.skv_detokenize(self._vocab, _i32p(a), len(a), bool(strip_leading_space),
                                    buf, cap)
            return n, buf.raw

        text = _sized(call, 16 * len(a) + 16)
        if text is None:
            raise _bad_arg("could not detokenize: invalid token ids")
        return text

    def token_to_piece(self, token, prev=-1):
        """Bytes of one token as it appears in generated text after token prev (-1: no token
        before it). SentencePiece's leading space of a word is dropped only after BOS:
        token_to_piece(403) is b' Once', token_to_piece(403, bos) b'Once'."""
        self._p()
        token = _int(token, "token", 0, self.n_vocab - 1)
        prev = _int(prev, "prev", -1, self.n_vocab - 1)
        def call(cap):
            buf = ctypes.create_string_buffer(cap)
            return _lib.skv_token_to_piece(self._vocab, prev, int(token), buf, cap), buf.raw

        piece = _sized(call, 64)
        if piece is None:
            raise _bad_arg("could not decode token %d" % token)
        return piece

    def piece(self, token):
        """The raw vocabulary piece of a token (with U+2581 for spaces)."""
        self._p()
        self._check_ids([token])
        s = _lib.skv_vocab_piece(self._vocab, int(token))
        return s.decode("utf-8", "replace") if s is not None else None

    def _check_ids(self, ids):
        a = _tokens(ids)
        if a.size and (a.min() < 0 or a.max() >= self.n_vocab):
            bad = int(a[(a < 0) | (a >= self.n_vocab)][0])
            raise _bad_arg("token id %d is out of range [0, %d)" % (bad, self.n_vocab))
        return a

    # -- contexts
    def new_context(self, n_ctx=0, kv_type="f32", threads=0, capture_window=0):
        """A new context (KV cache + scratch) over this model. n_ctx 0 = the model's training
        length (a LongRoPE model, Phi-3.5 / Phi-4-mini, turns by its long factors when n_ctx is
        past hparams["n_ctx_orig"], else by its short ones: Context.rope_factors); threads 0 =
        all cores; kv_type "f32", "f16" or "q8_0"; capture_window W > 0 keeps the queries of
        each forward call's last W tokens (needed by compress(..., protocol="engine",
        window=W))."""
        train = self.hparams.get("n_ctx_train", 0)
        n_ctx = _int(n_ctx, "n_ctx", 0)  # before the warning: an int that Context() takes
        if train > 0 and n_ctx > train:
            warnings.warn("n_ctx %d is past the model's training context (%d): positions past "
                          "it are ones the model never saw" % (n_ctx, train), stacklevel=2)
        return Context(self, n_ctx=n_ctx, kv_type=kv_type, threads=threads,
                       capture_window=capture_window)


# ---------------------------------------------------------------------------------------------
# Context

_LOGITS = {"none": L.LOGITS_NONE, "last": L.LOGITS_LAST, "all": L.LOGITS_ALL}
_PROTOCOLS = {"seed": L.PROTOCOL_SEED, "engine": L.PROTOCOL_ENGINE}
_POSITIONS = {"original": L.POSITIONS_ORIGINAL, "rerotate": L.POSITIONS_REROTATE}
_POOLING = {"max": L.POOL_MAX, "avg": L.POOL_AVG}
# compress(**policy_params): every skv_compress_params field but the ones compress() takes by
# name; a field added to the structure in _lib.py is accepted here without more work.
_COMPRESS_ARGS = ("policy", "keep_frac", "protocol", "window_tokens", "n_window", "positions")
_CONVERT = {"pooling": lambda v: _enum(_POOLING, v, "pooling")}
_POLICY_PARAMS = [f for f, _ in L.skv_compress_params._fields_ if f not in _COMPRESS_ARGS]
# the integer ones are range-checked against their C type (ctypes would wrap them)
_C_RANGES = {ctypes.c_int: (L.INT_MIN, L.INT_MAX), ctypes.c_uint64: (0, L.UINT64_MAX)}
_PARAM_RANGES = {f: _C_RANGES[t] for f, t in L.skv_compress_params._fields_
                 if f in _POLICY_PARAMS and t in _C_RANGES}
# the registry's ranges (sparsekv policies --params), so that the message gives the real one
_PARAM_RANGES.update(sinks=(0, 1 << 30), kernel=(1, 65536), window_keep=(0, 1 << 30))


def _policy_name(policy):
    """A policy name given as str or bytes, as str (anything else is refused later)."""
    return policy.decode("utf-8", "replace") if isinstance(policy, bytes) else policy


def _compress_params(policy, positions, policy_params, call):
    """skv_compress_params with the policy, positions and policy_params (seed, sinks, pooling,
    kernel, window_keep). Refused here: a parameter the policy does not read (as the CLI), a
    wrong type, a value its C field cannot hold; the library refuses the rest (sinks < 0,
    kernel past 65536, an unknown policy). Returns (params, the canonical name or None)."""
    policy = _policy_name(policy)
    if not isinstance(policy, str):
        raise _bad_arg("policy must be a policy name (str or bytes), got %r" % (policy,))
    p = _lib.skv_compress_default_params()
    p.policy = policy.encode()
    canon, reads = _policy_reads(policy)
    p.positions = _enum(_POSITIONS, positions, "positions")
    for k, v in policy_params.items():
        if k not in _POLICY_PARAMS:
            raise TypeError("%s() got an unexpected keyword argument %r (policy parameters: %s)"
                            % (call, k, ", ".join(_POLICY_PARAMS)))
        if reads is not None and k not in reads:  # as the CLI: not silently ignored
            raise _bad_arg("%s does not apply to policy '%s' (it reads %s)"
                           % (k, canon, ", ".join(sorted(reads)) or "no parameters"))
        conv, rng = _CONVERT.get(k), _PARAM_RANGES.get(k)
        try:
            setattr(p, k, conv(v) if conv else _int(v, k, *rng) if rng else v)
        except TypeError:
            raise _bad_arg("%s(): %s=%r has the wrong type" % (call, k, v)) from None
    return p, canon


def _enum(table, v, what):
    if isinstance(v, str):
        if v not in table:
            raise _bad_arg("%s must be one of %s, got %r" % (what, ", ".join(table), v))
        return table[v]
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and int(v) in table.values():
        return int(v)
    raise _bad_arg("%s must be one of %s, got %r" % (what, ", ".join(table), v))


class Generation:
    """What Context.generate produced: .tokens (int32 array, the new tokens) and .text."""

    def __init__(self, tokens, text):
        self.tokens = tokens
        self.text = text

    def __str__(self):
        return self.text

    def __repr__(self):
        return "Generation(tokens=%r, text=%r)" % (self.tokens.tolist(), self.text)


# Per thread: True while a registered Python policy's score function runs on it
_tls = threading.local()


def _guarded(fn):
    """One call at a time per Context: another thread's call waits for this one (the C context
    serves one thread at a time); a call from inside a policy's score function (the context
    may be the one compressing, whose workers wait for it) is refused; the context's own
    methods calling each other (generate -> forward) pass through."""
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        if getattr(_tls, "in_policy", False):
            raise StateError("a Context cannot be used inside a policy's score function (a "
                             "compression is under way; score from the PolicyHead's arrays)", 6)
        me = threading.get_ident()
        if self._owner == me:
            return fn(self, *args, **kwargs)
        with self._lock:
            self._owner = me
            try:
                return fn(self, *args, **kwargs)
            finally:
                self._owner = None
    return call


def _free_context(ptr, model):
    _lib.skv_context_free(ptr)
    with model._life:
        model._n_contexts -= 1
    model._maybe_free()


def _all_forced(d):
    """The CLI's note: entries were dropped but every kept one was forced, so the policy chose
    nothing and policies that differ only in their scores give the same cache."""
    return d["bytes_after"] < d["bytes_before"] and d["by_score"].size > 0 and \
        not d["by_score"].any()


class Context:
    """Per-sequence state over a model: the KV cache, scratch and captured queries. Create with
    Model.new_context(). A context keeps its model alive; close() (or `with`) frees it.
    Threads may share a context: its calls take turns (one runs, the others wait), so a
    sequence of calls (reset, forward) is not atomic; threads that work in parallel each take
    their own context over the shared Model. A registered policy's score function must not
    use a Context (StateError). Contexts are neither copied nor pickled: clone() copies."""

    def __init__(self, model, n_ctx=0, kv_type="f32", threads=0, capture_window=0, _ptr=None):
        self._ptr = None
        self._lock = threading.Lock()
        self._owner = None
        self.model = model
        self._last_logits = None
        if _ptr is None:
            p = _lib.skv_context_default_params()
            p.n_ctx = _int(n_ctx, "n_ctx", 0)
            p.n_threads = _int(threads, "threads", 0, _MAX_THREADS)
            p.kv_type = _type_id(kv_type)
            p.capture_window = _int(capture_window, "capture_window", 0)
            with model._use():
                if model._closing:
                    raise StateError("the model is closed", 6)
                err = L.skv_err()
                _ptr = _lib.skv_context_new(model._p(), byref(p), byref(err))
                if not _ptr:
                    _raise(err)
                with model._life:  # before the model can be freed
                    model._n_contexts += 1
            self.capture_window = p.capture_window
        else:  # a clone: its source context holds the model meanwhile
            with model._life:
                model._n_contexts += 1
        self._ptr = _ptr
        # a budget that re-rotates lets n_past run past n_ctx (generate's up-front check)
        self._unbounded = False
        # The finalizer holds the model, so the model outlives every context made from it.
        self._finalizer = weakref.finalize(self, _free_context, _ptr, model)
        self._finalizer.atexit = False  # as the model's

    def close(self):
        """Frees the cache and scratch now (else when the context is collected); later calls
        raise StateError. Waits for another thread's call on this context to end."""
        if self._ptr is not None:
            self._ptr = None
            self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __copy__(self):
        raise TypeError("a sparsekv.Context cannot be copied: ctx.clone() makes an independent "
                        "copy of its cache")

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __reduce__(self):
        raise TypeError("a sparsekv.Context cannot be pickled (it holds a C cache); rebuild it "
                        "in the other process")

    def _p(self):
        if self._ptr is None:
            raise StateError("the context is closed", 6)
        return self._ptr

    def _cache(self):
        return _lib.skv_context_cache(self._p())

    def __repr__(self):
        # never waits: a debugger or a print inside a score function shows a busy context
        if getattr(_tls, "in_policy", False):
            return "<sparsekv.Context (busy)>"
        held = self._lock.acquire(blocking=False)
        if not held and self._owner != threading.get_ident():  # (else our own call holds it)
            return "<sparsekv.Context (busy)>"
        try:
            if self._ptr is None:
                return "<sparsekv.Context (closed)>"
            p = self._ptr
            return "<sparsekv.Context n_past=%d n_ctx=%d kv=%s>" % (
                _lib.skv_context_n_past(p), _lib.skv_context_n_ctx(p),
                _type_name(_lib.skv_cache_type(_lib.skv_context_cache(p))))
        finally:
            if held:
                self._lock.release()

    # -- properties
    @property
    def n_past(self):
        """Logical length: the position the next token gets."""
        return int(_lib.skv_context_n_past(self._p()))

    @property
    def n_ctx(self):
        """Positions the context holds (the model's training context unless made smaller)."""
        return int(_lib.skv_context_n_ctx(self._p()))

    @property
    def rope_factors(self):
        """Which LongRoPE factor set this context turns by, "short" (n_ctx up to the model's
        hparams["n_ctx_orig"]) or "long"; None for a model without LongRoPE."""
        h = self.model.hparams
        if h.get("rope_scaling") != "longrope":
            return None
        return "long" if self.n_ctx > h["n_ctx_orig"] else "short"

    @property
    def n_threads(self):
        """Threads the context computes with."""
        return int(_lib.skv_context_n_threads(self._p()))

    @property
    def kv_type(self):
        """The cache's element type: "f32", "f16" or "q8_0"."""
        return _type_name(_lib.skv_cache_type(self._cache()))

    @property
    def n_layer(self):
        """Layers of the cache (the model's)."""
        return int(_lib.skv_cache_n_layer(self._cache()))

    @property
    def n_head_kv(self):
        """KV heads per layer: each keeps its own positions."""
        return int(_lib.skv_cache_n_head_kv(self._cache()))

    @property
    def position_mode(self):
        """"original" (kept keys at their RoPE positions) or "rerotate" (re-rotated to their
        index in the head by a compress or budget with positions="rerotate")."""
        m = _lib.skv_cache_position_mode(self._cache())
        return "rerotate" if m == L.POSITIONS_REROTATE else "original"

    @property
    def cache_bytes(self):
        """Bytes held by retained K, V and positions (all layers)."""
        return int(_lib.skv_cache_bytes(self._cache(), -1))

    def layer_bytes(self, layer):
        """KV bytes of one layer's retained entries (all its heads)."""
        layer, _ = self._check_layer(layer)
        return int(_lib.skv_cache_bytes(self._cache(), layer))

    @property
    def cache_bytes_allocated(self):
        """Bytes actually allocated for the cache (spare capacity included)."""
        return int(_lib.skv_cache_bytes_allocated(self._cache()))

    # -- running the model
    def reset(self):
        """Drops the whole cache (n_past back to 0); its memory stays allocated for the next
        prompt (cache_bytes_allocated)."""
        _lib.skv_context_reset(self._p())
        self._last_logits = None

    def reserve(self, n_tokens):
        """Room for n_tokens more entries in every kv head now (at most n_ctx), so that the
        forward calls that add them do not grow the cache on the way (skv_context_reserve):
        before a long prompt, or on a clone about to decode."""
        n = _int(n_tokens, "n_tokens", 0)
        err = L.skv_err()
        _check(_lib.skv_context_reserve(self._p(), n, byref(err)), err)

    def forward(self, ids, logits="last"):
        """Runs token ids through the model at positions n_past.. (one batched call; under a
        re-rotating budget without room for them all, pieces up to each cut), appending to
        the cache. logits="all" -> float32 [n, n_vocab], "last" -> [n_vocab], "none" -> None."""
        mode = _enum(_LOGITS, logits, "logits")
        a = self.model._check_ids(ids)
        if a.size == 0:
            raise _bad_arg("forward needs at least one token")
        V = self.model.n_vocab
        out = None
        if mode == L.LOGITS_ALL:
            out = np.empty((len(a), V), dtype=np.float32)
        elif mode == L.LOGITS_LAST:
            out = np.empty(V, dtype=np.float32)
        err = L.skv_err()
        p = self._p()
        before = _lib.skv_context_n_past(p)
        st = _lib.skv_forward(p, _i32p(a), len(a), mode,
                              _f32p(out) if out is not None else None, byref(err))
        if st != L.OK and _lib.skv_context_n_past(p) != before:
            # tokens went in (a budget's cut failed after them): the previous call's logits
            # no longer belong to the end of the cache; a refusal that changed nothing keeps them
            self._last_logits = None
        _check(st, err)
        if out is not None:
            self._last_logits = out[-1].copy() if out.ndim == 2 else out.copy()
        else:
            self._last_logits = None
        return out

    def captured_queries(self, layer):
        """(queries float32 [n_head, n, head_dim], first_pos) captured by the last forward call
        for a layer, or (None, None) when nothing was captured."""
        layer, _ = self._check_layer(layer)
        n, first = c_int(0), c_int(0)
        p = _lib.skv_context_captured_queries(self._p(), layer, byref(n), byref(first))
        if not p or n.value <= 0:
            return None, None
        h = self.model._hparams
        shape = (h["n_head"], n.value, h["head_dim"])
        arr = np.ctypeslib.as_array(p, shape=(int(np.prod(shape)),)).reshape(shape).copy()
        return arr, first.value

    # -- compression
    def compress(self, policy, keep, protocol="seed", window=None, positions="original",
                 **policy_params):
        """Compresses the cache in place: per layer and kv head keeps max(1, round(keep * T))
        positions (pyramid: its own per-layer budgets, layer_budgets; adakv: a per-layer total
        shared unevenly by the heads, kept) chosen by policy ("sink_recent"/"streaming",
        "random", "attention"/"snapkv", "pyramid"/"pyramidkv", ...). protocol "seed": window =
        the observation window's token ids, scored on a copy of the cache and not kept;
        "engine": window = W, the last W cached positions, whose queries the prefill captured
        (the context needs capture_window >= W).
        policy_params: seed, sinks, pooling ("max"|"avg"), kernel, window_keep.
        Returns skv_compress_info as a dict. Warns (UserWarning) when entries were dropped but
        every kept one was forced, so that the policy chose nothing."""
        d = self._compress(policy, keep, protocol, window, positions, policy_params)
        if _all_forced(d):
            warnings.warn("%s at keep %g: nothing was chosen by score, every kept entry was "
                          "forced (the engine window, window_keep, sinks, h2o's recent or "
                          "a registered policy's +inf scores); "
                          "raise keep or lower those" % (d["policy"], d["keep_frac"]),
                          stacklevel=3)  # the caller's line (past _guarded's frame)
        return d

    def _compress(self, policy, keep, protocol, window, positions, policy_params):
        """compress without its warning (evaluate words its own, naming the protocol)."""
        policy = _policy_name(policy)
        p, canon = _compress_params(policy, positions, policy_params, "compress")
        # a number (an int is a fraction too); True would be taken as 1.0
        if isinstance(keep, bool) or not isinstance(keep, numbers.Real) or not 0 < keep <= 1:
            raise _bad_arg("keep must be a fraction in (0, 1], got %r" % (keep,))
        p.keep_frac = float(keep)
        p.protocol = _enum(_PROTOCOLS, protocol, "protocol")
        win = None
        no_window = window is None or (hasattr(window, "__len__") and len(window) == 0) or \
            (isinstance(window, (int, np.integer)) and not isinstance(window, bool) and window < 1)
        if no_window and canon is not None and _lib.skv_policy_needs_window(policy.encode()):
            raise _bad_arg("policy '%s' scores with window queries: give window=the window's "
                           "token ids (protocol 'seed'), or window=W with protocol='engine' "
                           "(the context made with capture_window >= W)" % canon)
        if window is not None:
            if p.protocol == L.PROTOCOL_ENGINE:
                if not isinstance(window, (int, np.integer)) or isinstance(window, bool):
                    raise _bad_arg("protocol 'engine' takes window=W, the number of last cached "
                                   "positions that form the window (an int)")
                p.n_window = _int(window, "window")
            else:
                if isinstance(window, (int, np.integer)):
                    raise _bad_arg("protocol 'seed' takes window=the window's token ids (they "
                                   "are scored on a copy of the cache, not kept); "
                                   "window=W (an int) is the engine protocol's")
                win = self.model._check_ids(window)
                p.n_window = len(win)
                if len(win):
                    p.window_tokens = _i32p(win)
        # room past the structure: a library newer than _lib.py writes more fields
        buf = ctypes.create_string_buffer(ctypes.sizeof(L.skv_compress_info) + 1024)
        info = L.skv_compress_info.from_buffer(buf)
        err = L.skv_err()
        st = _lib.skv_compress(self._p(), byref(p), byref(info), byref(err))
        _check(st, err)
        try:
            nl, nh = info.n_layer, info.n_head_kv
            kept = np.ctypeslib.as_array(info.kept, shape=(nl * nh,)).reshape(nl, nh).copy() \
                if info.kept and nl * nh > 0 else np.zeros((nl, nh), dtype=np.int32)
            def per_layer(ptr):
                if not ptr or nl <= 0:
                    return np.zeros(0, dtype=np.int64)
                return np.ctypeslib.as_array(ptr, shape=(nl,)).astype(np.int64)

            budgets = per_layer(info.layer_budgets)
            d = {
                "policy": info.policy.decode(),
                "keep_frac": info.keep_frac,
                "T": info.T,
                "keep": info.keep,
                "compress_ms": info.compress_ms,
                "window_ms": info.window_ms,
                "cache_ms": info.cache_ms,
                "window_tokens": info.window_tokens,
                "n_layer": nl,
                "n_head_kv": nh,
                "layer_budgets": budgets.astype(np.int64),
                "kept": kept.astype(np.int64),
                "bytes_before": int(info.bytes_before),
                "bytes_after": int(info.bytes_after),
                "forced": per_layer(info.forced),
                "by_score": per_layer(info.by_score),
                "selection_hash": int(info.selection_hash),
                "protocol": protocol if isinstance(protocol, str) else
                ("engine" if p.protocol == L.PROTOCOL_ENGINE else "seed"),
                "positions": positions if isinstance(positions, str) else
                ("rerotate" if p.positions == L.POSITIONS_REROTATE else "original"),
            }
        finally:
            _lib.skv_compress_info_free(byref(info))
        return d

    def accumulate_attention(self, on=True):
        """Sums, during later prefills, the attention each key receives (needed by h2o; turn it
        on before the prefill, on an empty cache)."""
        err = L.skv_err()
        _check(_lib.skv_context_accumulate_attention(self._p(), bool(on), byref(err)), err)

    def set_budget(self, policy, max_entries, interval=32, window=None, positions="original",
                   **policy_params):
        """Compresses while decoding (skv_context_set_budget; the CLI's generate --max-cache N
        --compress-every K): after every forward call that brings the tokens since the last cut
        to >= interval (or leaves a head above max_entries + interval), every kv head holding
        more than max_entries entries is cut back to max_entries by policy, scored with the
        last min(window, interval) tokens' queries as the window (always kept). window None =
        interval (the CLI's default). positions="rerotate" re-rotates after every cut; n_past
        may then run past n_ctx (generate allows it), each head holding at most max_entries +
        interval entries. policy_params as compress(). The policy must be a decode one
        (sparsekv.policies(): "decode"); one that needs the prefill's attention (h2o) turns its
        accumulation on, so set such a budget on an empty cache. max_entries 0 removes the
        budget (policy may then be None). The library refuses (InvalidArgumentError)
        max_entries + interval > n_ctx and max_entries <= min(window, interval)."""
        max_entries = _int(max_entries, "max_entries", 0)
        interval = _int(interval, "interval", 1)
        p = None
        if max_entries > 0 or policy is not None:
            p, _ = _compress_params(policy, positions, policy_params, "set_budget")
            p.n_window = interval if window is None else _int(window, "window", 1)
        err = L.skv_err()
        st = _lib.skv_context_set_budget(self._p(), byref(p) if p is not None else None,
                                         max_entries, interval, byref(err))
        _check(st, err)
        self._unbounded = max_entries > 0 and p.positions == L.POSITIONS_REROTATE

    @property
    def budget_cuts(self):
        """Cuts made under the budget (set_budget) so far."""
        return int(_lib.skv_context_budget_cuts(self._p()))

    @property
    def budget_piece(self):
        """How many tokens the next forward should bring so that it ends where a cut is due
        (interval less those fed since the last cut; 0 without a budget): feeding a long input
        in pieces of this size keeps the bound."""
        return int(_lib.skv_context_budget_piece(self._p()))

    def _check_layer(self, layer, head=None):
        """(layer, head) as ints in range (head stays None when not given)."""
        nl, nh = self.n_layer, self.n_head_kv
        layer = _int(layer, "layer")
        if not 0 <= layer < nl:
            raise _bad_arg("layer %d is out of range [0, %d)" % (layer, nl))
        if head is not None:
            head = _int(head, "kv_head")
            if not 0 <= head < nh:
                raise _bad_arg("kv head %d is out of range [0, %d)" % (head, nh))
        return layer, head

    def kept_positions(self, layer, kv_head):
        """The positions retained in (layer, kv head), ascending, as an int32 array (a copy)."""
        layer, kv_head = self._check_layer(layer, kv_head)
        c = self._cache()
        n = _lib.skv_cache_head_len(c, layer, kv_head)
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        p = _lib.skv_cache_head_positions(c, layer, kv_head)
        return np.ctypeslib.as_array(p, shape=(n,)).copy()

    def all_kept_positions(self):
        """kept_positions for every layer and kv head: a list (layers) of lists (heads)."""
        return [[self.kept_positions(l, h) for h in range(self.n_head_kv)]
                for l in range(self.n_layer)]

    def head_lengths(self):
        """Entries each kv head holds, as an int64 array [n_layer, n_head_kv] (under a budget:
        at most max_entries + interval)."""
        c = self._cache()
        return np.array([[_lib.skv_cache_head_len(c, l, h) for h in range(self.n_head_kv)]
                         for l in range(self.n_layer)], dtype=np.int64)

    def read_head(self, layer, kv_head):
        """(k, v, positions) of one head as float32 [len, head_dim] x2 and int32 [len]."""
        layer, kv_head = self._check_layer(layer, kv_head)
        c = self._cache()
        n = _lib.skv_cache_head_len(c, layer, kv_head)
        d = _lib.skv_cache_head_dim(c)
        k = np.empty((n, d), dtype=np.float32)
        v = np.empty((n, d), dtype=np.float32)
        pos = np.empty(n, dtype=np.int32)
        err = L.skv_err()
        st = _lib.skv_cache_head_read(c, layer, kv_head, _f32p(k), _f32p(v), _i32p(pos),
                                      byref(err))
        _check(st, err)
        return k, v, pos

    def select(self, layer, positions, kv_head=None):
        """Keeps only the listed positions in a layer (every kv head), or in one kv head."""
        layer, kv_head = self._check_layer(layer, kv_head)
        a = _tokens(positions, "positions", "position")
        err = L.skv_err()
        if kv_head is None:
            st = _lib.skv_cache_select_layer(self._cache(), layer, _i32p(a), len(a), byref(err))
        else:
            st = _lib.skv_cache_select_head(self._cache(), layer, kv_head, _i32p(a), len(a),
                                            byref(err))
        _check(st, err)

    def clone(self):
        """A new, independent context over the same model with a deep copy of the cache."""
        err = L.skv_err()
        ptr = _lib.skv_context_clone(self._p(), byref(err))
        if not ptr:
            _raise(err)
        c = Context(self.model, _ptr=ptr)
        c.capture_window = getattr(self, "capture_window", 0)
        c._unbounded = self._unbounded  # the clone has the budget too
        c._last_logits = None if self._last_logits is None else self._last_logits.copy()
        return c

    # -- generation
    def generate(self, prompt=None, n=32, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 stop_at_eos=True, on_token=None):
        """Feeds prompt (text: str or bytes, tokenized with BOS when the cache is empty; or
        token ids) and samples up to n tokens (temperature 0 = greedy; stops before an
        end-of-generation token (EOS, EOT, ...) when stop_at_eos).
        Each new token is fed to the cache, so n_past grows by the prompt and the new tokens and
        another generate() without a prompt continues the text (it starts from the logits of
        the last forward call). on_token(id, piece_bytes) is called for each new
        token (streaming). Under a budget (set_budget) the prompt goes in pieces of its
        interval, each followed by its cut (the CLI's generate does the same). Returns a
        Generation (.tokens, .text)."""
        model = self.model
        n = _int(n, "n", 0, 1 << 30)  # the CLI's -n range
        top_k = _int(top_k, "top_k", 0, 1 << 30)
        seed = _int(seed, "seed", 0, L.UINT64_MAX)
        # before the prompt goes in: a bad argument changes nothing
        if on_token is not None and not callable(on_token):
            raise TypeError("on_token must be callable (id, piece_bytes), got %s"
                            % type(on_token).__name__)
        for what, v, ok in (("temperature", temperature, "a number >= 0 (0: greedy)"),
                            ("top_p", top_p, "a number in (0, 1] (1: off)")):
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise _bad_arg("%s must be %s, got %r" % (what, ok, v))
        if not 0 <= temperature <= 3.4028234663852886e38:  # a finite C float
            raise _bad_arg("temperature must be a finite number >= 0 (0: greedy), got %r"
                           % (temperature,))
        if not 0 < top_p <= 1:
            raise _bad_arg("top_p must be a number in (0, 1] (1: off), got %r" % (top_p,))
        if isinstance(prompt, (str, bytes)):
            ids = model.tokenize(prompt, bos=None if self.n_past == 0 else False)
        elif prompt is None:
            ids = np.zeros(0, dtype=np.int32)
        else:
            ids = model._check_ids(prompt)
        # refused up front, as the CLI does, rather than failing with the context full and the
        # tokens sampled so far lost (a re-rotating budget keeps the heads within n_ctx)
        if self.n_past + len(ids) + n > self.n_ctx and not self._unbounded:
            raise _bad_arg("generate: %d cached + %d prompt + %d new tokens would exceed n_ctx "
                           "= %d (lower n, make the context larger, or set a budget with "
                           "positions='rerotate')" % (self.n_past, len(ids), n, self.n_ctx))
        if len(ids):
            # under a budget the prompt goes in pieces that end where cuts are due, so that no
            # head holds more than max_entries + interval during it either
            i = 0
            while i < len(ids):
                step = self.budget_piece or len(ids) - i
                logits = self.forward(ids[i:i + step],
                                      logits="last" if i + step >= len(ids) else "none")
                i += step
            prev = int(ids[-1])
        elif self._last_logits is not None:
            logits = self._last_logits.copy()
            prev = -1
        else:
            raise StateError("generate needs a prompt: no logits from a previous forward call",
                             6)
        sp = _lib.skv_sampler_default_params()
        sp.temperature = float(temperature)
        sp.top_k = top_k
        sp.top_p = float(top_p)
        sp.seed = seed
        err = L.skv_err()
        s = _lib.skv_sampler_new(byref(sp), byref(err))
        if not s:
            _raise(err)
        out = []
        pieces = []
        eos = model.eos
        if L.have("skv_vocab_is_eog"):
            def is_end(t):
                return bool(_lib.skv_vocab_is_eog(model._vocab, t))
        else:
            def is_end(t):
                return t == eos
        V = model.n_vocab
        try:
            for i in range(n):
                tok = int(_lib.skv_sampler_sample(s, _f32p(logits), V))
                if stop_at_eos and is_end(tok):
                    break
                out.append(tok)
                piece = model.token_to_piece(tok, prev)
                pieces.append(piece)
                if on_token is not None:
                    on_token(tok, piece)
                prev = tok
                # every kept token goes into the cache, so a later generate() continues after it
                logits = self.forward([tok], logits="last")
        finally:
            _lib.skv_sampler_free(s)
        return Generation(np.array(out, dtype=np.int32),
                          b"".join(pieces).decode("utf-8", "replace"))


# every method and property of Context that reaches the C context, one call at a time
for _name, _attr in list(vars(Context).items()):
    if _name == "_compress" or not _name.startswith("_"):
        if isinstance(_attr, property):
            setattr(Context, _name, property(_guarded(_attr.fget), doc=_attr.__doc__))
        elif callable(_attr):
            setattr(Context, _name, _guarded(_attr))
del _name, _attr


def _model_call(fn):
    """A Model method or property run while holding the C model (see Model._use)."""
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        with self._use():
            return fn(self, *args, **kwargs)
    return call


for _name, _attr in list(vars(Model).items()):
    if not _name.startswith("_") and _name not in ("close", "path"):
        if isinstance(_attr, property):
            setattr(Model, _name, property(_model_call(_attr.fget), doc=_attr.__doc__))
        elif callable(_attr):
            setattr(Model, _name, _model_call(_attr))
del _name, _attr
