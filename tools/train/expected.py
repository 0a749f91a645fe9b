"""expected.py -- the PyTorch model's logits on fixed prompts, committed as
tests/python/data/retrieval_expected.json for tests/python/test_train_model.py (which checks the
shipped models/retrieval.gguf against them in sparsekv, within 1e-3).

  /usr/bin/python3 tools/train/expected.py CKPT.pt tests/python/data/retrieval_expected.json"""
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import export  # noqa: E402


def prompts():
    out = [data.passkey_text("40721", 0.5, 12)]
    keys = ["cat", "dog", "owl", "elk", "ant", "bee", "yak", "emu"]
    vals = ["%05d" % (11111 * (i + 1) % 90000 + 10000) for i in range(len(keys))]
    out.append(data.kv_text(keys, vals, 2))
    out.append(data.multikey_text(["tiger", "apple", "cloud"], ["31415", "27182", "16180"],
                                  [1, 4, 7], 1, 9))
    out.append(data.story_text(random.Random(3), 200))
    # the longest: a full-context passkey prompt (1010 tokens)
    out.append(data.passkey_text("86420", 0.25, 45))
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    m = export.load(sys.argv[1])
    res = {"model": "models/retrieval.gguf", "tolerance": 1e-3, "prompts": []}
    for p in prompts():
        ids = data.encode(p)
        lg = export.torch_logits(m, ids)
        rows = sorted(set(list(range(0, len(ids), max(1, len(ids) // 8))) + [len(ids) - 1]))
        res["prompts"].append({"text": p, "ids": ids, "rows": rows,
                               "logits": [[round(float(x), 6) for x in lg[r]] for r in rows],
                               "argmax_last": int(lg[-1].argmax())})
    with open(sys.argv[2], "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")
