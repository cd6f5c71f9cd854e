"""swiglu_gate: out = silu(x @ w_gate^T) * (x @ w_up^T), the part of a SwiGLU MLP before its down
projection: two nn.Linear layers (no bias) on the same input, gated.

Shape (M, N, K): x is (M, K) tokens; w_gate and w_up are (N, K), nn.Linear's weight layout; out
is (M, N). Fused, x is read once for both products, the two (M, N) intermediates never reach
memory, and the gating happens in the GEMM's epilogue. The down projection stays a matmul
problem of its own (kernels/ops/swiglu is the whole MLP with (K, N) weights).
"""

from __future__ import annotations

import math

import torch

from kernels.problem import Op, OutputSpec, Tolerance


class SwigluGateOp(Op):
    name = "swiglu_gate"
    dims = ("M", "N", "K")
    dtypes = ("fp16", "bf16")
    description = "silu(x @ w_gate^T) * (x @ w_up^T): SwiGLU gate and up projections, one GEMM"

    def input_shapes(self, problem):
        m, n, k = problem.shape
        return [(m, k), (n, k), (n, k)]

    def output_spec(self, problem):
        m, n, _ = problem.shape
        return OutputSpec((m, n), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        m, n, k = problem.shape
        dtype = problem.torch_dtype

        def randn(shape, scale):
            return (torch.randn(shape, generator=gen, device=device) * scale).to(dtype)

        # Gate and up ~N(0, 1) whatever K is: silu sees both of its regimes.
        return randn((m, k), 1.0), randn((n, k), k**-0.5), randn((n, k), k**-0.5)

    def adversarial_inputs(self, problem, *, seed, device):
        x, wg, wu = self.make_inputs(problem, seed=seed, device=device)
        k = problem.shape[2]
        # Gates spread wide and shifted negative: silu runs from saturated-off to linear.
        wide = (wg.float() * 4 - 3 * k**-0.5).to(wg.dtype)
        # 0/1 entries: exact sums, so a slip in which rows feed which product shows.
        gen = torch.Generator(device=device).manual_seed(seed + 7)
        ints = [
            torch.randint(0, 2, t.shape, generator=gen, device=device).to(t.dtype)
            for t in (x, wg, wu)
        ]
        return {"wide_gates": (x, wide, wu), "zero_one": tuple(ints)}

    def reference(self, problem, x, w_gate, w_up):
        x = x.double()
        gate = x @ w_gate.double().T
        return torch.nn.functional.silu(gate) * (x @ w_up.double().T)

    def baseline(self, problem, x, w_gate, w_up, *, out):
        gate = torch.nn.functional.linear(x, w_gate)
        torch.mul(torch.nn.functional.silu(gate), torch.nn.functional.linear(x, w_up), out=out)

    def flops(self, problem):
        m, n, k = problem.shape
        return 4 * m * n * k

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        shapes = self.input_shapes(problem) + [self.output_spec(problem).shape]
        return elt * sum(math.prod(s) for s in shapes)

    def unfused_bytes(self, problem):
        # silu(gate) * up: reads both GEMMs' outputs, writes the product.
        m, n, _ = problem.shape
        return 3 * m * n * problem.torch_dtype.itemsize

    def tolerance(self, problem):
        # Two GEMMs' rounding meet in a product (PyTorch rounds gate, up and silu(gate) to
        # the dtype on the way; a fused kernel rounds once): matmul's bound, a little wider.
        if problem.dtype == "bf16":
            return Tolerance(rtol=2.4e-2, atol=1.6e-2)
        return Tolerance(rtol=6e-3, atol=3e-3)

    def sweep(self, problem):
        m, n, k = problem.shape
        shapes = [
            (1, 1, 1),
            (3, 5, 7),  # odd everything, K below any tile
            (17, 33, 65),  # one past powers of two
            (1, n, k),  # a decode row against the workload's weights
            (max(1, m - 1), n, k + 3),  # odd M, unaligned K
            (m, n, k),
        ]
        return [problem.with_shape(*s) for s in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.swiglu_gate.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        # The dual-GEMM grid for the problem's regime (kernels/dual_gemm.py); not measured
        # yet: the model job's screen times them on the GPU.
        return [(f.name, p) for f in self.families() for p in f.starting_points(problem)]
