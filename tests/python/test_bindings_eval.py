"""sparsekv.evaluate (NumPy metrics over the bindings, written from docs/EVAL.md) against the C
harness's numbers (`sparsekv eval`'s results.jsonl) on the same data and configurations, and
the metric functions against hand-derived values."""

import csv
import json
import math
import subprocess

import numpy as np
import pytest

import sparsekv

from skvtest import CLI, STORIES, reference_tokens

TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park with her friends. One day, she saw a big red ball under a tree. She ran to the "
        "ball and kicked it very hard.")


def test_compare_logits_hand_values():
    # ref = uniform over 2 tokens, cmp = (3/4, 1/4): KL = ln(1/2 / 3/4)/2 + ln(1/2 / 1/4)/2
    ref = np.array([[0.0, 0.0], [1.0, 0.0]], dtype=np.float32)
    cmp = np.array([[math.log(3.0), 0.0], [1.0, 0.0]], dtype=np.float32)
    m = sparsekv.compare_logits(ref, cmp, targets=[1, 0])
    kl0 = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    assert m["kl"][0] == pytest.approx(kl0, rel=1e-6) and m["kl"][1] == 0.0
    assert m["kl_mean"] == pytest.approx(kl0 / 2, rel=1e-6)
    assert m["kl_median"] == pytest.approx(kl0 / 2, rel=1e-6)  # mean of the two middle values
    assert m["kl_max"] == pytest.approx(kl0, rel=1e-6)
    # argmax ties go to the lowest id on both sides: row 0 = (0 vs 0), row 1 = (0 vs 0)
    assert m["same_top"] == 2 and m["top1"] == 1.0
    nll_ref = (math.log(2) + math.log(1 + math.e) - 1) / 2
    nll_cmp = (math.log(4) + math.log(1 + math.e) - 1) / 2
    assert m["nll_ref"] == pytest.approx(nll_ref, rel=1e-6)
    assert m["ln_ppl_ratio"] == pytest.approx(nll_cmp - nll_ref, rel=1e-6)
    assert m["ppl_ratio"] == pytest.approx(2 ** 0.5, rel=1e-6)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval")
    samples = [reference_tokens()[:120], TEXT]
    with open(d / "data.jsonl", "w") as f:
        f.write(json.dumps({"tokens": samples[0]}) + "\n")
        f.write(json.dumps({"text": samples[1]}) + "\n")
    args = [CLI, "eval", "-m", STORIES, "--data", str(d / "data.jsonl"),
            "--policies", "sink_recent,random,attention,pyramid,h2o", "--keep", "0.25,0.5",
            "--protocols", "seed,engine", "--seeds", "2", "--window", "8",
            "--continuation", "16", "--greedy", "8", "-t", "1", "--out", str(d / "out"), "-q"]
    p = subprocess.run(args, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    c_rows = [json.loads(l) for l in open(d / "out" / "results.jsonl")]
    with sparsekv.Model(STORIES) as m:
        # h2o: evaluate sums the prefill's attention for it, as `eval` does
        py = sparsekv.evaluate(m, samples, policies=["sink_recent", "random", "attention",
                                                     "pyramid", "h2o"],
                               keeps=[0.25, 0.5, 1.0], protocols=["seed", "engine"], seeds=2,
                               window=8, continuation=16, greedy=8, threads=1)
    with open(d / "out" / "summary.csv") as f:
        c_summary = list(csv.DictReader(f))
    return c_rows, py, c_summary


def _key(r):
    return (r["sample"], r["policy"], r["keep_frac"], r["protocol"], r["positions"], r["seed"])


def test_evaluate_matches_cli_eval(runs):
    c_rows, py, _ = runs
    assert len(py) == len(c_rows) == 2 * 2 * (3 + 3 * 2 + 3 + 3 + 3)
    assert sum(r["policy"] == "h2o" for r in py) == 2 * 2 * 3
    assert not py.skipped
    c = {_key(r): r for r in c_rows}
    worst = 0.0
    for r in py:
        ref = c[_key(r)]
        for k in ("T", "keep", "n_prefix", "n_window", "n_continuation", "same_top",
                  "n_tokens", "greedy_match", "kv_bytes_before", "kv_bytes_after", "kept"):
            assert r[k] == ref[k], (k, _key(r))
        if r["policy"] == "pyramid":
            assert r["layer_budgets"] == ref["layer_budgets"]
        for k in ("kl_mean", "kl_median", "kl_p90", "kl_p99", "kl_max", "top1", "nll_ref",
                  "nll_cmp", "ppl_ref", "ppl_cmp", "ln_ppl_ratio"):
            assert r[k] == pytest.approx(ref[k], rel=1e-9, abs=1e-12), (k, _key(r))
            worst = max(worst, abs(r[k] - ref[k]))
    print("largest |python - C| over all metrics:", worst)
    # controls: every entry kept -> exactly the reference
    for r in py:
        if r["keep_frac"] == 1.0 and r["policy"] != "pyramid":
            assert r["kl_max"] == 0.0 and r["top1"] == 1.0 and r["greedy_match"] == 8
    # something was actually compressed and measured
    assert max(r["kl_mean"] for r in py) > 0.01


def test_summary(runs):
    _, py, c_summary = runs
    rows = py.summary()
    assert len(rows) == 2 * (3 * 5)
    one = [s for s in rows if s["policy"] == "random" and s["keep_frac"] == 0.25
           and s["protocol"] == "seed"][0]
    per_sample = [np.mean([r["kl_mean"] for r in py if r["policy"] == "random"
                           and r["keep_frac"] == 0.25 and r["protocol"] == "seed"
                           and r["sample"] == i]) for i in (0, 1)]
    assert one["n_samples"] == 2 and one["kl_mean"] == pytest.approx(np.mean(per_sample))
    assert one["ppl_ratio"] == pytest.approx(math.exp(one["ln_ppl_ratio"]))
    # two samples: the t quantile with 1 degree of freedom times sd / sqrt(2) = |a - b| / 2
    assert one["kl_mean_ci95"] == pytest.approx(12.706204736 * abs(per_sample[0] - per_sample[1])
                                                / 2, rel=1e-9)
    # every mean and its confidence interval as `sparsekv eval`'s summary.csv (9 digits)
    c = {(r["policy"], float(r["keep_frac"]), r["protocol"], r["positions"]): r
         for r in c_summary}
    matched = 0
    for s in rows:
        ref = c.get((s["policy"], s["keep_frac"], s["protocol"], s["positions"]))
        if ref is None:  # evaluate ran keep 1.0 for every policy, eval only its control row
            continue
        matched += 1
        assert int(ref["n_samples"]) == s["n_samples"]
        for k in ("kl_mean", "top1", "ln_ppl_ratio", "greedy_match"):
            for f in (k, k + "_ci95"):
                assert s[f] == pytest.approx(float(ref[f]), rel=1e-7, abs=1e-12), (f, ref)
    assert matched >= 2 * 2 * 5


def test_t975_published_values():
    # Student t 0.975 quantiles as printed in the standard tables
    from sparsekv._eval import _t975
    for df, t in ((1, 12.706), (2, 4.303), (10, 2.228), (30, 2.042), (40, 2.021), (60, 2.000),
                  (120, 1.980), (1000, 1.962)):
        assert _t975(df) == pytest.approx(t, abs=6e-4), df
    assert math.isnan(_t975(0))
    for df, t in ((31, 2.0395134464), (40, 2.0210753903), (120, 1.9799304051)):  # 10 digits
        assert _t975(df) == pytest.approx(t, abs=1e-7), df


def test_evaluate_h2o_alone():
    # the new-user trial's call: h2o used to fail for want of the prefill's attention
    with sparsekv.Model(STORIES) as m:
        r = sparsekv.evaluate(m, [m.tokenize(TEXT)], policies=["h2o"], keeps=[0.5], greedy=4,
                              window=8, continuation=8, protocols="seed")
    assert len(r) == 1 and r[0]["policy"] == "h2o" and r[0]["kl_mean"] > 0


def test_evaluate_refuses_bad_sizes():
    # integers in the CLI's ranges, not bools, floats or text that int() would take
    with sparsekv.Model(STORIES) as m:
        ids = m.tokenize(TEXT)
        for kw, what in (({"window": 0}, "window"), ({"window": 8.5}, "window"),
                         ({"continuation": "16"}, "continuation"), ({"greedy": -1}, "greedy"),
                         ({"greedy": True}, "greedy"), ({"seeds": 0}, "seeds"),
                         ({"prefix": 2**32 + 8}, "prefix"), ({"threads": 2**32 + 1}, "threads"),
                         ({"sinks": 2**32 + 2}, "sinks")):
            with pytest.raises(sparsekv.InvalidArgumentError, match=what):
                sparsekv.evaluate(m, [ids], policies=["sink_recent"], keeps=[0.5], **kw)
        for bad in (0, 257, True):  # random's seed count, in eval --seeds's range
            with pytest.raises(sparsekv.InvalidArgumentError, match=r"seeds must be an integer"):
                sparsekv.evaluate(m, [ids], policies=["random"], keeps=[0.5], seeds=bad)


def test_evaluate_skips_short_samples():
    with sparsekv.Model(STORIES) as m:
        r = sparsekv.evaluate(m, ["Hi.", TEXT], policies="sink_recent", keeps=0.5, window=8,
                              continuation=16, greedy=8, protocols="seed")
    assert r.skipped == [0] and len(r) == 1 and r[0]["sample"] == 1


def test_evaluate_forced_warning_names_protocol():
    # as eval's stderr warning: once per (policy, keep, protocol), naming the protocol, the
    # first sample and what forced the entries; at the caller's line
    import warnings
    with sparsekv.Model(STORIES) as m:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            sparsekv.evaluate(m, [TEXT, TEXT], policies=["attention"], keeps=[0.25],
                              protocols=["seed", "engine"], window=8, continuation=16,
                              greedy=4)
    msgs = [str(w.message) for w in got if "chose nothing by score" in str(w.message)]
    assert len(msgs) == 2, msgs
    assert "(seed protocol)" in msgs[0] and "forced (window_keep 32)" in msgs[0]
    assert "(engine protocol)" in msgs[1] and "forced (window 8, window_keep 32)" in msgs[1]
    assert all("first seen at sample 0" in s for s in msgs)
    assert all(w.filename == __file__ for w in got if "chose nothing" in str(w.message))


def test_compare_logits_refuses_bad_input():
    # the trial's finds: NaN in the reference read as perfect agreement (KL 0, top-1 1), a
    # target of -1 wrapped to the last id, fewer targets than rows were averaged silently
    a = np.zeros((2, 3))
    nan = a.copy()
    nan[1, 2] = np.nan
    for args, what in (((nan, a), r"ref\[1, 2\] is nan"), ((a, nan), r"cmp\[1, 2\]"),
                       ((a, a, [-1, 1]), "targets must be 2 token ids"),
                       ((a, a, [1]), "targets must be 2"), ((a, a, [0, 3]), r"in \[0, 3\)"),
                       ((a, a, [0.5, 1.0]), "targets"), ((np.zeros(3), np.zeros(3)), r"\[C, V\]"),
                       ((np.zeros((0, 3)), np.zeros((0, 3))), r"\[C, V\]"),
                       ((a, np.zeros((2, 4))), r"\[C, V\]"),
                       ((np.full((2, 3), -np.inf), a), "all -inf")):
        with pytest.raises(sparsekv.InvalidArgumentError, match=what):
            sparsekv.compare_logits(*args)
    with pytest.raises(sparsekv.InvalidArgumentError, match="real logits"):
        sparsekv.compare_logits(a + 1j, a)
    # a masked token (-inf) is a logit: KL counts it, here where cmp masks one ref gives 1/3
    masked = a.copy()
    masked[:, 0] = -np.inf
    m = sparsekv.compare_logits(a, masked, targets=[1, 2])
    assert np.isinf(m["kl_mean"]) and m["nll_cmp"] == pytest.approx(math.log(2))
    # masked in the reference: p = 0 contributes nothing (not 0 * inf = NaN)
    m = sparsekv.compare_logits([[0.0, -np.inf]], [[0.0, 0.0]])
    assert m["kl"][0] == pytest.approx(math.log(2), rel=1e-12)
