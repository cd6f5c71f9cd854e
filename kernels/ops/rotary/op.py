"""rotary: rotate-half rotary embedding of x (T, H, D) by per-token cos/sin of shape (T, D/2).

    y[..., :D/2] = x1 * cos - x2 * sin        y[..., D/2:] = x2 * cos + x1 * sin
with x1 = x[..., :D/2], x2 = x[..., D/2:] (GPT-NeoX / Llama layout). D must be even.
"""

from __future__ import annotations

import math

import torch

from kernels.problem import Op, OutputSpec, ProblemError
from kernels.rowwise import low_precision_tolerance


class RotaryOp(Op):
    name = "rotary"
    dims = ("T", "H", "D")
    description = "rotary position embedding, rotate-half layout"

    def validate(self, problem):
        super().validate(problem)
        if problem.shape[2] % 2:
            raise ProblemError(f"D={problem.shape[2]}: the head dim must be even")

    def input_shapes(self, problem):
        t, h, d = problem.shape
        return [(t, h, d), (t, d // 2), (t, d // 2)]

    def output_spec(self, problem):
        return OutputSpec(tuple(problem.shape), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        t, h, d = problem.shape
        x = torch.randn((t, h, d), generator=gen, device=device).to(problem.torch_dtype)
        pos = torch.arange(t, device=device, dtype=torch.float32)[:, None]
        freq = 10000.0 ** (-torch.arange(d // 2, device=device, dtype=torch.float32) * 2 / d)
        angle = pos * freq[None, :] + torch.rand((1, 1), generator=gen, device=device)
        return x, angle.cos().to(problem.torch_dtype), angle.sin().to(problem.torch_dtype)

    def adversarial_inputs(self, problem, *, seed, device):
        x, cos, sin = self.make_inputs(problem, seed=seed, device=device)
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        big = (1000 * torch.randn(x.shape, generator=gen, device=device)).to(x.dtype)
        halves = torch.cat([torch.ones_like(x[..., ::2]), -torch.ones_like(x[..., ::2])], -1)
        return {"large_values": (big, cos, sin), "signed_halves": (halves.contiguous(), cos, sin)}

    def reference(self, problem, x, cos, sin):
        x = x.double()
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos.double()[:, None, :], sin.double()[:, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def baseline(self, problem, x, cos, sin, *, out):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1, out=out)

    def flops(self, problem):
        return 3 * math.prod(problem.shape)

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        t, h, d = problem.shape
        return elt * (2 * t * h * d + t * d)

    def tolerance(self, problem):
        return low_precision_tolerance(problem)

    def sweep(self, problem):
        t, h, d = problem.shape
        shapes = [(1, 1, 2), (3, 5, 6), (17, 3, 64), (5, 32, 128), (t, h, d)]
        return [problem.with_shape(*s) for s in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.rotary.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        from kernels.ops.rotary.starting_points import starting_points

        return starting_points(problem)
