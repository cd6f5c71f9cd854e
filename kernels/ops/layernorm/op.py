"""layernorm: y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim of (M, N)."""

from __future__ import annotations

import torch

from kernels.rowwise import NormOp

EPS = 1e-5  # the op's own; a problem's layout may name another (NormOp)


class LayernormOp(NormOp):
    name = "layernorm"
    EPS = EPS
    vectors = ("weight", "bias")
    description = "layer normalization over the last dim with weight and bias"

    def reference(self, problem, x, weight, bias):
        x = x.double()
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps(problem)) * weight.double() + bias.double()

    def baseline(self, problem, x, weight, bias, *, out):
        eps = self.eps(problem)
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    def flops(self, problem):
        m, n = problem.shape
        return 8 * m * n

    def families(self):
        from kernels.ops.layernorm.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        from kernels.ops.layernorm.starting_points import starting_points

        return starting_points(problem)
