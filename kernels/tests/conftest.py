"""Kernels' tests run Triton candidates in the CPU interpreter unless a GPU is visible."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
