"""evaluate.py -- dense-cache accuracy of a checkpoint in PyTorch (teacher-forced exact match of
the 5-digit answer, which equals greedy decoding's exact match), per task and depth, on prompts
from seeds >= 10**6 (never used in training).

  /usr/bin/python3 tools/train/evaluate.py CKPT.pt [--len 1024] [--n 20]"""
import argparse
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import export  # noqa: E402
import train  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("--len", type=int, default=1024)
    ap.add_argument("--n", type=int, default=10, help="prompts per task and depth")
    ap.add_argument("--depths", default="0.1,0.3,0.5,0.7,0.9")
    ap.add_argument("--tasks", default="passkey,kv,multikey")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = export.load(a.ckpt)
    depths = [float(x) for x in a.depths.split(",")]
    res = {}
    for ti, task in enumerate(a.tasks.split(",")):
        res[task] = {}
        for di, d in enumerate(depths):
            samples = [data.make_sample(random.Random(2 * 10**6 + 10**5 * ti + 1000 * di + i), task,
                                        a.len, depth=d, full=True) for i in range(a.n)]
            res[task][d] = sum(train.answer_correct(m, samples)) / a.n
        res[task]["all"] = sum(res[task][d] for d in depths) / len(depths)
        print(task, json.dumps(res[task]), flush=True)
