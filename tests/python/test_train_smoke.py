"""Smoke test of the retrieval-model trainer (tools/train): the Python tokenization equals
`sparsekv tokenize` on the exported tokenizer.bin, a few training steps lower the loss, and the
export (llama2.c checkpoint -> `sparsekv convert-llama2c`) loads in sparsekv with logits equal to
the PyTorch model's within 1e-3.

Needs torch and numpy (Debian's python3-torch / python3-numpy); skipped without them.
Environment: SKV_CLI (the CLI, default build/sparsekv)."""

import json
import os
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch (python3-torch) is not installed")
np = pytest.importorskip("numpy", reason="numpy is not installed")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("SKV_CLI") or os.path.join(REPO, "build", "sparsekv")
TRAIN = os.path.join(REPO, "tools", "train")
sys.path.insert(0, TRAIN)

import data  # noqa: E402
import export  # noqa: E402


def cli(*args):
    p = subprocess.run([CLI, *args], capture_output=True)
    assert p.returncode == 0, "%s %s failed: %s" % (CLI, " ".join(args), p.stderr.decode())
    return p.stdout


@pytest.fixture(scope="module")
def cli_ok():
    if not os.access(CLI, os.X_OK):
        pytest.skip("no sparsekv CLI at %s (set SKV_CLI)" % CLI)


@pytest.fixture(scope="module")
def tok_bin(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("tok") / "tokenizer.bin")
    export.write_tokenizer(p)
    return p


def texts():
    rng = random.Random(99)
    out = ["hello world", "  two  spaces ", "tab\tnewline\nend", "caf\u00e9 \u2581 \u4e2d", "",
           "What is the pass key? The pass key is 12345."]
    for t in ("passkey", "kv", "multikey", "text"):
        ids, _ = data.make_sample(rng, t, 300)
        out.append(data.decode(ids[1:]))
    return out


def test_vocabulary_layout():
    ps = data.pieces()
    assert len(ps) == data.VOCAB_SIZE == 354
    assert ps[0][0] == b"<unk>" and ps[3][0] == b"<0x00>" and ps[258][0] == b"<0xFF>"
    assert ps[data.SPACE_ID][0] == b" " and ps[data.CHAR0][0] == b"!"


def test_decode_inverts_encode():
    for t in texts():
        assert data.decode(data.encode(t)) == t


def test_tokenize_matches_cli(cli_ok, tok_bin):
    for t in texts():
        if not t:
            continue
        out = json.loads(cli("tokenize", "--vocab-llama2c", tok_bin, str(data.VOCAB_SIZE), "-p", t,
                             "--json"))
        assert out["tokens"] == data.encode(t), t


def test_passkey_text_matches_eval_format():
    # eval/passkey.c: intro, needle before filler round_half_even(depth * n), question
    t = data.passkey_text("12345", 0.5, 3)
    assert t == (data.PASSKEY_INTRO + " The grass is green. The sky is blue. The pass key is "
                 "12345. Remember it. The sun is yellow. What is the pass key? The pass key is")


def test_smoke_train_export_and_logits(cli_ok, tmp_path):
    out = str(tmp_path / "run")
    subprocess.run([sys.executable, os.path.join(TRAIN, "train.py"), "--preset", "smoke",
                    "--out", out, "--eval-n", "0"], check=True, capture_output=True)
    log = open(os.path.join(out, "log.txt")).read().splitlines()
    losses = [float(l.split(" loss ")[1].split()[0]) for l in log if l.startswith("step ")]
    assert len(losses) >= 2 and losses[-1] < losses[0] - 0.2, losses
    m, _, _, gguf = export.export(os.path.join(out, "ckpt.pt"), str(tmp_path / "exp"), CLI, "smoke")
    prompt = data.passkey_text("54321", 0.3, 4)
    ids = data.encode(prompt)
    lf = str(tmp_path / "logits.f32")
    printed = json.loads(cli("logits", "-m", gguf, "-p", prompt, "-o", lf))
    assert printed == ids
    got = np.fromfile(lf, dtype="<f4").reshape(len(ids), data.VOCAB_SIZE)
    want = export.torch_logits(m, ids)
    assert np.abs(got - want).max() < 1e-3


def test_export_records_rope_theta(cli_ok, tmp_path):
    # A model trained with another RoPE theta (llama2.c files cannot say) is exported with it:
    # at positions up to 300 the rotations differ enough that a wrong theta shows in the logits.
    import model
    torch.manual_seed(3)
    cfg = model.Config(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden=64, max_seq_len=512,
                       theta=500000.0)
    m = model.Transformer(cfg)
    ck = str(tmp_path / "ck.pt")
    torch.save({"model": m.state_dict(), "cfg": cfg.__dict__}, ck)
    m, _, _, gguf = export.export(ck, str(tmp_path / "exp"), CLI, "theta")
    info = cli("info", gguf).decode()
    assert "500000" in info, info
    prompt = data.passkey_text("12345", 0.5, 40)
    ids = data.encode(prompt)
    assert len(ids) > 300
    lf = str(tmp_path / "logits.f32")
    cli("logits", "-m", gguf, "-p", prompt, "-o", lf)
    got = np.fromfile(lf, dtype="<f4").reshape(len(ids), data.VOCAB_SIZE)
    assert np.abs(got - export.torch_logits(m, ids)).max() < 1e-3


@pytest.mark.parametrize("task", ["kvq", "kvq1", "mkq", "kvrep", "kvrepl"])
def test_multi_question_samples_answer_what_they_ask(task):
    # Each answer span (7 tokens: " NNNNN.") must hold the value that the text before it
    # pairs with the key it asks for, read back from the text itself.
    import re
    rng = random.Random(7)
    n_answers = 0
    for max_len in (128, 256, 512, 1024):
        for _ in range(20):
            ids, starts = data.make_multi_sample(rng, task, max_len)
            assert len(ids) <= max_len + 1
            for a in starts:
                ans = data.decode(ids[a:a + 7])  # decode drops the leading space
                assert re.fullmatch(r"\d{5}\.", ans), ans
                before = data.decode(ids[1:a])
                if task.startswith("kvrep"):
                    key = re.search(r"([a-z]{3}):$", before).group(1)
                    want = re.search(r"(?:^| )%s: (\d{5})\." % key, before).group(1)
                else:
                    noun = "value of" if task.startswith("kvq") else "magic number for"
                    key = re.search(r"The %s (\w+) is$" % noun, before).group(1)
                    pat = (r" %s: (\d{5})\." if task.startswith("kvq") else
                           r"The magic number for %s is (\d{5})\.") % key
                    want = re.search(pat, before).group(1)
                assert ans[:5] == want, (task, before[-80:], ans)
                n_answers += 1
    assert n_answers >= 100


def test_blocked_attention_equals_full_matrix(monkeypatch):
    """model.attention (queries in blocks of ATTN_CHUNK rows, GQA without copying k/v) against
    softmax over the whole causal [T, T] score matrix per head with k/v repeated per group, in
    float64: values and gradients, for T below, at and across block boundaries."""
    import math

    import model

    C = 16
    monkeypatch.setattr(model, "ATTN_CHUNK", C)
    torch.manual_seed(3)
    B, H, KV, hd = 2, 4, 2, 8
    for T in (5, C, C + 3, 2 * C + 7, 9 * C):
        q = torch.randn(B, H, T, hd, dtype=torch.float64, requires_grad=True)
        k = torch.randn(B, KV, T, hd, dtype=torch.float64, requires_grad=True)
        v = torch.randn(B, KV, T, hd, dtype=torch.float64, requires_grad=True)
        g = torch.randn(B, H, T, hd, dtype=torch.float64)
        mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
        o = model.attention(q, k, v, mask).reshape(B, H, T, hd)
        grads = torch.autograd.grad((o * g).sum(), (q, k, v))
        kk = k.repeat_interleave(H // KV, dim=1)  # query head j reads kv head j // 2
        vv = v.repeat_interleave(H // KV, dim=1)
        s = q @ kk.transpose(-1, -2) / math.sqrt(hd) + mask
        ref = torch.softmax(s, dim=-1) @ vv
        ref_grads = torch.autograd.grad((ref * g).sum(), (q, k, v))
        assert torch.allclose(o, ref, atol=1e-12), T
        for a, b in zip(grads, ref_grads):
            assert torch.allclose(a, b, atol=1e-10), T


def test_stage_learning_rates():
    """train.stage_lr at hand-derived points: the warmup, the constant repeat phase, the
    cosine's midpoint (55% of the peak) and its end (10%); and the shipped preset's stage 1 has
    v2's phases and learning rates (so that its first 1,500 steps, whole-matrix attention, are
    v2's)."""
    import train

    st = dict(phases=[(128, 32, 100, "repeat"), (256, 16, 200, "tasks")], lr=1e-3, warmup=10,
              const_repeat=True)
    assert train.stage_lr(st, 0) == pytest.approx(1e-4)
    assert train.stage_lr(st, 99) == pytest.approx(1e-3)
    assert train.stage_lr(st, 150) == pytest.approx(1e-3 * (0.1 + 0.45 * (1 + 0.5 ** 0.5)))
    assert train.stage_lr(st, 200) == pytest.approx(0.55e-3)
    assert train.stage_lr(st, 300) == pytest.approx(1e-4)
    assert train.stage_lr(dict(st, const_repeat=False), 150) == pytest.approx(0.55e-3)
    v2, full = train.PRESETS["v2"][0], train.PRESETS["full"][0]
    assert v2["cfg"] == full["cfg"] and v2["phases"] == full["phases"]
    assert all(train.stage_lr(full, i) == train.stage_lr(v2, i) for i in range(2050))


def test_presets_name_their_attention():
    """The attention's arithmetic of every phase of the shipped and the older presets (what
    makes them reproduce: whole matrix = 0, else rows per block), and --attn-chunk overrides."""
    import train

    def chunks(preset):
        return [[train.phase_attn_chunk(st, p[0]) for p in st["phases"]]
                for st in train.PRESETS[preset]]

    # v4: steps 1-1,500 (128 and 256 tokens) whole-matrix like v2's, blocks of 128 after
    assert chunks("full") == [[0, 0, 128, 128], [128, 128, 128], [128]]
    assert chunks("v3") == [[0, 0, 0, 256], [256, 256, 256]]
    assert chunks("v2") == [[0, 0, 0, 0], [0, 0, 0]]
    assert train.phase_attn_chunk(train.PRESETS["v2"][0], 512, override=64) == 64
    assert train.phase_attn_chunk(train.PRESETS["full"][0], 1024, override=0) == 0


@pytest.mark.parametrize("at", [0, 1, None])
def test_grow_layers_keeps_the_function(at):
    """train.grow_layers inserts layers whose output projections are zero: the grown model's
    logits equal the old model's, the old parameters (and their Adam moments) are the same
    objects, and a step changes the new layers' output projections (they learn)."""
    import model
    import train

    torch.manual_seed(5)
    cfg = model.Config(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden=64, max_seq_len=64)
    m = model.Transformer(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randint(0, data.VOCAB_SIZE, (2, 40))
    m(x).sum().backward()
    opt.step()
    old = list(m.parameters())
    with torch.no_grad():
        before = m(x)
    opt = train.grow_layers(m, opt, 2, at)
    assert m.cfg.n_layers == 4 and len(m.layers) == 4
    with torch.no_grad():
        assert torch.equal(m(x), before)
    ids = {id(p) for p in m.parameters()}
    assert all(id(p) in ids and p in opt.state for p in old)
    new = m.layers[2 if at is None else at]
    assert not new.wo.weight.any() and not new.w2.weight.any()
    opt.zero_grad()
    train.loss_fn(m, x[:, :-1], x[:, 1:], torch.ones(2, 39)).backward()
    opt.step()
    assert new.wo.weight.any() and new.w2.weight.any()


@pytest.mark.parametrize("procs", [1, 2])
def test_ema_averages_the_last_stage(tmp_path, procs):
    """--ema: the training itself is unchanged (decay 0 gives the plain run's final weights), and
    over a last stage of one step, decay 0.5 gives the mean of the weights before and after that
    step (the stage's start is the previous phase's checkpoint): the run's result (ckpt.pt).
    With two processes the same within rounding."""
    def run(name, *extra):
        out = str(tmp_path / name)
        subprocess.run([sys.executable, os.path.join(TRAIN, "train.py"), "--preset", "smoke",
                        "--out", out, "--eval-n", "0", "--phases", '[[256, 2, 1, "recall2"]]',
                        *extra], check=True, capture_output=True)
        return out

    def load(d, f):
        return torch.load(os.path.join(d, f))["model"]

    plain, ema = run("plain"), run("ema", "--ema", "0.5,0", "--procs", str(procs))
    start, end = load(plain, "ckpt_step6.pt"), load(plain, "ckpt.pt")
    got5, got0 = load(ema, "ckpt.pt"), load(ema, "ckpt_step7_ema0.pt")
    last = load(ema, "ckpt_step7_last.pt")
    assert not all(torch.equal(start[k], end[k]) for k in end)
    tol = 0 if procs == 1 else 1e-5
    for k in end:
        for got, want in ((got0, end[k]), (last, end[k]), (got5, start[k] * 0.5 + end[k] * 0.5)):
            assert (got[k] - want).abs().max() <= tol, k


def test_two_processes_train_like_one(tmp_path):
    """--procs 2 (data parallel over gloo, each process half of every batch, gradients summed)
    takes the single process's steps up to rounding: the same logged losses, weights within
    1e-5 after the smoke run's 8 steps."""
    outs = []
    for procs in (1, 2):
        out = str(tmp_path / ("p%d" % procs))
        subprocess.run([sys.executable, os.path.join(TRAIN, "train.py"), "--preset", "smoke",
                        "--out", out, "--eval-n", "0", "--procs", str(procs)], check=True,
                       capture_output=True)
        log = open(os.path.join(out, "log.txt")).read().splitlines()
        outs.append((torch.load(os.path.join(out, "ckpt.pt"))["model"],
                     [float(l.split(" loss ")[1].split()[0]) for l in log if l.startswith("step ")]))
    (a, la), (b, lb) = outs
    assert len(la) == 2 and la == pytest.approx(lb, abs=2e-4)  # steps 1 and 5 are logged
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
