"""A GPT-J-6B-style block: attention and MLP in parallel off one LayerNorm, partial rotary
(the first 64 of each head's 256 dimensions, interleaved pairs), GELU (tanh) MLP with biases.

KernelBench convention: `Model(*get_init_inputs())(*get_inputs())`. On a GPU it has the
published GPT-J-6B sizes (hidden 4096, 16 heads, rotary_dim 64, inner 16384, LayerNorm eps
1e-5; EleutherAI/gpt-j-6b config.json) at 4 x 512 tokens; on a CPU a small config with the
same structure. The block is `x + attn(ln(x)) + mlp(ln(x))`: no second norm, and the MLP's
output projection and the attention's output projection both add into the residual.
"""

import torch
import torch.nn.functional as F
from torch import nn

DTYPE = torch.bfloat16
GPU = {"dim": 4096, "heads": 16, "rotary_dim": 64, "inner": 16384, "batch": 4, "seq": 512}
CPU = {"dim": 256, "heads": 4, "rotary_dim": 16, "inner": 1024, "batch": 1, "seq": 64}
EPS = 1e-5


def _config() -> dict:
    return GPU if torch.cuda.is_available() else CPU


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, rotary_dim: int, inner: int, seq: int):
        super().__init__()
        self.heads, self.head_dim, self.rotary_dim = heads, dim // heads, rotary_dim
        self.ln_1 = nn.LayerNorm(dim, eps=EPS)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)
        self.fc_in = nn.Linear(dim, inner)
        self.fc_out = nn.Linear(inner, dim)
        freq = 10000.0 ** (-torch.arange(0, rotary_dim, 2).float() / rotary_dim)
        angle = torch.arange(seq).float()[:, None] * freq[None, :]
        self.register_buffer("cos", angle.cos().repeat_interleave(2, dim=-1).to(DTYPE))
        self.register_buffer("sin", angle.sin().repeat_interleave(2, dim=-1).to(DTYPE))
        self.to(DTYPE)

    def _rotary(self, x):  # x: (batch, seq, heads, head_dim); only the first rotary_dim turn
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        cos, sin = self.cos[None, :, None, :], self.sin[None, :, None, :]
        return torch.cat([rot * cos + rotate_every_two(rot) * sin, rest], dim=-1)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln_1(x)
        q = self._rotary(self.q_proj(h).view(b, t, self.heads, self.head_dim))
        k = self._rotary(self.k_proj(h).view(b, t, self.heads, self.head_dim))
        v = self.v_proj(h).view(b, t, self.heads, self.head_dim)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        attn = self.out_proj(y.transpose(1, 2).reshape(b, t, d))
        mlp = self.fc_out(F.gelu(self.fc_in(h), approximate="tanh"))
        return x + attn + mlp


def get_inputs():
    c = _config()
    return [torch.randn(c["batch"], c["seq"], c["dim"], dtype=DTYPE)]


def get_init_inputs():
    c = _config()
    return [c["dim"], c["heads"], c["rotary_dim"], c["inner"], c["seq"]]
