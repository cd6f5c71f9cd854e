"""A GPT-2-style decoder block: LayerNorm, fused QKV projection, causal attention, GELU MLP.

KernelBench convention: `Model(*get_init_inputs())(*get_inputs())`.
"""

import torch
import torch.nn.functional as F
from torch import nn

BATCH, SEQ, DIM, HEADS = 4, 1024, 1024, 16
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_out = nn.Linear(4 * dim, dim)
        self.to(DTYPE)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM, dtype=DTYPE)]


def get_init_inputs():
    return [DIM, HEADS]
