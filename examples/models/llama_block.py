"""A Llama-style decoder block: RMSNorm, rotary embeddings, causal attention, SwiGLU MLP.

KernelBench convention: `Model(*get_init_inputs())(*get_inputs())`. Written the way eager
PyTorch code usually is (an RMSNorm that upcasts and normalizes in several small ops, a
rotate-half rotary), so the profile shows where time really goes.
"""

import torch
import torch.nn.functional as F
from torch import nn

DIM, HEADS, HIDDEN = 1024, 16, 2816
DTYPE = torch.bfloat16
# Tokens per forward. On a GPU, 8 x 2048: the forward is GPU-bound (on an H200, 1.69 ms of
# kernels in a 1.77 ms forward; benchmarks/results/model_llama_block_h200_run3.json). At
# 4 x 1024 it was 0.42 ms of kernels in a 0.7-1.1 ms forward, bound by Python and launches
# (run2), and faster kernels barely moved its wall time. On a CPU (CI, CPU workers) a small
# batch keeps a forward well under a second; the ops and their kinds are the same.
GPU_BATCH, GPU_SEQ = 8, 2048
CPU_BATCH, CPU_SEQ = 1, 128


def _batch_seq() -> tuple[int, int]:
    return (GPU_BATCH, GPU_SEQ) if torch.cuda.is_available() else (CPU_BATCH, CPU_SEQ)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


class Rotary(nn.Module):
    """Rotate-half rotary embedding; cos/sin are (SEQ, head_dim / 2) buffers."""

    def __init__(self, seq: int, head_dim: int, base: float = 10000.0):
        super().__init__()
        freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angle = torch.arange(seq, dtype=torch.float32)[:, None] * freq[None, :]
        self.register_buffer("cos", angle.cos())
        self.register_buffer("sin", angle.sin())

    def forward(self, x):  # x: (batch, seq, heads, head_dim)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = self.cos[None, :, None, :], self.sin[None, :, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, seq: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.rotary = Rotary(seq, self.head_dim)

    def forward(self, x):
        b, t, d = x.shape
        q = self.rotary(self.q_proj(x).view(b, t, self.heads, self.head_dim))
        k = self.rotary(self.k_proj(x).view(b, t, self.heads, self.head_dim))
        v = self.v_proj(x).view(b, t, self.heads, self.head_dim)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, seq: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, seq)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)
        self.to(DTYPE)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def get_inputs():
    batch, seq = _batch_seq()
    return [torch.randn(batch, seq, DIM, dtype=DTYPE)]


def get_init_inputs():
    return [DIM, HEADS, HIDDEN, _batch_seq()[1]]
