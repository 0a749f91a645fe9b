"""probe.py -- where a checkpoint's heads look on passkey prompts: per layer and query head, the
attention mass on the needle (" is NNNNN." of the passkey sentence) from the question's last W
tokens (the window a SnapKV-style policy scores with; the largest over those rows) and from the
answer's first position (the space after the prompt, whose output is the first digit). Means
over N prompts of 1,024 tokens from seeds >= 5 * 10**6 (never trained on).

  /usr/bin/python3 tools/train/probe.py CKPT.pt [--n 10] [--window 32]"""
import argparse
import math
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import export  # noqa: E402
import model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--window", type=int, default=32)
    a = ap.parse_args()
    torch.set_num_threads(1)
    m = export.load(a.ckpt)
    probs = []  # per layer: [H, T, T] of the prompt being probed
    plain = model.attention

    def recording(q, k, v, mask):
        kk = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        s = q @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask
        probs.append(torch.softmax(s, dim=-1)[0])
        return plain(q, k, v, mask)

    model.attention = recording
    sums = {}
    for i in range(a.n):
        rng = random.Random(5 * 10**6 + i)
        ids, ans = data.make_sample(rng, "passkey", 1024, depth=(0.1, 0.3, 0.5, 0.7, 0.9)[i % 5],
                                    full=True)
        digits = ids[ans + 1:ans + 6]
        at = next(j for j in range(ans - 5) if ids[j:j + 5] == digits)
        needle = list(range(at - 2, at + 6))  # "is", " ", the 5 digits, "."
        probs.clear()
        with torch.no_grad():
            m(torch.tensor([ids[:ans + 1]]))  # the prompt and the answer's space
        T = ans + 1
        for layer, p in enumerate(probs):
            for h in range(p.shape[0]):
                win = p[h, T - 1 - a.window:T - 1][:, needle].sum(-1).max().item()
                first = p[h, T - 1, needle].sum().item()
                s = sums.setdefault((layer, h), [0.0, 0.0])
                s[0] += win / a.n
                s[1] += first / a.n
    model.attention = plain
    print("layer head  window->needle (max over rows)  answer->needle")
    for (layer, h), (w, f) in sorted(sums.items()):
        print("%5d %4d  %30.3f  %14.3f" % (layer, h, w, f))


if __name__ == "__main__":
    main()
