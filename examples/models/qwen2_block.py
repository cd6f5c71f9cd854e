"""A Qwen2-7B-style decoder layer: grouped-query attention (28 query heads, 4 key/value heads)
with biased q/k/v projections, rotary embeddings, causal attention, a SwiGLU MLP, RMSNorm.

KernelBench convention: `Model(*get_init_inputs())(*get_inputs())`. On a GPU it has the
published Qwen2-7B sizes (hidden 3584, 28/4 heads of 128, intermediate 18944, rope base 1e6,
RMSNorm eps 1e-6; Qwen/Qwen2-7B config.json) at 2 x 1024 tokens of prefill; on a CPU a small
config with the same structure (GQA 4/2 heads, biases) keeps a forward well under a second.
Key/value heads are repeated for attention the way eager model code usually does it
(`repeat_interleave`), so the profile shows what that costs.
"""

import torch
import torch.nn.functional as F
from torch import nn

DTYPE = torch.bfloat16
GPU = {"dim": 3584, "heads": 28, "kv_heads": 4, "hidden": 18944, "batch": 2, "seq": 1024}
CPU = {"dim": 256, "heads": 4, "kv_heads": 2, "hidden": 1024, "batch": 1, "seq": 64}
ROPE_BASE = 1_000_000.0
EPS = 1e-6


def _config() -> dict:
    return GPU if torch.cuda.is_available() else CPU


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * self.weight


def rotate(x, cos, sin):  # x: (batch, heads, seq, head_dim); cos/sin: (seq, head_dim)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, seq: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)
        freq = ROPE_BASE ** (-torch.arange(0, self.head_dim, 2).float() / self.head_dim)
        angle = torch.arange(seq).float()[:, None] * freq[None, :]
        angle = torch.cat([angle, angle], dim=-1)
        self.register_buffer("cos", angle.cos().to(DTYPE))
        self.register_buffer("sin", angle.sin().to(DTYPE))

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, self.cos, self.sin), rotate(k, self.cos, self.sin)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int, seq: int):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads, kv_heads, seq)
        self.post_attention_layernorm = RMSNorm(dim)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self.to(DTYPE)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def get_inputs():
    c = _config()
    return [torch.randn(c["batch"], c["seq"], c["dim"], dtype=DTYPE)]


def get_init_inputs():
    c = _config()
    return [c["dim"], c["heads"], c["kv_heads"], c["hidden"], c["seq"]]
