"""model.py -- a Llama-architecture transformer in PyTorch, arithmetic as sparsekv/llama.cpp
"llama": RMSNorm (eps 1e-5, weight * x / rms), RoPE on adjacent pairs (2i, 2i+1) of each head
with theta cfg.theta (10000, llama2.c's; export passes another to convert-llama2c --rope-theta),
grouped-query attention, SwiGLU
(w2(silu(w1 x) * w3 x)), no biases, output tied to the token embedding."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2
    hidden: int = 384
    vocab: int = 354
    max_seq_len: int = 1024
    eps: float = 1e-5
    theta: float = 10000.0


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, T, device=None, dtype=torch.float32):
    hd = cfg.dim // cfg.n_heads
    i = torch.arange(0, hd, 2, dtype=torch.float64)
    freq = 1.0 / (cfg.theta ** (i / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)  # [T, hd/2]


def apply_rope(x, cos, sin):
    # x [B, H, T, hd]; pairs (2i, 2i+1)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.stack((y0, y1), dim=-1).flatten(-2)


# Query rows per block of causal attention; 0: the whole [T, T] score matrix of every head at
# once, the arithmetic (and so the float rounding) that trained models/retrieval.gguf v1/v2.
# train.py sets it per phase (a stage's whole_attn_upto and attn_block, --attn-chunk) so that
# runs reproduce. 128 rather than v3's 256: smaller blocks of scores stay nearer the caches (a
# step at 4 x 1,024 tokens 8-10% faster, the attention alone ~2x; measured 2026-12-01).
ATTN_CHUNK = 128


def attention(q, k, v, mask):
    """Causal grouped-query attention. q [B, H, T, hd], k and v [B, KV, T, hd]; query head j
    uses kv head j // (H / KV) (llama.cpp's grouping). The queries go in blocks of ATTN_CHUNK
    rows against the keys up to the block's end: the [T, T] scores of every head at once made a
    step at 4 x 1,024 tokens 10x slower than 16 x 256 (softmax and its backward over 64 MB
    tensors); in blocks it costs about the same. Returns [B, KV, rep, T, hd]."""
    B, H, T, hd = q.shape
    KV = k.shape[1]
    rep = H // KV
    if ATTN_CHUNK <= 0:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)) + mask, dim=-1)
        return (att @ v).view(B, KV, rep, T, hd)
    qg = (q * (1.0 / math.sqrt(hd))).view(B, KV, rep, T, hd)
    outs = []
    for s in range(0, T, ATTN_CHUNK):
        e = min(T, s + ATTN_CHUNK)
        qs = qg[:, :, :, s:e].reshape(B, KV, rep * (e - s), hd)  # [B, KV, rep * rows, hd]
        sc = (qs @ k[:, :, :e].transpose(-1, -2)).view(B, KV, rep, e - s, e) + mask[s:e, :e]
        p = torch.softmax(sc, dim=-1).view(B, KV, rep * (e - s), e)
        outs.append((p @ v[:, :, :e]).view(B, KV, rep, e - s, hd))
    return torch.cat(outs, dim=3)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.dim // cfg.n_heads
        self.attn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.w1 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        c = self.cfg
        B, T, D = x.shape
        hd = D // c.n_heads
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, c.n_heads, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, c.n_kv_heads, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attention(q, k, v, mask).reshape(B, c.n_heads, T, hd)
        o = o.transpose(1, 2).reshape(B, T, D)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("wo.weight") or n.endswith("w2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx):
        B, T = idx.shape
        cos, sin = rope_tables(self.cfg, T, dtype=self.tok.weight.dtype)
        mask = torch.full((T, T), float("-inf"), dtype=self.tok.weight.dtype).triu(1)
        x = self.tok(idx)
        for l in self.layers:
            x = l(x, cos, sin, mask)
        return self.norm(x) @ self.tok.weight.t()
