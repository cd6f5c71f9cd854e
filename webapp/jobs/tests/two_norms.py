"""Test model: two RMSNorms at different widths, so a model job gets two planned problems
(rmsnorm/32x64/fp32 and rmsnorm/32x128/fp32) even in a CPU profile."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = 1e-6

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype
        ) * self.weight


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.wide_norm = RMSNorm(hidden)

    def forward(self, x):
        return self.wide_norm(torch.relu(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64, 128]
