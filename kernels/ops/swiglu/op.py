"""swiglu: out = (silu(x @ w_gate) * (x @ w_up)) @ w_down, the Llama feed-forward block.

Shape (M, D, F): x is (M, D) tokens, w_gate and w_up are (D, F), w_down is (F, D).
"""

from __future__ import annotations

import math

import torch

from kernels.problem import Op, OutputSpec, Tolerance


class SwigluOp(Op):
    name = "swiglu"
    dims = ("M", "D", "F")
    dtypes = ("fp16", "bf16")
    description = "fused SwiGLU MLP: gate/up projections, silu-gating, down projection"

    def input_shapes(self, problem):
        m, d, f = problem.shape
        return [(m, d), (d, f), (d, f), (f, d)]

    def output_spec(self, problem):
        m, d, _ = problem.shape
        return OutputSpec((m, d), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        m, d, f = problem.shape
        dtype = problem.torch_dtype

        def randn(shape, scale):
            return (torch.randn(shape, generator=gen, device=device) * scale).to(dtype)

        # Scaled so that gate, up and out are all ~N(0, 1) whatever D and F are.
        return (
            randn((m, d), 1.0),
            randn((d, f), d**-0.5),
            randn((d, f), d**-0.5),
            randn((f, d), f**-0.5),
        )

    def adversarial_inputs(self, problem, *, seed, device):
        x, wg, wu, wd = self.make_inputs(problem, seed=seed, device=device)
        d = problem.shape[1]
        # Gates spread wide and shifted negative, so silu runs from saturated-off to linear;
        # w_down shrinks by the same factor so the output stays ~unit scale (the tolerance's).
        gates = (wg.float() * 3 - 2 * d**-0.5).to(wg.dtype)
        return {"wide_gates": (x, gates, wu, (wd.float() / 3).to(wd.dtype))}

    def reference(self, problem, x, w_gate, w_up, w_down):
        x = x.double()
        h = torch.nn.functional.silu(x @ w_gate.double()) * (x @ w_up.double())
        return h @ w_down.double()

    def baseline(self, problem, x, w_gate, w_up, w_down, *, out):
        h = torch.nn.functional.silu(x @ w_gate) * (x @ w_up)
        torch.matmul(h, w_down, out=out)

    def flops(self, problem):
        m, d, f = problem.shape
        return 6 * m * d * f

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        return elt * sum(
            math.prod(s) for s in self.input_shapes(problem) + [self.output_spec(problem).shape]
        )

    def tolerance(self, problem):
        # The hidden activation is rounded to the input dtype between the two matmuls.
        if problem.dtype == "bf16":
            return Tolerance(rtol=3e-2, atol=3e-2)
        return Tolerance(rtol=6e-3, atol=6e-3)

    def sweep(self, problem):
        m, d, f = problem.shape
        shapes = [(1, 16, 16), (3, 24, 40), (17, 64, 96), (1, d, f), (m, d, f)]
        return [problem.with_shape(*s) for s in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.swiglu.families import FAMILIES

        return list(FAMILIES)
