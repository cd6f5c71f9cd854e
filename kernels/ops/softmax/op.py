"""softmax: y = exp(x - max) / sum(exp(x - max)) over the last dim of x (M, N)."""

from __future__ import annotations

import torch

from kernels.rowwise import RowwiseOp


class SoftmaxOp(RowwiseOp):
    name = "softmax"
    description = "softmax over the last dim"

    def reference(self, problem, x):
        return torch.softmax(x.double(), dim=-1)

    def baseline(self, problem, x, *, out):
        torch.softmax(x, dim=-1, out=out)

    def flops(self, problem):
        m, n = problem.shape
        return 5 * m * n

    def families(self):
        from kernels.ops.softmax.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        from kernels.ops.softmax.starting_points import starting_points

        return starting_points(problem)
