"""A decode step of a Llama-style decoder stack: a few new tokens against a KV cache.

KernelBench convention: `Model(*get_init_inputs())(*get_inputs())`. Inference the way a
server runs it token by token (or a few tokens at once, as speculative decoding verifies
them): each layer projects NEW_TOKENS rows, writes their keys and values into a static KV
cache at their positions (in place, as HF's StaticCache and gpt-fast do) and attends over the
CONTEXT cached tokens plus the new ones. With 1-16 rows every projection is a GEMM of small M:
the weights are streamed from memory once per step, and that stream is most of the time.

Sizes are Llama-2-7B's layer (dim 4096, 32 heads of 128, hidden 11008, MHA) on a GPU, two
layers (800 MB of bf16 weights, far more than L2 holds, as in a real model); tiny on a CPU
(CI, CPU workers). The forward is the same step every call (same positions, same cache
contents), so it can be timed, compiled and captured in a CUDA graph.
"""

import torch
import torch.nn.functional as F
from torch import nn

DTYPE = torch.bfloat16
GPU = {"dim": 4096, "heads": 32, "hidden": 11008, "layers": 2, "context": 1024}
CPU = {"dim": 256, "heads": 4, "hidden": 688, "layers": 2, "context": 32}
BATCH = 1
NEW_TOKENS = 8  # tokens decoded this step (1-16: one token, or a speculative draft)


def _config() -> dict:
    return GPU if torch.cuda.is_available() else CPU


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
    """Rotate-half rotary embedding at the new tokens' positions; cos/sin are (tokens, hd/2)."""

    def __init__(self, first: int, tokens: int, head_dim: int, base: float = 10000.0):
        super().__init__()
        freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        pos = torch.arange(first, first + tokens, dtype=torch.float32)
        angle = pos[:, None] * freq[None, :]
        self.register_buffer("cos", angle.cos())
        self.register_buffer("sin", angle.sin())

    def forward(self, x):  # x: (batch, tokens, heads, head_dim)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = self.cos[None, :, None, :], self.sin[None, :, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, context: int, tokens: int):
        super().__init__()
        self.heads, self.head_dim, self.context = heads, dim // heads, context
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.rotary = Rotary(context, tokens, self.head_dim)
        # The cache already holds `context` tokens (random here, as after a prefill); this
        # step writes positions context .. context + tokens - 1.
        shape = (BATCH, heads, context + tokens, self.head_dim)
        self.register_buffer("k_cache", torch.randn(shape) * 0.5)
        self.register_buffer("v_cache", torch.randn(shape))
        # New token i sees the cache and new tokens 0..i (causal within the step).
        seen = torch.arange(context + tokens)[None, :] <= context + torch.arange(tokens)[:, None]
        self.register_buffer("mask", seen)

    def forward(self, x):
        b, t, d = x.shape
        q = self.rotary(self.q_proj(x).view(b, t, self.heads, self.head_dim))
        k = self.rotary(self.k_proj(x).view(b, t, self.heads, self.head_dim))
        v = self.v_proj(x).view(b, t, self.heads, self.head_dim)
        end = self.context + t
        self.k_cache[:, :, self.context : end] = k.transpose(1, 2)
        self.v_cache[:, :, self.context : end] = v.transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), self.k_cache[:, :, :end], self.v_cache[:, :, :end],
            attn_mask=self.mask[:t, :end],
        )  # fmt: skip
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, context: int, tokens: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, context, tokens)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, layers: int, context: int, tokens: int):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(dim, heads, hidden, context, tokens) for _ in range(layers)
        )
        self.norm = RMSNorm(dim)
        for p in self.parameters():  # Linear's default init, scaled so activations stay ~1
            if p.dim() == 2:
                nn.init.normal_(p, std=p.shape[1] ** -0.5)
        self.to(DTYPE)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, NEW_TOKENS, _config()["dim"], dtype=DTYPE)]


def get_init_inputs():
    c = _config()
    return [c["dim"], c["heads"], c["hidden"], c["layers"], c["context"], NEW_TOKENS]
