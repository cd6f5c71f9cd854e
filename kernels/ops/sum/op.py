"""sum: out[m] = sum(x[m, :]) accumulated and returned in fp32, for x of shape (M, N)."""

from __future__ import annotations

import torch

from kernels.problem import OutputSpec, Tolerance
from kernels.rowwise import RowwiseOp


class SumOp(RowwiseOp):
    name = "sum"
    description = "sum over the last dim, fp32 result"

    def output_spec(self, problem):
        return OutputSpec((problem.shape[0],), torch.float32)

    def reference(self, problem, x):
        return x.double().sum(-1)

    def baseline(self, problem, x, *, out):
        torch.sum(x, dim=-1, dtype=torch.float32, out=out)

    def flops(self, problem):
        m, n = problem.shape
        return m * n

    def tolerance(self, problem):
        # fp32 summation order: error grows with the row length, relative to the sum of |x|.
        n = problem.shape[1]
        return Tolerance(rtol=1e-5, atol=1e-6 * n + 1e-5)

    def families(self):
        from kernels.ops.sum.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        from kernels.ops.sum.starting_points import starting_points

        return starting_points(problem)
