"""Policies written in Python (sparsekv.register_policy): the library calls the score function
once per (layer, kv head) with that head's keys, values and window queries, and keeps each
head's top scores. References: the C knorm (the same rule in NumPy selects the same positions),
the cache's own values (read_head before compressing), the queries the prefill captured (engine
protocol). The registry is the process's: every test registers its own names."""

import time

import numpy as np
import pytest

import sparsekv

PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park with her friends. One day, she saw a big red ball under a tree.")


@pytest.fixture(scope="module")
def model():
    with sparsekv.Model() as m:  # the embedded stories260K: no fixture needed
        yield m


def _ctx(model, **kw):
    c = model.new_context(n_ctx=256, threads=2, **kw)  # two workers call the scorer
    c.forward(model.tokenize(PROMPT), logits="none")
    return c


def _top(scores, k):
    """The positions a head keeps: its k best scores, ties toward the higher position."""
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i), reverse=True)
    return sorted(order[:k])


def test_knorm_in_numpy_selects_as_the_builtin(model):
    seen = []

    def py_knorm(h):
        seen.append((h.layer, h.kv_head, h.keys.shape, h.values, h.queries))
        return -np.linalg.norm(h.keys.astype(np.float64), axis=1)

    assert sparsekv.register_policy("py_knorm_t", py_knorm) == "py_knorm_t"
    for keep in (0.5, 0.25):
        with _ctx(model) as a, _ctx(model) as b:
            ia = a.compress("knorm", keep)
            ib = b.compress("py_knorm_t", keep)
            assert ib["policy"] == "py_knorm_t"
            assert ia["selection_hash"] == ib["selection_hash"]
            for la, lb in zip(a.all_kept_positions(), b.all_kept_positions()):
                for ha, hb in zip(la, lb):
                    np.testing.assert_array_equal(ha, hb)
    L, H = model.hparams["n_layer"], model.hparams["n_head_kv"]
    assert sorted(s[:2] for s in seen) == sorted([(l, h) for l in range(L) for h in range(H)] * 2)
    d = model.hparams["head_dim"]
    assert all(s[2][1] == d and s[3] is None and s[4] is None for s in seen)


def test_values_are_the_caches(model):
    def py_vnorm(h):
        return np.linalg.norm(h.values.astype(np.float64), axis=1)

    sparsekv.register_policy("py_vnorm_t", py_vnorm, needs_values=True, paper="value norm")
    row = [r for r in sparsekv.policies() if r["name"] == "py_vnorm_t"][0]
    assert row["needs_values"] and not row["needs_window"] and not row["builtin"]
    assert row["paper"] == "value norm" and row["decode"]
    with _ctx(model) as c:
        L, H = c.n_layer, c.n_head_kv
        norms = {(l, h): np.linalg.norm(c.read_head(l, h)[1].astype(np.float64), axis=1)
                 for l in range(L) for h in range(H)}
        info = c.compress("py_vnorm_t", 0.5)
        for (l, h), nv in norms.items():
            assert list(c.kept_positions(l, h)) == _top(list(nv), info["keep"])


def test_window_queries_are_the_captured_ones(model):
    W = 6
    got = {}

    def py_window(h):
        got[(h.layer, h.kv_head)] = (h.n, h.queries)
        return h.keys @ h.queries.sum(axis=(0, 1))

    sparsekv.register_policy("py_window_t", py_window, needs_window=True)
    with _ctx(model, capture_window=W + 4) as c:  # rows of W + 4 queries, the last W used
        n_past = c.n_past
        hp = model.hparams
        g = hp["n_head"] // hp["n_head_kv"]
        captured = [c.captured_queries(l)[0] for l in range(c.n_layer)]
        c.compress("py_window_t", 0.5, protocol="engine", window=W)
    assert len(got) == hp["n_layer"] * hp["n_head_kv"]
    for (l, h), (n, q) in got.items():
        assert n == n_past - W  # the window is not scored: the engine keeps it
        np.testing.assert_array_equal(q, captured[l][h * g:(h + 1) * g, -W:, :])


def test_errors_leave_the_cache_as_it_was(model):
    def raises(h):
        raise KeyError("no such thing")

    def wrong_length(h):
        return np.zeros(h.n + 1)

    def nan(h):
        s = np.arange(h.n, dtype=float)
        s[0] = np.nan
        return s

    def interrupted(h):
        raise KeyboardInterrupt

    for name, fn in (("py_raises_t", raises), ("py_length_t", wrong_length), ("py_nan_t", nan),
                     ("py_interrupt_t", interrupted)):
        sparsekv.register_policy(name, fn)
    with _ctx(model) as c:
        before = c.head_lengths().copy()
        with pytest.raises(sparsekv.InvalidArgumentError,
                           match=r"policy 'py_raises_t' failed on layer \d+ kv head \d+: "
                                 r"KeyError: 'no such thing'") as e:
            c.compress("py_raises_t", 0.5)
        assert isinstance(e.value.__cause__, KeyError)
        with pytest.raises(sparsekv.InvalidArgumentError, match="returned shape") as e:
            c.compress("py_length_t", 0.5)
        assert isinstance(e.value.__cause__, ValueError)
        with pytest.raises(sparsekv.Error, match="NaN") as e:
            c.compress("py_nan_t", 0.5)
        assert e.value.status == 7  # SKV_ERR_NUMERIC
        with pytest.raises(KeyboardInterrupt):  # a Ctrl-C stays one
            c.compress("py_interrupt_t", 0.5)
        np.testing.assert_array_equal(c.head_lengths(), before)
        c.compress("knorm", 0.5)  # and it still compresses
    with pytest.raises(TypeError):
        sparsekv.register_policy("py_not_callable_t", 3)
    with pytest.raises(sparsekv.InvalidArgumentError, match="already registered"):
        sparsekv.register_policy("py_raises_t", raises)
    with pytest.raises(sparsekv.InvalidArgumentError, match="is already the alias"):
        sparsekv.register_policy("snapkv", raises)
    with pytest.raises(sparsekv.InvalidArgumentError, match=r"\[a-z0-9_\]"):
        sparsekv.register_policy("Has Space", raises)


def test_budget_and_evaluate(model):
    def py_knorm(h):
        return -np.linalg.norm(h.keys.astype(np.float64), axis=1)

    sparsekv.register_policy("py_knorm_b", py_knorm)
    ids = model.tokenize(PROMPT)
    with model.new_context(n_ctx=256) as c:  # under a decoding budget
        c.set_budget("py_knorm_b", 16, interval=8)
        for i in range(0, len(ids), 8):
            c.forward(ids[i:i + 8], logits="none")
            assert c.head_lengths().max() <= 16 + 8
        assert c.budget_cuts > 0
    sample = np.concatenate([ids, ids[1:], ids[1:]])
    r = sparsekv.evaluate(model, [sample], policies=["py_knorm_b", "knorm"], keeps=[0.5],
                          protocols=["seed"], greedy=4)
    rows = {x["policy"]: x for x in r.summary()}
    assert rows["py_knorm_b"]["kl_mean"] == rows["knorm"]["kl_mean"]


def test_each_error_raised_from_its_own_exception(model):
    """Two threads compress at once with a policy that raises words of its own head: each
    error's cause is its own call's exception (one global slot per name gave a thread the other
    thread's, or none)."""
    import threading

    def by_length(h):
        raise ValueError("n=%d" % h.n)

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no words")

    def unprintable(h):
        raise Unprintable()

    sparsekv.register_policy("py_by_length_t", by_length)
    sparsekv.register_policy("py_unprintable_t", unprintable)
    ids = model.tokenize(PROMPT)
    wrong = []

    def run(n):
        with model.new_context(n_ctx=256, threads=2) as c:
            c.forward(ids[:n], logits="none")
            for _ in range(60):
                try:
                    c.compress("py_by_length_t", 0.5)
                except sparsekv.InvalidArgumentError as e:
                    if str(e.__cause__) != "n=%d" % n or ("n=%d" % n) not in str(e):
                        wrong.append((n, str(e), repr(e.__cause__)))

    threads = [threading.Thread(target=run, args=(n,)) for n in (20, 30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, wrong[:3]
    with _ctx(model) as c:
        with pytest.raises(sparsekv.InvalidArgumentError, match="could not be formatted") as e:
            c.compress("py_unprintable_t", 0.5)
        assert isinstance(e.value.__cause__, Unprintable)
    with pytest.raises(sparsekv.InvalidArgumentError, match="NUL"):
        sparsekv.register_policy("py_nul\0t", by_length)
    assert sparsekv.policy_canonical("py_nul") is None


def test_positions_replace_and_stop_after_failure(model):
    """head.positions are the scored entries' logical positions: a policy keeps sinks with them
    after budget cuts (entry 0 is no longer position 0 then); replace=True swaps a registered
    name's function; after a failing call the other worker scores no more heads."""
    seen = []

    def sinks_then_recent(h):
        assert h.positions.shape == (h.n,) and np.all(np.diff(h.positions) > 0)
        seen.append(h.positions[0])
        return np.where(h.positions < 4, np.inf, h.positions.astype(float))

    sparsekv.register_policy("py_sinks_t", sinks_then_recent)
    ids = model.tokenize(PROMPT)
    with model.new_context(n_ctx=256, threads=2) as c:
        c.set_budget("py_sinks_t", 12, interval=8)
        for i in range(0, len(ids), 8):
            c.forward(ids[i:i + 8], logits="none")
        assert c.budget_cuts >= 2
        for l in range(c.n_layer):
            for h in range(c.n_head_kv):
                kept = list(c.kept_positions(l, h))
                assert kept[:4] == [0, 1, 2, 3], kept
    assert min(seen) == 0

    sparsekv.register_policy("py_replace_t", lambda h: -np.arange(h.n, dtype=float))
    with pytest.raises(sparsekv.InvalidArgumentError, match="replace=True"):
        sparsekv.register_policy("py_replace_t", lambda h: np.arange(h.n, dtype=float))
    with pytest.raises(sparsekv.InvalidArgumentError, match="keeps them"):
        sparsekv.register_policy("py_replace_t", lambda h: h.values[:, 0], needs_values=True,
                                 replace=True)
    with _ctx(model) as a:
        a.compress("py_replace_t", 0.5)
        first = list(a.kept_positions(0, 0))
    assert sparsekv.register_policy("py_replace_t", lambda h: np.arange(h.n, dtype=float),
                                    replace=True) == "py_replace_t"
    with _ctx(model) as b:
        info = b.compress("py_replace_t", 0.5)
        last = list(b.kept_positions(0, 0))
    T, k = info["T"], info["keep"]
    assert first == list(range(k)) and last == list(range(T - k, T))

    calls = []

    def fails(h):  # the first head fails, the others take their time
        calls.append(h.layer)
        if (h.layer, h.kv_head) == (0, 0):
            raise ValueError("first head")
        time.sleep(0.005)
        return np.zeros(h.n)

    sparsekv.register_policy("py_fails_t", fails)
    with _ctx(model) as c:  # 2 workers, 20 heads
        with pytest.raises(sparsekv.InvalidArgumentError):
            c.compress("py_fails_t", 0.5)
    assert len(calls) <= 3, calls


def test_context_used_inside_score_is_refused(model):
    # the new-user trial: compress inside a score function hung forever (threads=2: the worker
    # waited for the context its own caller held), forward in one dropped tokens, close freed
    # the cache under the compression; each is now a StateError from inside, the cache intact
    with _ctx(model) as c:
        before = c.head_lengths().copy()
        n_past = c.n_past
        for name, use in (("py_reenter_c", lambda: c.compress("knorm", 0.5)),
                          ("py_reenter_f", lambda: c.forward([5])),
                          ("py_reenter_x", lambda: c.close())):
            def score(h, use=use):
                use()
                return np.zeros(h.n)
            sparsekv.register_policy(name, score)
            with pytest.raises(sparsekv.InvalidArgumentError,
                               match="StateError: a Context cannot be used inside") as e:
                c.compress(name, 0.5)
            assert isinstance(e.value.__cause__, sparsekv.StateError)
        np.testing.assert_array_equal(c.head_lengths(), before)
        assert c.n_past == n_past
        sparsekv.register_policy("py_complex", lambda h: np.zeros(h.n) + 1j)
        with pytest.raises(sparsekv.InvalidArgumentError, match="complex scores"):
            c.compress("py_complex", 0.5)
        c.compress("knorm", 0.5)


def test_failed_budget_cut_is_tried_again(model):
    # the cut failed once: the next forward call (one token) tries it again, as documented
    calls = {"n": 0}

    def flaky(h):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("once")
        return -np.linalg.norm(h.keys, axis=1)

    sparsekv.register_policy("py_flaky_b", flaky)
    ids = model.tokenize(PROMPT)
    with model.new_context(n_ctx=256, threads=1) as c:
        c.set_budget("py_flaky_b", 16, interval=8)
        c.forward(ids[:16], logits="none")
        assert c.budget_cuts == 0
        with pytest.raises(sparsekv.InvalidArgumentError, match="RuntimeError: once"):
            c.forward(ids[16:20])  # 20 entries, an interval since the last cut: cut due
        assert c.head_lengths().max() == 20 and c.budget_cuts == 0
        # the failed call's logits are not kept for generate: its tokens went in after them
        with pytest.raises(sparsekv.StateError, match="generate needs a prompt"):
            c.generate(n=1)
        c.forward(ids[20:21], logits="none")  # 21 <= 16 + 8: due only as the retry
        assert c.budget_cuts == 1 and c.head_lengths().max() == 16
