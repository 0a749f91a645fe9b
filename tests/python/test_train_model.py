"""The shipped retrieval model (models/retrieval.gguf, docs/MODEL_retrieval.md) loads in sparsekv
and its logits on fixed prompts equal the PyTorch model's (committed in
data/retrieval_expected.json by tools/train/expected.py) within 1e-3; the standard library only.
Environment: SKV_CLI (the CLI, default build/sparsekv)."""

import array
import json
import os
import subprocess
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("SKV_CLI") or os.path.join(REPO, "build", "sparsekv")
MODEL = os.path.join(REPO, "models", "retrieval.gguf")
EXPECTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                        "retrieval_expected.json")


def cli(*args):
    p = subprocess.run([CLI, *args], capture_output=True)
    assert p.returncode == 0, "%s %s failed: %s" % (CLI, " ".join(args), p.stderr.decode())
    return p.stdout.decode()


@pytest.fixture(scope="module")
def expected():
    if not os.access(CLI, os.X_OK):
        pytest.skip("no sparsekv CLI at %s (set SKV_CLI)" % CLI)
    with open(EXPECTED) as f:
        return json.load(f)


def test_info(expected):
    info = json.loads(cli("info", MODEL, "--json"))
    text = json.dumps(info)
    assert "llama" in text


def test_logits_match_pytorch(expected):
    n_vocab = 354
    tol = expected["tolerance"]
    for p in expected["prompts"]:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "logits.f32")
            ids = json.loads(cli("logits", "-m", MODEL, "-p", p["text"], "-o", out))
            assert ids == p["ids"]
            a = array.array("f")
            with open(out, "rb") as f:
                a.frombytes(f.read())
        assert len(a) == len(ids) * n_vocab
        worst = 0.0
        for r, want in zip(p["rows"], p["logits"]):
            row = a[r * n_vocab:(r + 1) * n_vocab]
            worst = max(worst, max(abs(x - y) for x, y in zip(row, want)))
        assert worst < tol, "max |logit - pytorch| = %g on %r" % (worst, p["text"][:40])
        last = a[(len(ids) - 1) * n_vocab:len(ids) * n_vocab]
        top = sorted(p["logits"][-1], reverse=True)
        if top[0] - top[1] > 2 * tol:  # a near-tie may flip within the tolerance
            assert max(range(n_vocab), key=lambda i: last[i]) == p["argmax_last"]
