"""sparsekv.evaluate: what compression costs, measured from Python over the bindings.

Written from docs/EVAL.md's protocol (not from the C harness): each sample is cut into
| prefix: T | window: W | continuation: C |; for every configuration (policy x keep x protocol x
position mode x seed) a clone of the dense prefix cache is compressed, the continuation is
teacher-forced on both caches with the same calls, and the C next-token distributions are
compared in float64 with NumPy. G tokens are also decoded greedily on both sides.
"""

import math
import numbers
import os
import warnings

import numpy as np

from ._core import (_MAX_THREADS, _POLICY_PARAMS, Error, Model, _all_forced, _bad_arg,
                    _compress_params, _int, _lib, _policy_name, _policy_reads, _policy_row,
                    _policy_rows)

DEFAULT_KEEPS = (0.1, 0.25, 0.5, 1.0)


def log_softmax(x):
    """Row-wise log-softmax in float64: x - max - log(sum(exp(x - max)))."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare_logits(ref, cmp, targets=None):
    """Metrics of two [C, V] logit arrays (reference = full cache, cmp = compressed):
    kl per row (KL(ref || cmp), nats), top-1 agreement (argmax, lowest id on ties) and, given
    the C true next tokens, the mean negative log-likelihoods and ln(PPL ratio). Refused
    (InvalidArgumentError): arrays that are not both [C, V] with C >= 1, a NaN or +inf logit (a
    NaN would read as agreement) or a row of only -inf, targets that are not C ids in [0, V)."""
    ref, cmp = np.asarray(ref), np.asarray(cmp)
    if np.iscomplexobj(ref) or np.iscomplexobj(cmp):
        raise _bad_arg("compare_logits needs real logits, got complex ones")
    ref = np.asarray(ref, dtype=np.float64)
    cmp = np.asarray(cmp, dtype=np.float64)
    if ref.ndim != 2 or ref.shape != cmp.shape or ref.shape[0] < 1 or ref.shape[1] < 1:
        raise _bad_arg("compare_logits needs two [C, V] arrays of one shape with C, V >= 1, "
                       "got %s and %s" % (ref.shape, cmp.shape))
    for what, a in (("ref", ref), ("cmp", cmp)):
        bad = np.isnan(a) | np.isposinf(a)  # -inf is a masked token; a row needs one finite
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise _bad_arg("compare_logits: %s[%d, %d] is %r: logits must be finite or -inf"
                           % (what, r, c, a[r, c]))
        if np.isneginf(a.max(axis=1)).any():
            raise _bad_arg("compare_logits: row %d of %s is all -inf"
                           % (int(np.argmax(np.isneginf(a.max(axis=1)))), what))
    lp = log_softmax(ref)
    lq = log_softmax(cmp)
    p = np.exp(lp)
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(p > 0, p * (lp - lq), 0.0)
    kl = terms.sum(axis=-1)
    same = np.argmax(ref, axis=-1) == np.argmax(cmp, axis=-1)
    out = {
        "kl": kl,
        "kl_mean": float(kl.mean()),
        "kl_median": float(np.percentile(kl, 50)),  # linear interpolation at frac*(C-1)
        "kl_p90": float(np.percentile(kl, 90)),
        "kl_p99": float(np.percentile(kl, 99)),
        "kl_max": float(kl.max()),
        "same_top": int(same.sum()),
        "n_tokens": int(len(kl)),
        "top1": float(same.mean()),
    }
    if targets is not None:
        t = np.asarray(targets)
        if t.shape != (ref.shape[0],) or not (t.size == 0 or np.issubdtype(t.dtype, np.integer)) \
                or t.min() < 0 or t.max() >= ref.shape[1]:
            raise _bad_arg("compare_logits: targets must be %d token ids in [0, %d), one per "
                           "row, got %s" % (ref.shape[0], ref.shape[1],
                                            np.array2string(t, threshold=8)))
        t = t.astype(np.int64)
        rows = np.arange(len(t))
        nll_ref = float(-lp[rows, t].mean())
        nll_cmp = float(-lq[rows, t].mean())
        out.update(nll_ref=nll_ref, nll_cmp=nll_cmp, ppl_ref=math.exp(nll_ref),
                   ppl_cmp=math.exp(nll_cmp), ln_ppl_ratio=nll_cmp - nll_ref,
                   ppl_ratio=math.exp(nll_cmp - nll_ref))
    return out


def _t975(df):
    """The t distribution's 0.975 quantile with df degrees of freedom, as `sparsekv eval`'s
    (eval/metrics.c): exact values to df 30, then the Cornish-Fisher expansion (error < 1e-7)."""
    table = (12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851,
             2.364624252, 2.306004135, 2.262157163, 2.228138852, 2.200985160, 2.178812830,
             2.160368656, 2.144786688, 2.131449546, 2.119905299, 2.109815578, 2.100922040,
             2.093024054, 2.085963447, 2.079613845, 2.073873068, 2.068657610, 2.063898562,
             2.059538553, 2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456)
    if df < 1:
        return math.nan
    if df <= 30:
        return table[df - 1]
    z = 1.959963984540054
    g = ((z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96,
         (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
         (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160)
    return z + sum(gk / df**(k + 1) for k, gk in enumerate(g))


def _ci95(values):
    """Half-width of the 95% confidence interval of the mean (Student t); NaN below 2 values."""
    n = len(values)
    if n < 2:
        return math.nan
    return _t975(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)


def _as_model(model, call):
    """A Model, or one loaded from a path (str, bytes, os.PathLike; None: the embedded one)."""
    if model is None or isinstance(model, (str, bytes, os.PathLike)):
        return Model(model)
    if not isinstance(model, Model):
        raise TypeError("%s: model must be a sparsekv.Model or a model path, got %s"
                        % (call, type(model).__name__))
    return model


def _as_policies(policies, call, rows=None):
    """policies as canonical names, each once, in order (aliases of one policy count once, as
    the CLI's --policies); bytes names are decoded; unknown ones refused up front."""
    if isinstance(policies, (str, bytes)):
        policies = [policies]
    if policies is None:
        policies = rows
    try:
        policies = list(policies)
    except TypeError:
        raise TypeError("%s: policies must be a policy name or a list of them, got %s"
                        % (call, type(policies).__name__)) from None
    names = []
    for pol in policies:
        pol = _policy_name(pol)
        row = _policy_row(pol) if isinstance(pol, str) else None
        if row is None:
            raise _bad_arg("unknown policy %r (sparsekv.policies() lists them)" % (pol,))
        if row["name"] not in names:
            names.append(row["name"])
    if not names:
        raise _bad_arg("%s needs at least one of policies" % call)
    return names


def _as_samples(model, data):
    if isinstance(data, (str, bytes)):
        data = [data]
    elif isinstance(data, np.ndarray) and data.ndim == 1:
        data = [data]
    elif isinstance(data, (list, tuple)) and data and isinstance(data[0], (int, np.integer)):
        data = [data]
    try:
        data = list(data)
    except TypeError:
        raise TypeError("data must be a text, token ids, or a list of texts or token-id "
                        "sequences, got %s" % type(data).__name__) from None
    out = []
    for d in data:
        if isinstance(d, (str, bytes)):
            out.append(model.tokenize(d))  # BOS as the vocabulary asks, as eval --data does
        else:
            out.append(model._check_ids(d))
    return out


def _split_sizes(window, continuation, prefix):
    """window, continuation and prefix (None: the rest) as ints >= 1."""
    return (_int(window, "window", 1), _int(continuation, "continuation", 1),
            None if prefix is None else _int(prefix, "prefix", 1))


def _check_params(policies, policy_params, call):
    """The set of parameters each policy reads (None: unknown to the registry). A parameter
    goes to the policies that read it; one that none of them reads is refused (the CLI's
    rule), as compress() refuses one its policy does not read; so is a value compress() would
    refuse, before any sample is skipped."""
    reads = {pol: _policy_reads(pol)[1] for pol in policies}
    for k in policy_params:
        if k not in _POLICY_PARAMS:  # as compress() says it
            raise TypeError("%s() got an unexpected keyword argument %r (policy "
                            "parameters: %s)" % (call, k, ", ".join(_POLICY_PARAMS)))
        if all(r is not None and k not in r for r in reads.values()):
            raise _bad_arg("%s does not apply to any of the policies %s"
                           % (k, ", ".join(map(str, policies))))
    for pol in policies:
        _compress_params(pol, "original", _params_for(reads[pol], policy_params), call)
    return reads


def _params_for(reads, params):
    """The parameters a policy reads (all of them when the registry does not know it)."""
    return params if reads is None else {k: v for k, v in params.items() if k in reads}


def _cut(n, n_ctx, W, C, G, prefix):
    avail = min(n, n_ctx - G)
    T = prefix if prefix is not None else avail - W - C
    if T < 1 or W < 1 or C < 1 or T + W + C > n or T + W + max(C, G) > n_ctx:
        return None
    return T


class _Sample:
    def __init__(self, toks, T, W, C, G):
        self.toks, self.T, self.W, self.C, self.G = toks, T, W, C, G
        self.window = toks[T:T + W]
        self.cont = toks[T + W:T + W + C]


def _teacher_force(ctx, s, protocol, first):
    if protocol == "seed":
        rows = ctx.forward(s.toks[s.T:s.T + s.W + s.C - 1], logits="all")
        return rows[s.W - 1:s.W - 1 + s.C]
    out = [first[None, :]]
    if s.C > 1:
        out.append(ctx.forward(s.cont[:s.C - 1], logits="all"))
    return np.concatenate(out, axis=0)


def _greedy(ctx, s, protocol, first, ref=None):
    logits = ctx.forward(s.window, logits="last") if protocol == "seed" else first
    out = []
    for g in range(s.G):
        tok = int(np.argmax(logits))
        out.append(tok)
        if ref is not None and tok != ref[g]:
            break
        if g + 1 < s.G:
            logits = ctx.forward([tok], logits="last")
    return out


def evaluate(model, data, policies=None, keeps=DEFAULT_KEEPS, protocols=("seed", "engine"),
             positions=("original",), window=32, continuation=64, prefix=None, greedy=32,
             seeds=None, threads=1, kv_type="f32", progress=None, n_ctx=0, **policy_params):
    """Evaluates compression policies on data: a text, a list of texts (tokenized with BOS as
    the vocabulary asks) or a list of token-id sequences. Each sample is cut into prefix (T;
    default: what is left of min(n, n_ctx - greedy) after window and continuation) | window
    (W) | continuation (C).
    The defaults are `sparsekv eval`'s: policies None = every built-in policy of the registry,
    protocols seed and engine, original positions, window 32, continuation 64, greedy 32, seeds
    None = 5 (random runs seeds 0..seeds-1; given without random among the policies, refused
    as eval --seeds is). keeps run as given (the CLI's eval adds keep 1.0, the control;
    here only when it is among them). policy_params (sinks, kernel, pooling, window_keep) go to
    the compress calls of the policies that read them (one that none of them reads:
    InvalidArgumentError). Returns a list of dicts, one per sample x configuration: sample,
    policy, keep_frac, protocol, positions, seed, T, keep, n_prefix, n_window, n_continuation,
    kl_mean/median/p90/p99/max, top1, same_top, n_tokens, nll_ref, nll_cmp, ppl_ref, ppl_cmp,
    ln_ppl_ratio, ppl_ratio, greedy_match, greedy, kv_bytes_before/after, kept [layer][kv head]
    and layer_budgets (lists), compress_ms, cache_ms, and kl_rows (the C per-token KLs, a NumPy
    array: drop it or .tolist() it to write a row as JSON). n_ctx: every context's size (0:
    the model's training length), as eval --ctx; for a LongRoPE model it chooses the RoPE
    factors for the whole run.
    Samples that do not fit are skipped (listed in the `skipped` attribute of the result);
    when none fits, InvalidArgumentError."""
    model = _as_model(model, "evaluate")
    # as the CLI: every built-in row of the registry (before any sample runs: else "every
    # sample was skipped")
    policies = _as_policies(policies, "evaluate",
                            [r["name"] for r in _policy_rows() if r.get("builtin", True)])
    if isinstance(keeps, numbers.Real):
        keeps = [keeps]
    if isinstance(keeps, (str, bytes)):
        raise _bad_arg("keeps must be a fraction in (0, 1] or a list of them, got %r" % (keeps,))
    if isinstance(protocols, str):
        protocols = [protocols]
    if isinstance(positions, str):
        positions = [positions]
    # lists: each is walked once per sample (a generator would be spent after the first)
    keeps, protocols, positions = list(keeps), list(protocols), list(positions)
    for what, v in (("keeps", keeps), ("protocols", protocols), ("positions", positions)):
        if not v:
            raise _bad_arg("evaluate needs at least one of %s" % what)
    for k in keeps:  # all of them now, not after the configurations before a bad one ran
        if isinstance(k, bool) or not isinstance(k, numbers.Real) or not 0 < k <= 1:
            raise _bad_arg("keep must be a fraction in (0, 1], got %r" % (k,))
    for p in protocols:
        if p not in ("seed", "engine"):
            raise _bad_arg("protocol must be seed or engine, got %r" % (p,))
    if "seed" in policy_params:  # random runs seeds 0..seeds-1, as eval --seeds
        raise _bad_arg("evaluate takes seeds=N (random runs seeds 0..N-1, as eval --seeds), "
                       "not seed=")
    reads = _check_params(policies, policy_params, "evaluate")
    # h2o scores with the attention summed during the prefill: the base context sums it when
    # a policy needs it (as the C harness), its clones stop once they no longer need it
    need_attn = any((_policy_row(pol) or {}).get("needs_prefill_attention") for pol in policies)
    ctx_size = _int(n_ctx, "n_ctx", 0, 1 << 28)
    n_ctx = ctx_size or model.hparams["n_ctx_train"]
    results = EvalResults()
    warned = set()
    W, C, prefix = _split_sizes(window, continuation, prefix)
    G = _int(greedy, "greedy", 0, 1 << 20)  # the CLI's ranges
    if seeds is not None and "random" not in policies:
        raise _bad_arg("seeds applies to none of the policies evaluated (%s): only random "
                       "runs several seeds" % ", ".join(policies))
    seeds = 5 if seeds is None else _int(seeds, "seeds", 1, 256)
    threads = _int(threads, "threads", 0, _MAX_THREADS)  # before any sample is skipped
    for si, toks in enumerate(_as_samples(model, data)):
        T = _cut(len(toks), n_ctx, W, C, G, prefix)
        if T is None:
            results.skipped.append(si)
            continue
        s = _Sample(toks, T, W, C, G)
        for proto in protocols:
            base = model.new_context(n_ctx=ctx_size, kv_type=kv_type, threads=threads,
                                     capture_window=W if proto == "engine" else 0)
            base.reserve(T + W + max(C, G))  # the memory the sample needs, up front
            try:
                first = None
                if need_attn:
                    base.accumulate_attention(True)
                if proto == "seed":
                    base.forward(toks[:T], logits="none")
                else:
                    first = base.forward(toks[:T + W], logits="last")
                with base.clone() as c:
                    c.accumulate_attention(False)
                    ref_logits = _teacher_force(c, s, proto, first)
                with base.clone() as g:
                    g.accumulate_attention(False)
                    ref_greedy = _greedy(g, s, proto, first)
                for pol in policies:
                    seed_list = range(seeds) if pol == "random" else [0]
                    for keep in keeps:
                        for pos in positions:
                            for seed in seed_list:
                                r, forced = _run_config(base, s, proto, pol, keep, pos, seed,
                                                        first, ref_logits, ref_greedy,
                                                        policy_params, reads[pol])
                                r["sample"] = si
                                key = (r["policy"], keep, proto)
                                if forced and key not in warned:  # once, as eval's warning
                                    warned.add(key)
                                    warnings.warn(
                                        "%s at keep %g (%s protocol) chose nothing by score "
                                        "(first seen at sample %d, T = %d): keep = %d entries "
                                        "are all forced (%s); raise keep or lower those" % (
                                            r["policy"], keep, proto, si, r["T"], r["keep"],
                                            _forced_by(proto, W, pol, reads[pol], policy_params)),
                                        stacklevel=2)
                                results.append(r)
                                if progress:
                                    progress(r)
            finally:
                base.close()
    if not results:  # as the CLI's exit 2: an empty list would read as a result
        raise _bad_arg("nothing was evaluated: %s" % (
            "every sample was skipped (each needs window %d + continuation %d tokens and a "
            "prefix within the model's context of %d)" % (W, C, n_ctx) if results.skipped
            else "no samples"))
    return results


def _run_config(base, s, proto, pol, keep, pos, seed, first, ref_logits, ref_greedy, params,
                reads):
    kw = _params_for(reads, dict(params, seed=seed))
    with base.clone() as c:
        info = c._compress(pol, keep, proto, s.window if proto == "seed" else s.W, pos, kw)
        c.accumulate_attention(False)  # the sums are no longer needed
        with c.clone() as g:
            cmp = _teacher_force(c, s, proto, first)
            m = compare_logits(ref_logits, cmp, s.cont)
            gt = _greedy(g, s, proto, first, ref_greedy)
    gm = 0
    while gm < len(gt) and gt[gm] == ref_greedy[gm]:
        gm += 1
    r = {"policy": info["policy"], "keep_frac": float(keep), "protocol": proto,
         "positions": pos, "seed": seed, "T": info["T"], "keep": info["keep"],
         "n_prefix": s.T, "n_window": s.W, "n_continuation": s.C, "greedy": s.G,
         "greedy_match": gm, "kv_bytes_before": info["bytes_before"],
         "kv_bytes_after": info["bytes_after"], "kept": info["kept"].tolist(),
         "layer_budgets": info["layer_budgets"].tolist(), "compress_ms": info["compress_ms"],
         "cache_ms": info["cache_ms"]}
    kl = m.pop("kl")
    r.update(m)
    r["kl_rows"] = kl
    return r, _all_forced(info)


def _forced_by(proto, W, pol, reads, params):
    """What forces entries for this policy, as eval's warning names it."""
    out = ["window %d" % W] if proto == "engine" else []
    defaults = _lib.skv_compress_default_params()
    for name in ("window_keep", "sinks"):
        if name in reads:
            out.append("%s %s" % (name, params.get(name, getattr(defaults, name))))
    return ", ".join(out) or "by the policy's own rule"


# `eval --budget` takes no --greedy, yet its samples are cut with the default's room (32)
_BUDGET_GREEDY = 32


def _decode_rows(ctx, s):
    """Feeds the sample as `eval --budget` does (the prefix in one call, then one token per
    call): the C continuation rows [C, V] and the most entries of any kv head after each
    single-token step."""
    ctx.forward(s.toks[:s.T], logits="none")
    rows, entries = [], []
    for j in range(s.T, s.T + s.W + s.C - 1):
        logits = ctx.forward(s.toks[j:j + 1], logits="last")
        entries.append(int(ctx.head_lengths().max()))
        if j >= s.T + s.W - 1:  # the row predicting continuation token j - (T + W - 1)
            rows.append(logits)
    return np.stack(rows), entries


def evaluate_budget(model, data, budgets, policies=None, compress_every=32, window=32,
                    continuation=64, prefix=None, threads=1, kv_type="f32", progress=None,
                    n_ctx=0, **policy_params):
    """Decoding-time compression, as `sparsekv eval --budget`: each sample (cut as evaluate() cuts
    it with its default greedy=32, as eval does) is teacher-forced, the prefix in one forward call
    and then one token per call, on a context under Context.set_budget(policy, budget,
    compress_every, window=W, positions="rerotate") and on a full one; the C continuation
    distributions are compared. policies: default every decode policy of the registry (one that
    cannot decode is refused); budgets: entries per kv head, each larger than the window. Returns
    one dict per sample x budget x policy: sample, mode ("decode"), policy, budget, compress_every,
    protocol ("engine"), positions ("rerotate"), n_prefix, n_window, n_continuation, evaluate()'s
    metrics (no greedy), cuts, max_entries and entries (the most entries of any kv head after each
    of the W + C - 1 single-token steps). A budget of at least the sample's length never cuts
    (KL 0). n_ctx: every context's size, as evaluate()'s."""
    model = _as_model(model, "evaluate_budget")
    if isinstance(budgets, (int, np.integer)):
        budgets = [budgets]
    # as the CLI: the built-in rows, those that decode
    names = _as_policies(policies, "evaluate_budget",
                         [r["name"] for r in _policy_rows()
                          if r.get("decode") and r.get("builtin")])
    for pol in names:
        if not _policy_row(pol).get("decode"):
            raise _bad_arg("%s does not run under a budget (sparsekv.policies() marks the "
                           "decode ones)" % pol)
    W, C, prefix = _split_sizes(window, continuation, prefix)
    every = _int(compress_every, "compress_every", 1, 1 << 24)
    threads = _int(threads, "threads", 0, _MAX_THREADS)
    ctx_size = _int(n_ctx, "n_ctx", 0, 1 << 28)
    n_ctx = ctx_size or model.hparams["n_ctx_train"]
    blist = []
    for b in budgets:
        b = _int(b, "budget", 1, 1 << 24)
        kw = min(W, every)  # the window the budget keeps: the last min(W, K) tokens
        if b <= kw:
            raise _bad_arg("budget %d is not larger than the window it keeps (%d tokens, the "
                           "smaller of window and compress_every, always kept): every policy "
                           "would keep the same entries; raise the budget, or lower the smaller of the two"
                           % (b, kw))
        if b + every > n_ctx:
            raise _bad_arg("budget %d + compress_every %d exceeds the model's context (%d): the "
                           "cache holds up to budget + every entries per head" % (b, every, n_ctx))
        if b not in blist:
            blist.append(b)
    if not names or not blist:
        raise _bad_arg("evaluate_budget needs at least one policy and one budget")
    reads = _check_params(names, policy_params, "evaluate_budget")
    results = EvalResults()
    for si, toks in enumerate(_as_samples(model, data)):
        T = _cut(len(toks), n_ctx, W, C, _BUDGET_GREEDY, prefix)
        if T is None:
            results.skipped.append(si)
            continue
        s = _Sample(toks, T, W, C, 0)
        with model.new_context(n_ctx=ctx_size, threads=threads, kv_type=kv_type) as ref_ctx:
            ref, _ = _decode_rows(ref_ctx, s)
        for b in blist:
            for pol in names:
                with model.new_context(n_ctx=ctx_size, threads=threads, kv_type=kv_type) as ctx:
                    ctx.set_budget(pol, b, every, window=W, positions="rerotate",
                                   **_params_for(reads[pol], policy_params))
                    cmp, entries = _decode_rows(ctx, s)
                    cuts = ctx.budget_cuts
                m = compare_logits(ref, cmp, s.cont)
                r = {"sample": si, "mode": "decode", "policy": pol, "budget": b,
                     "compress_every": every, "protocol": "engine", "positions": "rerotate",
                     "n_prefix": T, "n_window": W, "n_continuation": C, "cuts": cuts,
                     "max_entries": max(entries), "entries": entries}
                r["kl_rows"] = m.pop("kl")
                r.update(m)
                results.append(r)
                if progress:
                    progress(r)
    if not results:
        raise _bad_arg("nothing was evaluated: %s" % (
            "every sample was skipped" if results.skipped else "no samples"))
    return results


class EvalResults(list):
    """The list of per-sample x configuration results, with summary()."""

    def __init__(self, *a):
        super().__init__(*a)
        self.skipped = []

    def __getitem__(self, i):
        """A slice is an EvalResults too (with summary()); an index, that row."""
        got = super().__getitem__(i)
        if isinstance(i, slice):
            out = EvalResults(got)
            out.skipped = list(self.skipped)
            return out
        return got

    def summary(self):
        """Per configuration (policy, keep_frac, protocol, positions; evaluate_budget's: policy,
        budget, compress_every): the mean over samples of kl_mean, top1, ln_ppl_ratio and
        greedy_match (random: seeds averaged per sample first; evaluate_budget's: cuts, and the
        max of max_entries), each but cuts with its `_ci95`: the half-width of the 95%
        confidence interval of that mean over samples (Student t; NaN with one sample), as
        `sparsekv eval`'s summary.csv; n_samples; ppl_ratio = exp(ln_ppl_ratio). A list of
        dicts in first-seen order."""
        groups = {}
        for r in self:
            names = ("policy", "budget", "compress_every") if r.get("mode") == "decode" else \
                ("policy", "keep_frac", "protocol", "positions")
            key = tuple((k, r[k]) for k in names)
            groups.setdefault(key, {}).setdefault(r["sample"], []).append(r)
        out = []
        for key, by_sample in groups.items():
            row = dict(key, n_samples=len(by_sample))
            decode = "budget" in row
            for f in ("kl_mean", "top1", "ln_ppl_ratio", "cuts" if decode else "greedy_match"):
                per = [np.mean([r[f] for r in rs]) for rs in by_sample.values()]
                row[f] = float(np.mean(per))
                if f != "cuts":
                    row[f + "_ci95"] = _ci95(per)
            if decode:
                row["max_entries"] = max(r["max_entries"] for rs in by_sample.values()
                                         for r in rs)
            row["ppl_ratio"] = math.exp(row["ln_ppl_ratio"])
            out.append(row)
        return out


__all__ = ["evaluate", "evaluate_budget", "compare_logits", "log_softmax", "EvalResults", "Error"]
