"""export.py -- PyTorch checkpoint -> llama2.c v1 checkpoint + tokenizer.bin -> GGUF (by the
project's own converter, `sparsekv convert-llama2c`).

  /usr/bin/python3 tools/train/export.py CKPT.pt OUTDIR [--cli build/sparsekv] [--name NAME]

writes OUTDIR/NAME.bin (llama2.c v1: magic "ak42", version 1, 7 int32, shared-classifier byte,
zero pad to 256 bytes, float32 weights rms_att, rms_ffn, rms_final, tok_embeddings, wq, wk, wv,
wo, w1, w2, w3; the RoPE theta, which llama2.c does not record, goes to the converter's
--rope-theta), OUTDIR/tokenizer.bin (llama2.c tokenizer format: i32 max_token_length, then
per token f32 score, i32 length, bytes) and, with --cli, OUTDIR/NAME.gguf."""
import argparse
import os
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model  # noqa: E402


def load(path):
    ck = torch.load(path, map_location="cpu")
    m = model.Transformer(model.Config(**ck["cfg"]))
    m.load_state_dict(ck["model"])
    m.eval()
    return m


def write_tokenizer(path):
    ps = data.pieces()
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p, _ in ps)))
        for p, s in ps:
            f.write(struct.pack("<fi", s, len(p)))
            f.write(p)


def write_llama2c(m, path):
    c = m.cfg
    hdr = struct.pack("<Ii", 0x616B3432, 1)
    hdr += struct.pack("<7i", c.dim, c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab,
                       c.max_seq_len)
    hdr += struct.pack("<B", 1)  # shared classifier (output tied to the embedding)
    hdr += b"\0" * (256 - len(hdr))
    L = m.layers

    def cat(ts):
        return torch.cat([t.detach().reshape(-1) for t in ts]).numpy().astype("<f4")
    parts = [cat([l.attn_norm.weight for l in L]), cat([l.ffn_norm.weight for l in L]),
             cat([m.norm.weight]), cat([m.tok.weight]),
             cat([l.wq.weight for l in L]), cat([l.wk.weight for l in L]),
             cat([l.wv.weight for l in L]), cat([l.wo.weight for l in L]),
             cat([l.w1.weight for l in L]), cat([l.w2.weight for l in L]),
             cat([l.w3.weight for l in L])]
    with open(path, "wb") as f:
        f.write(hdr)
        for p in parts:
            f.write(p.tobytes())


def export(ckpt, outdir, cli=None, name="model"):
    os.makedirs(outdir, exist_ok=True)
    m = load(ckpt)
    bin_path = os.path.join(outdir, name + ".bin")
    tok_path = os.path.join(outdir, "tokenizer.bin")
    write_llama2c(m, bin_path)
    write_tokenizer(tok_path)
    gguf = None
    if cli:
        gguf = os.path.join(outdir, name + ".gguf")
        theta = ["--rope-theta", repr(m.cfg.theta)] if m.cfg.theta != 10000.0 else []
        subprocess.run([cli, "convert-llama2c", *theta, bin_path, tok_path, gguf], check=True,
                       stdout=subprocess.DEVNULL)
    return m, bin_path, tok_path, gguf


def torch_logits(m, ids):
    with torch.no_grad():
        return m(torch.tensor([ids]))[0].numpy()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("outdir")
    ap.add_argument("--cli")
    ap.add_argument("--name", default="model")
    a = ap.parse_args()
    print(export(a.ckpt, a.outdir, a.cli, a.name)[1:])
