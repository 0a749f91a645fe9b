"""sparsekv.evaluate: what compression costs, measured from Python over the bindings.

Written from docs/EVAL.md's protocol (not from the C harness): each sample is cut into
| prefix: T | window: W | continuation: C |; for every configuration (policy x keep x protocol x
position mode x seed) a clone of the dense prefix cache is compressed, the continuation is
teacher-forced on both caches with the same calls, and the C next-token distributions are
compared in float64 with NumPy. G tokens are also decoded greedily on both sides.
"""

import math

import numpy as np

from ._core import _POLICY_PARAMS, Error, Model, _bad_arg, _policy_reads

DEFAULT_POLICIES = ("sink_recent", "random", "attention", "pyramid")
DEFAULT_KEEPS = (0.1, 0.25, 0.5, 1.0)


def log_softmax(x):
    """Row-wise log-softmax in float64: x - max - log(sum(exp(x - max)))."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare_logits(ref, cmp, targets=None):
    """Metrics of two [C, V] logit arrays (reference = full cache, cmp = compressed):
    kl per row (KL(ref || cmp), nats), top-1 agreement (argmax, lowest id on ties) and, given
    the C true next tokens, the mean negative log-likelihoods and ln(PPL ratio)."""
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
        t = np.asarray(targets, dtype=np.int64)
        rows = np.arange(len(t))
        nll_ref = float(-lp[rows, t].mean())
        nll_cmp = float(-lq[rows, t].mean())
        out.update(nll_ref=nll_ref, nll_cmp=nll_cmp, ppl_ref=math.exp(nll_ref),
                   ppl_cmp=math.exp(nll_cmp), ln_ppl_ratio=nll_cmp - nll_ref,
                   ppl_ratio=math.exp(nll_cmp - nll_ref))
    return out


def _as_samples(model, data):
    if isinstance(data, (str, bytes)):
        data = [data]
    elif isinstance(data, np.ndarray) and data.ndim == 1:
        data = [data]
    elif isinstance(data, (list, tuple)) and data and isinstance(data[0], (int, np.integer)):
        data = [data]
    out = []
    for d in data:
        if isinstance(d, (str, bytes)):
            out.append(model.tokenize(d, bos=True))
        else:
            out.append(model._check_ids(d))
    return out


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


def evaluate(model, data, policies=DEFAULT_POLICIES, keeps=DEFAULT_KEEPS, protocols=("seed",),
             positions=("original",), window=32, continuation=64, prefix=None, greedy=32,
             seeds=1, threads=1, kv_type="f32", progress=None, **policy_params):
    """Evaluates compression policies on data: a text, a list of texts (tokenized with BOS) or
    a list of token-id sequences. Each sample is cut into prefix (T; default: what is left of
    min(n, n_ctx - greedy) after window and continuation) | window (W) | continuation (C).
    random runs seeds 0..seeds-1. policy_params (sinks, kernel, pooling, window_keep) go to
    the compress calls of the policies that read them (one that none of them reads:
    InvalidArgumentError). Returns a list of dicts, one per sample x configuration: sample,
    policy, keep_frac, protocol, positions, seed, T, keep, n_prefix, n_window, n_continuation,
    kl_mean/median/p90/p99/max, top1, same_top, n_tokens, nll_ref, nll_cmp, ppl_ref, ppl_cmp,
    ln_ppl_ratio, ppl_ratio, greedy_match, greedy, kv_bytes_before/after, kept, compress_ms.
    Samples that do not fit are skipped (listed in the `skipped` attribute of the result);
    when none fits, InvalidArgumentError."""
    if isinstance(model, str) or model is None:
        model = Model(model)
    if isinstance(policies, str):
        policies = [policies]
    if isinstance(keeps, (int, float)):
        keeps = [keeps]
    if isinstance(protocols, str):
        protocols = [protocols]
    if isinstance(positions, str):
        positions = [positions]
    # lists: each is walked once per sample (a generator would be spent after the first)
    policies, keeps, protocols, positions = (list(policies), list(keeps), list(protocols),
                                             list(positions))
    for what, v in (("policies", policies), ("keeps", keeps), ("protocols", protocols),
                    ("positions", positions)):
        if not v:
            raise _bad_arg("evaluate needs at least one of %s" % what)
    for p in protocols:
        if p not in ("seed", "engine"):
            raise _bad_arg("protocol must be seed or engine, got %r" % (p,))
    # a parameter goes to the policies that read it; one that none of them reads is refused
    # (the CLI's rule), as compress() refuses one its policy does not read
    reads = {pol: _policy_reads(pol)[1] for pol in policies}
    for k in policy_params:
        if k not in _POLICY_PARAMS:  # as compress() says it
            raise TypeError("evaluate() got an unexpected keyword argument %r (policy "
                            "parameters: %s)" % (k, ", ".join(_POLICY_PARAMS)))
        if all(r is not None and k not in r for r in reads.values()):
            raise _bad_arg("%s does not apply to any of the policies %s"
                           % (k, ", ".join(map(str, policies))))
    n_ctx = model.hparams["n_ctx_train"]
    results = EvalResults()
    W, C, G = int(window), int(continuation), int(greedy)
    for si, toks in enumerate(_as_samples(model, data)):
        T = _cut(len(toks), n_ctx, W, C, G, prefix)
        if T is None:
            results.skipped.append(si)
            continue
        s = _Sample(toks, T, W, C, G)
        for proto in protocols:
            base = model.new_context(n_ctx=T + W + max(C, G), kv_type=kv_type, threads=threads,
                                     capture_window=W if proto == "engine" else 0)
            try:
                first = None
                if proto == "seed":
                    base.forward(toks[:T], logits="none")
                else:
                    first = base.forward(toks[:T + W], logits="last")
                with base.clone() as c:
                    ref_logits = _teacher_force(c, s, proto, first)
                with base.clone() as g:
                    ref_greedy = _greedy(g, s, proto, first)
                for pol in policies:
                    seed_list = range(int(seeds)) if pol == "random" else [0]
                    for keep in keeps:
                        for pos in positions:
                            for seed in seed_list:
                                r = _run_config(base, s, proto, pol, keep, pos, seed, first,
                                                ref_logits, ref_greedy, policy_params,
                                                reads[pol])
                                r["sample"] = si
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
    kw = dict(params, seed=seed)
    if reads is not None:
        kw = {k: v for k, v in kw.items() if k in reads}
    with base.clone() as c:
        info = c.compress(pol, keep, protocol=proto,
                          window=s.window if proto == "seed" else s.W, positions=pos, **kw)
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
         "layer_budgets": info["layer_budgets"].tolist(), "compress_ms": info["compress_ms"]}
    kl = m.pop("kl")
    r.update(m)
    r["kl_rows"] = kl
    return r


class EvalResults(list):
    """The list of per-sample x configuration results, with summary()."""

    def __init__(self, *a):
        super().__init__(*a)
        self.skipped = []

    def summary(self):
        """Per configuration (policy, keep_frac, protocol, positions): the mean over samples of
        kl_mean, top1, ln_ppl_ratio and greedy_match (random: seeds averaged per sample first),
        and n_samples. A list of dicts in first-seen order."""
        groups = {}
        for r in self:
            key = (r["policy"], r["keep_frac"], r["protocol"], r["positions"])
            groups.setdefault(key, {}).setdefault(r["sample"], []).append(r)
        out = []
        for (pol, keep, proto, pos), by_sample in groups.items():
            row = {"policy": pol, "keep_frac": keep, "protocol": proto, "positions": pos,
                   "n_samples": len(by_sample)}
            for f in ("kl_mean", "top1", "ln_ppl_ratio", "greedy_match"):
                per = [np.mean([r[f] for r in rs]) for rs in by_sample.values()]
                row[f] = float(np.mean(per))
            row["ppl_ratio"] = math.exp(row["ln_ppl_ratio"])
            out.append(row)
        return out


__all__ = ["evaluate", "compare_logits", "log_softmax", "EvalResults", "Error"]
