"""Policies written in Python: a score function registered in libsparsekv's policy registry
(skv_policy_register), called by the library once per (layer, kv head) wherever it compresses:
Context.compress, Context.set_budget's cuts, evaluate and evaluate_budget."""

import ctypes
import threading

import numpy as np

from . import _core
from . import _lib as L
from ._core import _bad_arg, _check, _text

# The ctypes callbacks and definitions stay alive as long as the process: the registry keeps a
# registered row to the end (it has no removal).
_alive = []
_register_lock = threading.Lock()


def _words(e):
    """"Type: message" of an exception, even when its __str__ raises."""
    try:
        return "%s: %s" % (type(e).__name__, e)
    except BaseException:
        return "%s (its message could not be formatted)" % type(e).__name__


class PolicyHead:
    """One (layer, kv head) as a Python policy's score function sees it. Arrays are copies:

    keys       [n, head_dim] float32, post-RoPE keys of the n entries to score (rotated at their
               original positions, or at their index in the head under positions="rerotate")
    values     [n, head_dim] float32, their values (None unless registered with needs_values)
    positions  [n] int32, their logical positions, ascending (after a budget's cut entry 0 is
               not position 0: sinks are positions < S)
    queries    [group, n_window, head_dim] float32, the window's post-RoPE queries of the
               group's query heads (None unless registered with needs_window)
    layer, kv_head, n, head_dim: ints

    n is what is scored: compress with protocol "seed" scores the whole cache, "engine" all but
    its last W entries (the window, kept); a budget's cut, the entries before its window.
    """

    __slots__ = ("layer", "kv_head", "n", "head_dim", "keys", "values", "queries", "positions")

    def __repr__(self):
        return "PolicyHead(layer=%d, kv_head=%d, n=%d, head_dim=%d%s%s)" % (
            self.layer, self.kv_head, self.n, self.head_dim,
            ", values" if self.values is not None else "",
            ", queries %s" % (self.queries.shape,) if self.queries is not None else "")


def _rows(ptr, n, d):
    if n == 0:
        return np.zeros((0, d), np.float32)
    return np.ctypeslib.as_array(ptr, shape=(n, d)).copy()


def _head(h):
    n, d = h.n, h.head_dim
    out = PolicyHead()
    out.layer, out.kv_head, out.n, out.head_dim = h.layer, h.kv_head, n, d
    out.keys = _rows(h.keys, n, d)
    out.values = _rows(h.values, n, d) if h.values else None
    out.positions = (np.ctypeslib.as_array(h.positions, shape=(n,)).copy() if n and h.positions
                     else np.zeros(0, np.int32))
    out.queries = None
    if h.queries and h.n_window > 0 and h.group > 0:
        g, w, stride = h.group, h.n_window, h.query_head_stride
        flat = np.ctypeslib.as_array(h.queries, shape=((g - 1) * stride + w * d,))
        out.queries = np.lib.stride_tricks.as_strided(
            flat, shape=(g, w, d), strides=(stride * 4, d * 4, 4)).copy()
    return out


# name -> the score function a row registered here calls now (its flags are the registry's)
_functions = {}


def register_policy(name, score, needs_window=False, needs_values=False, paper=None,
                    replace=False):
    """Adds a policy written in Python to the library's registry, under name ([a-z0-9_], 1 to 31
    characters, not a policy or alias already there). score(head) gets a PolicyHead and returns
    n scores (array-like of floats, higher = more worth keeping; +inf is kept first and counted
    as forced, -inf last); each head keeps its top scores (ties toward the higher position),
    under the library's budgets and engine window (sinks and window_keep are built-in policies'
    parameters: keep sinks with head.positions). The name then works wherever a policy name
    does in this process: Context.compress, Context.set_budget, evaluate, evaluate_budget,
    policies(). Registration lasts as long as the process (at most 64 registered policies);
    replace=True gives a name this function registered a new score function (same
    needs_window and needs_values; the paper stays), as a notebook's re-run cell wants.

    score is called from the library's worker threads, one call at a time (the GIL). An
    exception in it fails the call that compressed with InvalidArgumentError "policy 'NAME'
    failed on layer L kv head H: ...", raised from that exception; compress leaves the cache as
    it was, while under set_budget the failing forward's tokens are in the cache already (the
    cut comes after them) and the heads are not cut. KeyboardInterrupt and SystemExit come back
    as themselves; once a call failed, the library's other workers score no more heads. NaN
    scores are refused (sparsekv.Error, status SKV_ERR_NUMERIC). A Context used inside score
    raises StateError (the context compressing is in the middle of it). Register before other
    threads compress: the registry is not guarded against registration during a
    compression."""
    if not callable(score):
        raise TypeError("score must be callable, got %s" % type(score).__name__)
    bname = _text(name, "name")
    key = bname.decode("utf-8", "replace")
    bpaper = None if paper is None else _text(paper, "paper")
    for what, b in (("name", bname), ("paper", bpaper or b"")):
        if b"\0" in b:  # C would stop reading there
            raise _bad_arg("a policy %s cannot hold a NUL character: %r" % (what, b))

    def trampoline(user, head_p, score_p, err_p):
        try:
            head = _head(head_p.contents)
            _core._tls.in_policy = True  # a Context used from here would be re-entered
            try:
                raw = np.asarray(_functions[key](head))
            finally:
                _core._tls.in_policy = False
            if np.iscomplexobj(raw):
                raise TypeError("the score function returned complex scores")
            out = np.asarray(raw, dtype=np.float64)
            if out.shape != (head.n,):
                raise ValueError("the score function returned shape %s for %d positions"
                                 % (out.shape, head.n))
            if head.n:
                np.ctypeslib.as_array(score_p, shape=(head.n,))[:] = out
            return L.OK
        except BaseException as e:  # nothing may unwind through the library's frames
            try:
                words = _words(e)
                text = words.encode("utf-8", "replace")[:500]
                err_p.contents.msg = text
                words = text.decode("utf-8", "ignore")  # as the message will hold them
                with _core._policy_raised_lock:
                    _core._policy_raised[(key, words)] = e
                    _core._policy_raised.move_to_end((key, words))
                    while len(_core._policy_raised) > _core._POLICY_RAISED_MAX:
                        _core._policy_raised.popitem(last=False)
            except BaseException:
                pass
            return 1  # SKV_ERR_INVALID_ARG

    with _register_lock:
        if key in _functions:
            if not replace:
                raise _bad_arg("policy '%s' is already registered: pass replace=True to give "
                               "it this score function" % key)
            row = _core._policy_row(key)
            if (row["needs_window"], row["needs_values"]) != (bool(needs_window),
                                                              bool(needs_values)):
                raise _bad_arg("policy '%s' was registered with needs_window=%s, "
                               "needs_values=%s: a replacement keeps them"
                               % (key, row["needs_window"], row["needs_values"]))
            _functions[key] = score
            return key

    cb = L.POLICY_SCORE_FN(trampoline)
    d = L.skv_policy_def(name=bname, paper=bpaper, needs_window=bool(needs_window), score=cb,
                         user=None, needs_values=bool(needs_values))
    err = L.skv_err()
    with _register_lock:  # the C registry takes one registration at a time
        _check(L.lib.skv_policy_register(ctypes.byref(d), ctypes.byref(err)), err)
        _alive.append((cb, d))  # cb holds the trampoline
        _functions[key] = score
    return key
