"""Compression while decoding from Python (Context.set_budget, budget_cuts, head_lengths; the
C API's skv_context_set_budget) against the CLI's `generate --max-cache` on stories260K, and
sparsekv.evaluate_budget against `sparsekv eval --budget`'s results.jsonl."""

import csv
import json
import re
import subprocess

import pytest

import sparsekv

from skvtest import CLI, STORIES, reference_tokens

PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park with her friends. One day, she saw a big red ball under a tree. She ran to "
          "the ball and kicked it very hard. The ball flew over the fence and into the garden")
BUDGET, EVERY = 40, 8


@pytest.fixture(scope="module")
def model():
    with sparsekv.Model(STORIES) as m:
        yield m


def _cli_generate(policy, positions, n):
    p = subprocess.run([CLI, "generate", "-m", STORIES, "-p", PROMPT, "-n", str(n), "--temp",
                        "0", "-t", "1", "--policy", policy, "--max-cache", str(BUDGET),
                        "--compress-every", str(EVERY), "--positions", positions],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m = re.search(r"budget: (\w+), (\d+) cuts, at most (\d+) entries per kv head \(bound (\d+)\), "
                  r"logical length (\d+)", p.stderr)
    assert m, p.stderr
    return p.stdout, int(m.group(2)), int(m.group(3)), int(m.group(5))


# streaming and knorm read keys only, snapkv scores with the window's queries, h2o with the
# attention the budget accumulates; rerotate runs past the model's 512 positions
@pytest.mark.parametrize("policy,positions,n", [("streaming", "original", 120),
                                                ("snapkv", "original", 120),
                                                ("h2o", "original", 120),
                                                ("knorm", "rerotate", 600)])
def test_budget_generate_matches_cli(model, policy, positions, n):
    text, cuts, most, length = _cli_generate(policy, positions, n)
    with model.new_context(threads=1) as ctx:
        ctx.set_budget(policy, BUDGET, interval=EVERY, positions=positions)
        steps = []  # (cuts, head lengths) before each new token is fed

        def track(tok, piece):
            steps.append((ctx.budget_cuts, ctx.head_lengths()))

        g = ctx.generate(PROMPT, n=n, on_token=track)
        assert len(g.tokens) == n  # no end of text here: the CLI's steps are the same
        assert text == PROMPT + g.text + "\n"
        # the CLI does not feed its last token: its counts are those before it
        assert steps[-1][0] == cuts > 0
        assert max(int(h.max()) for _, h in steps[1:]) == most
        assert ctx.n_past == length + 1
        if positions == "rerotate":
            assert ctx.n_past > ctx.n_ctx
        # never above the budget + interval (the prompt went in pieces of the interval), and
        # back at the budget after every cut a decoding step made
        prev = 0
        for i, (c, h) in enumerate(steps):
            assert h.max() <= BUDGET + EVERY
            if c > prev and i > 0:
                assert (h == BUDGET).all()
            prev = c
        assert ctx.head_lengths().max() <= BUDGET + EVERY


def test_budget_off_and_clone(model):
    ids = model.tokenize(PROMPT)
    with model.new_context(threads=1) as ctx:
        ctx.set_budget("streaming", BUDGET, interval=EVERY)
        ctx.forward(ids, logits="last")
        assert ctx.budget_cuts == 1 and (ctx.head_lengths() == BUDGET).all()
        with ctx.clone() as c:  # the clone carries the budget on
            c.generate(n=EVERY)
            assert c.budget_cuts == 2 and c.head_lengths().max() == BUDGET
        assert ctx.budget_cuts == 1
        ctx.set_budget(None, 0)  # 0 removes it
        ctx.generate(n=3 * EVERY)
        assert ctx.budget_cuts == 1 and (ctx.head_lengths() == BUDGET + 3 * EVERY).all()
    with model.new_context(n_ctx=64) as ctx:
        ctx.set_budget("streaming", 48, interval=16)
        # original positions: n_past stays within n_ctx, refused up front as without a budget
        with pytest.raises(sparsekv.InvalidArgumentError, match="n_ctx = 64"):
            ctx.generate(ids[:10], n=100)
        ctx.set_budget("streaming", 48, interval=16, positions="rerotate")
        g = ctx.generate(ids[:10], n=100, stop_at_eos=False)
        assert len(g.tokens) == 100 and ctx.n_past == 110 and ctx.head_lengths().max() <= 64


def test_budget_refusals(model):
    with model.new_context(n_ctx=64) as ctx:
        # as the C call (and generate --max-cache) refuses them
        with pytest.raises(sparsekv.InvalidArgumentError, match="decoding budget"):
            ctx.set_budget("pyramid", 32)  # its own layer budgets: not a decode policy
        with pytest.raises(sparsekv.InvalidArgumentError, match="n_ctx"):
            ctx.set_budget("streaming", 40, interval=32)  # 40 + 32 > 64
        with pytest.raises(sparsekv.InvalidArgumentError, match="window"):
            ctx.set_budget("snapkv", 8, interval=16, window=8)
        with pytest.raises(sparsekv.InvalidArgumentError, match="sinks does not apply"):
            ctx.set_budget("knorm", 32, sinks=2)
        with pytest.raises(TypeError, match="sink"):
            ctx.set_budget("streaming", 32, sink=2)
        with pytest.raises(sparsekv.InvalidArgumentError, match="unknown policy"):
            ctx.set_budget("bogus", 32)
        with pytest.raises(sparsekv.InvalidArgumentError, match="policy"):
            ctx.set_budget(None, 32)
        # integers a C int cannot hold, and bools, are refused, not wrapped
        for kw, what in (({"max_entries": 2**32 + 40}, "max_entries"),
                         ({"max_entries": -1}, "max_entries"),
                         ({"max_entries": 32, "interval": 2**32 + 8}, "interval"),
                         ({"max_entries": 32, "interval": True}, "interval"),
                         ({"max_entries": 32, "window": 2**32 + 4}, "window"),
                         ({"max_entries": 32, "sinks": 2**32 + 2}, "sinks")):
            with pytest.raises(sparsekv.InvalidArgumentError, match=what):
                ctx.set_budget("streaming", **kw)
        assert ctx.budget_cuts == 0
        ctx.forward([1, 403, 407], logits="none")
        with pytest.raises(sparsekv.StateError, match=r"set it on an empty context \(reset\(\) "
                           r"first.*holds 3 positions"):
            ctx.set_budget("h2o", 40, interval=8)  # sums the attention from the prefill on


TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park with her friends. One day, she saw a big red ball under a tree. She ran to the "
        "ball and kicked it very hard.")


def test_evaluate_budget_matches_cli_eval(model, tmp_path):
    samples = [reference_tokens()[:120], TEXT]
    with open(tmp_path / "data.jsonl", "w") as f:
        f.write(json.dumps({"tokens": samples[0]}) + "\n")
        f.write(json.dumps({"text": samples[1]}) + "\n")
    p = subprocess.run([CLI, "eval", "-m", STORIES, "--data", str(tmp_path / "data.jsonl"),
                        "--budget", "12,24,200", "--compress-every", "4", "--window", "8",
                        "--continuation", "16", "-t", "1", "--out", str(tmp_path / "out"), "-q"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    c_rows = [json.loads(l) for l in open(tmp_path / "out" / "results.jsonl")]
    py = sparsekv.evaluate_budget(model, samples, budgets=[12, 24, 200], compress_every=4,
                                  window=8, continuation=16)
    decode = [r["name"] for r in sparsekv.policies() if r["decode"]]
    assert {"sink_recent", "h2o"} <= set(decode)
    assert len(py) == len(c_rows) == 2 * 3 * len(decode) and not py.skipped

    def key(r):
        return r["sample"], r["policy"], r["budget"]

    c = {key(r): r for r in c_rows}
    for r in py:
        ref = c[key(r)]
        for k in ("mode", "compress_every", "protocol", "positions", "n_prefix", "n_window",
                  "n_continuation", "n_tokens", "same_top", "cuts", "max_entries", "entries"):
            assert r[k] == ref[k], (k, key(r))
        for k in ("kl_mean", "kl_median", "kl_p90", "kl_p99", "kl_max", "top1", "nll_ref",
                  "nll_cmp", "ppl_ref", "ppl_cmp", "ln_ppl_ratio"):
            assert r[k] == pytest.approx(ref[k], rel=1e-9, abs=1e-12), (k, key(r))
        # a budget past the sample never cuts: the full cache's distributions exactly
        if r["budget"] == 200:
            assert r["kl_max"] == 0.0 and r["cuts"] == 0
        else:
            assert r["cuts"] > 0 and r["max_entries"] < r["budget"] + 4
    assert max(r["kl_mean"] for r in py) > 0.01
    rows = py.summary()
    assert len(rows) == 3 * len(decode)
    one = [s for s in rows if s["policy"] == "h2o" and s["budget"] == 12][0]
    assert one["n_samples"] == 2 and one["max_entries"] == 15
    assert one["kl_mean"] == pytest.approx(
        sum(r["kl_mean"] for r in py if r["policy"] == "h2o" and r["budget"] == 12) / 2)
    # the means and confidence intervals as eval's summary.csv (9 digits)
    with open(tmp_path / "out" / "summary.csv") as f:
        c = {(r["policy"], int(r["budget"])): r for r in csv.DictReader(f)}
    assert len(c) == len(rows)
    for s in rows:
        ref = c[(s["policy"], s["budget"])]
        assert int(ref["n"]) == s["n_samples"] and float(ref["cuts"]) == s["cuts"]
        for f in ("kl_mean", "kl_mean_ci95", "top1", "top1_ci95", "ln_ppl_ratio",
                  "ln_ppl_ratio_ci95"):
            assert s[f] == pytest.approx(float(ref[f]), rel=1e-7, abs=1e-12), (f, ref)


def test_evaluate_budget_refusals(model):
    ids = model.tokenize(TEXT)
    # as `eval --budget` refuses them
    with pytest.raises(sparsekv.InvalidArgumentError, match="not larger than the window"):
        sparsekv.evaluate_budget(model, [ids], budgets=[8], window=8, continuation=8)
    # the window a budget keeps is the last min(window, compress_every) tokens
    with pytest.raises(sparsekv.InvalidArgumentError, match=r"window it keeps \(4 tokens"):
        sparsekv.evaluate_budget(model, [ids], budgets=[4], compress_every=4, window=8,
                                 continuation=8)
    rows = sparsekv.evaluate_budget(model, [ids], budgets=[6], policies=["knorm"],
                                    compress_every=4, window=8, continuation=8)
    assert rows and all(r["max_entries"] <= 6 + 4 for r in rows)
    with pytest.raises(sparsekv.InvalidArgumentError, match="does not run under a budget"):
        sparsekv.evaluate_budget(model, [ids], budgets=[16], policies=["random"], window=8,
                                 continuation=8)
    with pytest.raises(sparsekv.InvalidArgumentError, match="context"):
        sparsekv.evaluate_budget(model, [ids], budgets=[500], compress_every=32, window=8,
                                 continuation=8)
    with pytest.raises(sparsekv.InvalidArgumentError, match="sinks does not apply"):
        sparsekv.evaluate_budget(model, [ids], budgets=[16], policies=["knorm"], sinks=2,
                                 window=8, continuation=8)
    with pytest.raises(sparsekv.InvalidArgumentError, match="budget"):
        sparsekv.evaluate_budget(model, [ids], budgets=[2**32 + 16], window=8, continuation=8)


def test_budget_long_prompt_streams(model):
    # a prompt longer than the context goes through generate under a re-rotating budget (in
    # pieces of the interval), and no head ever held more than budget + interval
    prompt = " ".join([PROMPT] * 5)
    with model.new_context(threads=1, n_ctx=128) as ctx:
        ctx.set_budget("streaming", BUDGET, interval=EVERY, positions="rerotate")
        lengths = []
        g = ctx.generate(prompt, n=3, on_token=lambda t, p: lengths.append(ctx.head_lengths()))
        n_prompt = len(model.tokenize(prompt))
        assert n_prompt > 128
        assert ctx.n_past == n_prompt + len(g.tokens)
        assert max(int(h.max()) for h in lengths) <= BUDGET + EVERY
        assert ctx.budget_cuts >= (n_prompt - BUDGET) // EVERY
    # the library itself takes one long call in pieces under a re-rotating budget
    with model.new_context(threads=1, n_ctx=128) as ctx:
        ctx.set_budget("streaming", BUDGET, interval=EVERY, positions="rerotate")
        ids = model.tokenize(prompt)
        ctx.forward(ids, logits="none")
        assert ctx.n_past == len(ids) and ctx.head_lengths().max() <= BUDGET + EVERY


def test_budget_prompt_pieces_keep_the_bound(model):
    # generate's prompt pieces end where cuts are due, counting the tokens fed since the last
    # cut (3 here): a cut every EVERY tokens through the prompt, not one after it all (the
    # prompt fits the context: the library itself would take it in one call)
    prompt = " ".join([PROMPT] * 3)
    n = len(model.tokenize(prompt))
    with model.new_context(threads=1, n_ctx=512) as ctx:
        ctx.set_budget("streaming", BUDGET, interval=EVERY)
        ctx.forward(model.tokenize(PROMPT)[:3], logits="none")
        assert ctx.budget_piece == EVERY - 3  # 3 fed since the budget was set
        lengths = []
        ctx.generate(prompt, n=1, on_token=lambda t, p: lengths.append(ctx.head_lengths()))
        # cuts from the first time a head passed BUDGET, one per EVERY tokens fed
        assert ctx.budget_cuts == (3 + n - BUDGET - 1) // EVERY
        assert lengths[0].max() <= BUDGET + EVERY
    with model.new_context(threads=1, n_ctx=512) as ctx:  # one call: one cut, after it all
        ctx.set_budget("streaming", BUDGET, interval=EVERY)
        ctx.forward(model.tokenize(prompt), logits="none")
        assert ctx.budget_piece == EVERY and ctx.budget_cuts == 1  # 0 fed since the cut
