"""A ViT-B/16 encoder block: pre-norm LayerNorm, bidirectional multi-head attention with biased
q/k/v and output projections, GELU (exact) MLP.

KernelBench convention: `Model(*get_init_inputs())(*get_inputs())`. On a GPU it has the
published ViT-Base/16 sizes (hidden 768, 12 heads, MLP 3072, LayerNorm eps 1e-6; Dosovitskiy
et al. 2021, Table 1, as torchvision's vit_b_16) at 224x224 images: 197 tokens (196 patches
and the class token) for a batch of 64; on a CPU a small config with the same structure. The
token count is odd on purpose, as in the model: no size of it is a multiple of a tile.
"""

import torch
import torch.nn.functional as F
from torch import nn

DTYPE = torch.bfloat16
GPU = {"dim": 768, "heads": 12, "mlp": 3072, "batch": 64, "tokens": 197}
CPU = {"dim": 192, "heads": 3, "mlp": 768, "batch": 2, "tokens": 65}
EPS = 1e-6


def _config() -> dict:
    return GPU if torch.cuda.is_available() else CPU


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim, eps=EPS)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim, eps=EPS)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)
        self.to(DTYPE)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln_2(x))))


def get_inputs():
    c = _config()
    return [torch.randn(c["batch"], c["tokens"], c["dim"], dtype=DTYPE)]


def get_init_inputs():
    c = _config()
    return [c["dim"], c["heads"], c["mlp"]]
