"""swiglu_gate: out = silu(x @ w_gate^T) * (x @ w_up^T), the part of a SwiGLU MLP before its down
projection: two nn.Linear layers (no bias) on the same input, gated.

Shape (M, N, K): x is (M, K) tokens; w_gate and w_up are (N, K), nn.Linear's weight layout; out
is (M, N). Fused, x is read once for both products, the two (M, N) intermediates never reach
memory, and the gating happens in the GEMM's epilogue. The down projection stays a matmul
problem of its own (kernels/ops/swiglu is the whole MLP with (K, N) weights).

Layout "i8" takes the two weights as one (2N, K) matrix, interleaved in groups of 8 rows: rows
16g..16g+7 are w_gate[8g..8g+7], rows 16g+8..16g+15 are w_up[8g..8g+7] (`interleave`; N a
multiple of 8). A model's weights are constant, so the interleave is a one-time copy at load
time, and the pair becomes one GEMM of (M, 2N, K) whose tiles hold each output's gate and up
columns side by side: the CUTLASS family gates them in its register epilogue
(families/cutlass_sm90.cu). Its baseline is that GEMM with PyTorch (F.linear) and the gating as
a second pass, what a model with concatenated gate/up weights runs.

Layout "i8+rowscale" is an RMSNorm folded into the pair (kernels/row_scale.py): the op takes
h, the interleaved weight times the norm's weight and s, a float32 (M,) row scale:

    out = silu(s * (x @ w_gate^T)) * (s * (x @ w_up^T))

Its baseline scales the rows (the norm's last pass), then runs the "i8" baseline.
"""

from __future__ import annotations

import math

import torch

from kernels import row_scale, zero_one
from kernels.problem import Op, OutputSpec, ProblemError, Tolerance

INTERLEAVED = "i8"
ROW_SCALE = f"i8+{row_scale.TAG}"
GROUP = 8  # rows of gate, then the same rows of up, in an interleaved weight


def is_interleaved(problem) -> bool:
    """The layouts that take the two weights as one interleaved matrix ("i8", "i8+rowscale")."""
    return problem.layout in (INTERLEAVED, ROW_SCALE)


def has_row_scale(problem) -> bool:
    return problem.layout == ROW_SCALE


def layout_constants(problem) -> dict[str, bool]:
    """What a Triton family's rendered module fixes from the layout (its kernels read both)."""
    return {"INTERLEAVED": is_interleaved(problem), "ROW_SCALE": has_row_scale(problem)}


def interleave(w_gate: torch.Tensor, w_up: torch.Tensor, group: int = GROUP) -> torch.Tensor:
    """(2N, K): each `group` rows of w_gate followed by the same rows of w_up."""
    n, k = w_gate.shape
    pairs = torch.stack(
        (w_gate.reshape(n // group, group, k), w_up.reshape(n // group, group, k)), 1
    )
    return pairs.reshape(2 * n, k).contiguous()


def deinterleave(w: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """(w_gate, w_up) views of an interleaved (2N, K) weight."""
    n2, k = w.shape
    pairs = w.view(n2 // (2 * group), 2, group, k)
    return pairs[:, 0].reshape(-1, k), pairs[:, 1].reshape(-1, k)


class SwigluGateOp(Op):
    name = "swiglu_gate"
    dims = ("M", "N", "K")
    dtypes = ("fp16", "bf16")
    description = "silu(x @ w_gate^T) * (x @ w_up^T): SwiGLU gate and up projections, one GEMM"
    layouts = ("", INTERLEAVED, ROW_SCALE)

    def layout_note(self):
        return (
            "i8: the gate and up weights as one (2N, K) matrix interleaved in groups of 8 rows; "
            "i8+rowscale: the same, each output row scaled by a float32 (M,) input before the "
            "gating (an RMSNorm folded in)"
        )

    def validate(self, problem):
        super().validate(problem)
        if is_interleaved(problem) and problem.shape[1] % GROUP:
            raise ProblemError(
                f"layout {problem.layout} interleaves groups of {GROUP} rows: "
                f"N must be a multiple of {GROUP}"
            )

    def input_shapes(self, problem):
        m, n, k = problem.shape
        if is_interleaved(problem):
            return [(m, k), (2 * n, k)] + ([(m,)] if has_row_scale(problem) else [])
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
        x, w_gate, w_up = randn((m, k), 1.0), randn((n, k), k**-0.5), randn((n, k), k**-0.5)
        if not has_row_scale(problem):
            return self._as_layout(problem, x, w_gate, w_up)
        # Rows of a residual stream and each one's RMS scale: the scaled rows are ~N(0, 1).
        x = row_scale.spread_rows(x, gen)
        return self._as_layout(problem, x, w_gate, w_up, row_scale.rms_scale(x))

    def _as_layout(self, problem, x, w_gate, w_up, scale=None):
        if has_row_scale(problem):
            return x, interleave(w_gate, w_up), scale
        if is_interleaved(problem):
            return x, interleave(w_gate, w_up)
        return x, w_gate, w_up

    def _separate(self, problem, inputs):
        """(x, w_gate, w_up, row scale or None) whatever the layout."""
        if is_interleaved(problem):
            x, w, *scale = inputs
            return (x, *deinterleave(w), scale[0] if scale else None)
        return (*inputs, None)

    def adversarial_inputs(self, problem, *, seed, device):
        inputs = self.make_inputs(problem, seed=seed, device=device)
        x, wg, wu, scale = self._separate(problem, inputs)
        m, _, k = problem.shape
        # Gates spread wide and shifted negative: silu runs from saturated-off to linear.
        wide = (wg.float() * 4 - 3 * k**-0.5).to(wg.dtype)
        # 0/1 entries: exact sums, so a slip in which rows feed which product shows. The output
        # is about (scale * ones in x's row)**2: fp16 rows get fewer ones and row scales up to
        # 4, so that it stays inside the dtype (kernels/zero_one.py).
        gen = torch.Generator(device=device).manual_seed(seed + 7)
        top = 2 if x.dtype == torch.float16 else row_scale.TOP
        reach = 1 if scale is None else 2**top
        ones = math.isqrt(int(torch.finfo(x.dtype).max) // 2) // reach
        ints = (zero_one.rows(x, gen, at_most=ones), zero_one.like(wg, gen), zero_one.like(wu, gen))
        twos = None if scale is None else row_scale.powers_of_two(m, gen, device, top=top)
        return {
            "wide_gates": self._as_layout(problem, x, wide, wu, scale),
            "zero_one": self._as_layout(problem, *ints, twos),
        }

    def reference(self, problem, *inputs):
        x, w_gate, w_up, scale = self._separate(problem, inputs)
        x = x.double()
        gate, up = x @ w_gate.double().T, x @ w_up.double().T
        if scale is not None:
            gate, up = gate * scale.double()[:, None], up * scale.double()[:, None]
        return torch.nn.functional.silu(gate) * up

    def baseline(self, problem, *inputs, out):
        if is_interleaved(problem):  # one GEMM, then the gating over its (M, 2N)
            x, w, *scale = inputs
            if scale:  # the norm's last pass
                x = row_scale.scaled_rows(x, scale[0])
            m, n = out.shape
            both = torch.nn.functional.linear(x, w).view(m, n // GROUP, 2, GROUP)
            torch.mul(
                torch.nn.functional.silu(both[:, :, 0]), both[:, :, 1], out=out.view(m, -1, GROUP)
            )
            return
        x, w_gate, w_up = inputs
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
        # silu(gate) * up: reads both GEMMs' outputs, writes the product; folded, the norm's
        # normalized rows too (written, where the fold writes a float per row).
        m, n, k = problem.shape
        norm = m * k if has_row_scale(problem) else 0
        return (3 * m * n + norm) * problem.torch_dtype.itemsize

    def tolerance(self, problem):
        # Two GEMMs' rounding meet in a product (PyTorch rounds gate, up and silu(gate) to
        # the dtype on the way; a fused kernel rounds once): matmul's bound, a little wider.
        if problem.dtype == "bf16":
            return Tolerance(rtol=2.4e-2, atol=1.6e-2)
        return Tolerance(rtol=6e-3, atol=3e-3)

    def sweep(self, problem):
        m, n, k = problem.shape
        if is_interleaved(problem):  # N stays a multiple of the group
            shapes = [
                (1, 8, 1),
                (3, 8, 7),
                (17, 40, 65),
                (1, n, k),
                (max(1, m - 1), n, k + 3),
                (m, n, k),
            ]
            return [problem.with_shape(*s) for s in dict.fromkeys(shapes)]
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
