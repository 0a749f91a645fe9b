"""Where the Python tests find what they check against: the repository, the shared models
($SKV_MODELS, default ../shared/models beside the repository), the CLI ($SKV_CLI, default
build/sparsekv) and the stories260K model. A plain clone has no ../shared: STORIES is then the
repository's models/stories260K.gguf (the same file), and a test that needs another fixture
skips (fixture())."""

import json
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("SKV_MODELS") or os.path.join(os.path.dirname(REPO), "shared", "models")
CLI = os.environ.get("SKV_CLI") or os.path.join(REPO, "build", "sparsekv")
STORIES = os.path.join(MODELS, "stories260K", "stories260K.gguf")
if not os.path.exists(STORIES):
    STORIES = os.path.join(REPO, "models", "stories260K.gguf")


def fixture(*rel):
    """Path of a shared fixture; skips the calling test when it is absent."""
    p = os.path.join(MODELS, *rel)
    if not os.path.exists(p):
        pytest.skip("fixture %s not found" % p)
    return p


def reference_tokens():
    """stories260K's 256 published token ids (reference_logits.json), or without the fixture
    BOS and 255 fixed pseudo-random ids (for tests that need tokens, not those ones)."""
    p = os.path.join(MODELS, "stories260K", "reference_logits.json")
    if os.path.exists(p):
        return json.load(open(p))["tokens"]
    r, out = 12345, [1]
    for _ in range(255):
        r = (r * 1664525 + 1013904223) % 2**32
        out.append(3 + (r >> 8) % 509)
    return out
