"""A decode step of a Llama-3-8B-style decoder stack: grouped-query attention over a KV cache.

KernelBench convention: `Model(*get_init_inputs())(*get_inputs())`. Each layer projects
NEW_TOKENS rows, writes their keys and values into a static cache that holds only the 8
key/value heads (in place, as HF's StaticCache does), and attends with 32 query heads: each
cached head serves 4 of them. The attention repeats the cached heads the way HF's Llama code
does (`repeat_kv`: a new axis, expand, reshape), which copies the whole cache 4 times over
on every step before SDPA reads it.

Sizes are Llama-3-8B's published config (hidden 4096, 32 heads of 128, 8 key/value heads,
intermediate 14336, rope theta 500000, RMSNorm eps 1e-5; meta-llama/Meta-Llama-3-8B
config.json), two layers and 1024 cached tokens, bf16, on a GPU; tiny on a CPU (CI). The
forward is the same step every call, so it can be timed, compiled and captured in a CUDA graph.
"""

import torch
import torch.nn.functional as F
from torch import nn

DTYPE = torch.bfloat16
GPU = {"dim": 4096, "heads": 32, "kv_heads": 8, "hidden": 14336, "layers": 2, "context": 1024}
CPU = {"dim": 256, "heads": 4, "kv_heads": 2, "hidden": 512, "layers": 2, "context": 32}
BATCH = 1
NEW_TOKENS = 4
ROPE_THETA = 500_000.0
EPS = 1e-5


def _config() -> dict:
    return GPU if torch.cuda.is_available() else CPU


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = EPS

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        h = hidden_states.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def repeat_kv(hidden_states, n_rep: int):
    """(batch, kv_heads, seq, head_dim) -> (batch, kv_heads * n_rep, seq, head_dim)."""
    batch, kv_heads, seq, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq, head_dim)
    return hidden_states.reshape(batch, kv_heads * n_rep, seq, head_dim)


class LlamaRotaryEmbedding(nn.Module):
    """Rotate-half rotary at the new tokens' positions; x is (batch, tokens, heads, head_dim)."""

    def __init__(self, first: int, tokens: int, head_dim: int):
        super().__init__()
        inv_freq = ROPE_THETA ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angle = torch.arange(first, first + tokens, dtype=torch.float32)[:, None] * inv_freq
        self.register_buffer("cos", angle.cos())
        self.register_buffer("sin", angle.sin())

    def forward(self, x):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = self.cos[None, :, None, :], self.sin[None, :, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, context: int, tokens: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.context = context
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(context, tokens, self.head_dim)
        # The cache holds `context` tokens already (random here, as after a prefill).
        shape = (BATCH, kv_heads, context + tokens, self.head_dim)
        self.register_buffer("key_cache", torch.randn(shape) * 0.5)
        self.register_buffer("value_cache", torch.randn(shape))
        seen = torch.arange(context + tokens)[None, :] <= context + torch.arange(tokens)[:, None]
        self.register_buffer("causal_mask", seen)

    def forward(self, hidden_states):
        b, t, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(hidden_states).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(hidden_states).view(b, t, self.kv_heads, self.head_dim)
        q, k = self.rotary_emb(q), self.rotary_emb(k)
        end = self.context + t
        self.key_cache[:, :, self.context : end] = k.transpose(1, 2)
        self.value_cache[:, :, self.context : end] = v.transpose(1, 2)
        n_rep = self.heads // self.kv_heads
        keys = repeat_kv(self.key_cache[:, :, :end], n_rep)
        values = repeat_kv(self.value_cache[:, :, :end], n_rep)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys, values, attn_mask=self.causal_mask[:t, :end]
        )
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden, context, tokens):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(dim)
        self.self_attn = LlamaAttention(dim, heads, kv_heads, context, tokens)
        self.post_attention_layernorm = LlamaRMSNorm(dim)
        self.mlp = LlamaMLP(dim, hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden, layers, context, tokens):
        super().__init__()
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(dim, heads, kv_heads, hidden, context, tokens) for _ in range(layers)
        )
        self.norm = LlamaRMSNorm(dim)
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
    return [c["dim"], c["heads"], c["kv_heads"], c["hidden"], c["layers"], c["context"], NEW_TOKENS]
