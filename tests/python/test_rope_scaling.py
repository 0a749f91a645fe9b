"""LongRoPE and YaRN models from Python and the CLI (the arithmetic itself: tests/test_arch.c):
which LongRoPE factor set a context turns by, chosen by its n_ctx alike in every tool (--ctx on
the commands, n_ctx= in Python), and BOS as the vocabulary asks."""

import json
import subprocess

import numpy as np
import pytest

import sparsekv

from skvtest import CLI, fixture


def cli(*args):
    p = subprocess.run([CLI, *args], capture_output=True, text=True)
    assert p.returncode == 0, "%s: %s" % (" ".join(args), p.stderr)
    return p


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("rope")
    out = {}
    for preset in ("tiny-longrope", "tiny-yarn"):
        out[preset] = str(d / (preset + ".gguf"))
        cli("synth-model", "--preset", preset, "--type", "f32", "-o", out[preset])
    return out


IDS = [1] + [3 + (i * 37) % 500 for i in range(80)]


def test_hparams_and_factor_set(models):
    with sparsekv.Model(models["tiny-longrope"]) as m:
        h = m.hparams
        assert h["rope_scaling"] == "longrope" and h["n_ctx_orig"] == 256 and h["n_rot"] == 12
        assert h["rope_attn_factor"] == pytest.approx((1 + np.log(2) / np.log(256)) ** 0.5)
        with m.new_context(threads=1) as long_, m.new_context(n_ctx=256, threads=1) as short, \
                m.new_context(n_ctx=257, threads=1) as past:
            assert (long_.rope_factors, short.rope_factors, past.rope_factors) == \
                ("long", "short", "long")
            a = np.asarray(long_.forward(IDS, logits="all"))
            b = np.asarray(short.forward(IDS, logits="all"))
            c = np.asarray(past.forward(IDS, logits="all"))
        assert np.abs(a - b).max() > 1e-2  # the set matters
        assert np.array_equal(a, c)  # and only the set: 257 and 512 turn alike
    with sparsekv.Model(models["tiny-yarn"]) as m:
        assert m.hparams["rope_scaling"] == "yarn"
        assert m.hparams["rope_freq_scale"] == pytest.approx(0.25)
        with m.new_context() as ctx:
            assert ctx.rope_factors is None


def test_cli_ctx_matches_python(models, tmp_path):
    path = models["tiny-longrope"]
    ids = ",".join(map(str, IDS))
    for n_ctx in (0, 256):
        out = tmp_path / ("l%d.f32" % n_ctx)
        cli("logits", "-m", path, "--tokens", ids, "--ctx", str(n_ctx), "-t", "1", "-o", str(out))
        got = np.fromfile(out, dtype=np.float32).reshape(len(IDS), -1)
        with sparsekv.Model(path) as m, m.new_context(n_ctx=n_ctx, threads=1) as ctx:
            want = np.asarray(ctx.forward(IDS, logits="all"))
        assert np.abs(got - want).max() < 1e-5
    p = subprocess.run([CLI, "logits", "-m", path, "--tokens", ids, "--ctx", "16", "-o",
                        str(tmp_path / "x")], capture_output=True, text=True)
    assert p.returncode == 2 and "do not fit in --ctx 16" in p.stderr


def _nll(out_dir):
    rows = [json.loads(l) for l in open(out_dir / "results.jsonl")]
    return sorted({(r["sample"], round(r["nll_ref"], 6)) for r in rows})


def test_eval_one_factor_set_per_run(models, tmp_path):
    """eval --keep sized its contexts to the sample and --budget to the model: on a LongRoPE
    model with samples shorter than its original length (256) the two compared their caches
    under different factor sets (nll_ref differed)."""
    path = models["tiny-longrope"]
    data = tmp_path / "data.jsonl"
    with open(data, "w") as f:
        for k in range(2):
            f.write(json.dumps({"tokens": [1] + [3 + (i * 37 + k * 11) % 500 for i in range(150)]})
                    + "\n")
    common = ["eval", "-m", path, "--data", str(data), "--policies", "snapkv", "--window", "16",
              "--continuation", "32", "-t", "1", "-q"]
    cli(*common, "--keep", "0.5", "--protocols", "seed", "--out", str(tmp_path / "keep"))
    cli(*common, "--budget", "64", "--out", str(tmp_path / "budget"))
    cli(*common, "--keep", "0.5", "--protocols", "seed", "--ctx", "256", "--out",
        str(tmp_path / "short"))
    keep, budget, short = (_nll(tmp_path / d) for d in ("keep", "budget", "short"))
    assert keep == budget
    assert [s for s, _ in keep] == [s for s, _ in short] and keep != short
    # the size a LongRoPE run used is recorded, given or not (a resume cannot mix sets)
    assert json.load(open(tmp_path / "short" / "run.json"))["config"]["n_ctx"] == "256"
    assert json.load(open(tmp_path / "keep" / "run.json"))["config"]["n_ctx"] == "512"
    p = subprocess.run([CLI, *common, "--keep", "0.5", "--protocols", "seed", "--ctx", "256",
                        "--resume", str(tmp_path / "keep")], capture_output=True, text=True)
    assert p.returncode == 2 and "n_ctx" in p.stderr


def test_evaluate_n_ctx(models):
    with sparsekv.Model(models["tiny-longrope"]) as m:
        kw = dict(policies=["snapkv"], keeps=[0.5], protocols=["seed"], window=8,
                  continuation=16, greedy=4, threads=1, window_keep=4)
        dflt = sparsekv.evaluate(m, [IDS], **kw)
        short = sparsekv.evaluate(m, [IDS], n_ctx=256, **kw)
        budget = sparsekv.evaluate_budget(m, [IDS], [40], policies=["snapkv"], window=8,
                                          continuation=16, threads=1)
    assert abs(dflt[0]["nll_ref"] - short[0]["nll_ref"]) > 1e-3
    # the full cache's numbers, teacher-forced in one call or one token per call: one set
    assert budget[0]["nll_ref"] == pytest.approx(dflt[0]["nll_ref"], abs=1e-4)


def test_tokenize_bos_as_the_vocabulary_asks(tmp_path):
    """Qwen2's vocabulary adds no BOS: tokenize (and so evaluate and generate on text) follows
    it unless told, as the CLI does."""
    vocab = fixture("vocab", "ggml-vocab-qwen2.gguf")
    path = str(tmp_path / "q.gguf")
    cli("synth-model", "--preset", "tiny", "--type", "f32", "--vocab", vocab, "-o", path)
    with sparsekv.Model(path) as m:
        plain = list(m.tokenize("Hello world"))
        assert plain == [9707, 1879]
        assert list(m.tokenize("Hello world", bos=True)) == [m.bos] + plain
        p = cli("tokenize", "-m", path, "-p", "Hello world", "--json")
        assert json.loads(p.stdout)["tokens"] == plain


def test_tokenize_eos_as_the_vocabulary_asks(tmp_path):
    """A vocabulary asking for BOS and EOS gets both from tokenize(bos=None), with or without
    special=True, as `sparsekv tokenize` does (make_vocab.py's writer: a byte-level vocabulary of
    the 256 byte tokens, <s> and </s>)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "data", "tokenizer"))
    import make_vocab
    chars = sorted(make_vocab.byte_alphabet())
    tokens = ["<unk>", "<s>", "</s>"] + chars
    vocab = str(tmp_path / "v.gguf")
    make_vocab.write_gguf(vocab, [
        ("general.architecture", "str", "llama"),
        ("tokenizer.ggml.model", "str", "gpt2"),
        ("tokenizer.ggml.pre", "str", "gpt-2"),
        ("tokenizer.ggml.tokens", "[str]", tokens),
        ("tokenizer.ggml.token_type", "[i32]", [3, 3, 3] + [1] * len(chars)),
        ("tokenizer.ggml.merges", "[str]", []),
        ("tokenizer.ggml.bos_token_id", "u32", 1),
        ("tokenizer.ggml.eos_token_id", "u32", 2),
        ("tokenizer.ggml.unknown_token_id", "u32", 0),
        ("tokenizer.ggml.add_bos_token", "bool", True),
        ("tokenizer.ggml.add_eos_token", "bool", True),
    ])
    path = str(tmp_path / "m.gguf")
    cli("synth-model", "--preset", "tiny", "--type", "f32", "--vocab", vocab, "-o", path)
    cli_ids = json.loads(cli("tokenize", "-m", path, "-p", "ab", "--json").stdout)["tokens"]
    cli_special = json.loads(cli("tokenize", "-m", path, "-p", "ab", "--special",
                                 "--json").stdout)["tokens"]
    with sparsekv.Model(path) as m:
        ids = list(m.tokenize("ab"))
        assert ids[0] == 1 and ids[-1] == 2 and len(ids) == 4
        assert ids == cli_ids
        assert list(m.tokenize("ab", special=True)) == cli_special == ids
        assert list(m.tokenize("ab", bos=False)) == ids[1:3]
