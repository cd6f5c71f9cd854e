"""rmsnorm: y = x / sqrt(mean(x**2, -1) + eps) * weight, rows of x of shape (M, N)."""

from __future__ import annotations

import torch

from kernels.rowwise import NormOp

EPS = 1e-6  # the op's own; a problem's layout may name another (NormOp)


class RmsnormOp(NormOp):
    name = "rmsnorm"
    EPS = EPS
    vectors = ("weight",)
    description = "RMS normalization over the last dim, times a weight (Llama style)"

    def reference(self, problem, x, weight):
        x = x.double()
        return (
            x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps(problem)) * weight.double()
        )

    def baseline(self, problem, x, weight, *, out):
        # What a model's eager RMSNorm does: upcast, normalize, cast back, scale.
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps(problem))
        torch.mul(y.to(x.dtype), weight, out=out)

    def flops(self, problem):
        m, n = problem.shape
        return 4 * m * n

    def families(self):
        from kernels.ops.rmsnorm.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        from kernels.ops.rmsnorm.starting_points import starting_points

        return starting_points(problem)
