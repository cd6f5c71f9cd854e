"""A three-layer MLP with ReLU and a softmax head (KernelBench convention)."""

import torch
from torch import nn

BATCH, IN, HIDDEN, OUT = 4096, 1024, 4096, 1000
DTYPE = torch.bfloat16


class Model(nn.Module):
    def __init__(self, d_in: int, hidden: int, d_out: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, d_out),
            nn.Softmax(dim=-1),
        )
        self.to(DTYPE)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(BATCH, IN, dtype=DTYPE)]


def get_init_inputs():
    return [IN, HIDDEN, OUT]
