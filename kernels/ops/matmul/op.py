"""matmul: C = epilogue(A @ B) with fp16/bf16 inputs, fp32 accumulation, output in the input dtype.

Shape (M, N, K). The layout names how A and B are stored, row-major:
  "NN": a is (M, K), b is (K, N)         "NT": b is stored transposed, (N, K) (nn.Linear weight)
  "TN": a is stored transposed, (K, M)
An optional fused epilogue follows with "+": "+bias" adds a bias of shape (N,), and
"+bias+relu" / "+bias+silu" / "+bias+gelu" (tanh form) / "+bias+gelu_erf" (exact, erf form:
nn.GELU()'s default) apply an activation after it. "+res" / "+bias+res" add a residual of
shape (M, N), the last input, after the bias: a transformer's `x + o_proj(h)` and
`x + down_proj(h)` written by the GEMM itself, where PyTorch writes the product and a second
pass reads it back.

fp32 is taken as a model that allows TF32 runs it (torch.backends.cuda.matmul.allow_tf32, or
torch.set_float32_matmul_precision("high")): its layout ends in "+tf32", the baseline runs
cuBLAS with TF32 on, kernels use TF32 tensor cores (tl.dot's default for fp32 inputs) and the
tolerance is TF32's. A full-precision fp32 GEMM is left to cuBLAS (no layout names it).

What TF32 computes is defined as cuBLAS computes it: each operand rounded to TF32 to nearest
(`to_tf32`), the products summed in fp32. The tensor cores themselves truncate (they drop the
low 13 mantissa bits), which on inputs that cancel lands 100x further from cuBLAS than cuBLAS
is from this reference (H100, 2026-11-28: benchmarks/results/tf32_rounding_h100.json), so the
Triton families round their operands first (snippets.TF32_FN) and the reference rounds too.
"""

from __future__ import annotations

import contextlib
import math

import torch

from kernels.problem import Family, Op, OutputSpec, Problem, ProblemError, Tolerance

OPERAND_LAYOUTS = ("NN", "NT", "TN")
EPILOGUES = (
    "",
    "+bias",
    "+bias+relu",
    "+bias+silu",
    "+bias+gelu",
    "+bias+gelu_erf",
    "+res",
    "+bias+res",
)
RESIDUAL = "res"
ACTIVATIONS = ("none", "relu", "silu", "gelu", "gelu_erf")
TF32 = "+tf32"


def is_tf32(layout: str) -> bool:
    return layout.endswith(TF32)


@contextlib.contextmanager
def tf32_matmuls():
    """fp32 GEMMs (cuBLAS's, Inductor's) as TF32 inside the block, as the model runs them."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def to_tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 rounded to TF32's 10 mantissa bits, to nearest with ties away from zero (cuBLAS's
    rounding; PTX cvt.rna.tf32.f32): add half of the dropped part, then drop it."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).view(t.shape)


def split_layout(layout: str) -> tuple[str, bool, str]:
    """("NT+bias+gelu") -> ("NT", True, "gelu")."""
    parts = layout.split("+")
    return parts[0], "bias" in parts[1:], next((p for p in parts[1:] if p in ACTIVATIONS), "none")


def has_residual(layout: str) -> bool:
    """ "NT+bias+res" -> True: the last input is a residual (M, N) added to the output."""
    return RESIDUAL in layout.split("+")[1:]


def apply_activation(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "relu":
        return torch.relu(x)
    if activation == "silu":
        return torch.nn.functional.silu(x)
    if activation == "gelu":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if activation == "gelu_erf":
        return torch.nn.functional.gelu(x)
    return x


class MatmulOp(Op):
    name = "matmul"
    dims = ("M", "N", "K")
    dtypes = ("fp16", "bf16", "fp32")
    layouts = tuple(ab + epi for epi in EPILOGUES for ab in OPERAND_LAYOUTS)
    description = "C = A @ B (+ bias, activation, residual); fp32 accumulation; fp32 inputs as TF32"

    def layout_note(self) -> str:
        return f"fp32 takes any of them followed by {TF32} (TF32, as the model allows it)"

    def layout_error(self, layout: str) -> str | None:
        return super().layout_error(layout.removesuffix(TF32))

    def numerics(self, problem):
        return tf32_matmuls() if is_tf32(problem.layout) else super().numerics(problem)

    def validate(self, problem):
        super().validate(problem)
        if problem.dtype == "fp32" and not is_tf32(problem.layout):
            raise ProblemError(
                f"an fp32 matmul is optimized as TF32 only: write {problem.layout}{TF32} if the "
                "model allows TF32 (torch.backends.cuda.matmul.allow_tf32); a full-precision "
                "fp32 GEMM is cuBLAS's"
            )
        if problem.dtype != "fp32" and is_tf32(problem.layout):
            raise ProblemError(f"{TF32} is for fp32 inputs, not {problem.dtype}")

    def input_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        m, n, k = problem.shape
        operands, has_bias, _ = split_layout(problem.layout)
        a = (k, m) if operands[0] == "T" else (m, k)
        b = (n, k) if operands[1] == "T" else (k, n)
        shapes: list[tuple[int, ...]] = [a, b]
        if has_bias:
            shapes.append((n,))
        if has_residual(problem.layout):
            shapes.append((m, n))
        return shapes

    def output_spec(self, problem: Problem) -> OutputSpec:
        m, n, _ = problem.shape
        return OutputSpec((m, n), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        k = problem.shape[2]
        # Scale the operands so that every product element is ~N(0, 1) whatever K is; the
        # bias and the residual are N(0, 1) themselves.
        scale = k**-0.25
        tensors = []
        for i, shape in enumerate(self.input_shapes(problem)):
            t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
            tensors.append((t * (scale if i < 2 else 1.0)).to(problem.torch_dtype))
        return tuple(tensors)

    def adversarial_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        shapes = self.input_shapes(problem)
        dtype = problem.torch_dtype

        def ints(shape):  # 0/1 entries: exact sums, any indexing slip shows (CUDA-L2's check)
            return torch.randint(0, 2, shape, generator=gen, device=device).to(dtype)

        operands, _, _ = split_layout(problem.layout)

        def ranged(shape, index, span):
            # Rows of A (M) and columns of B (N) spread over 2**-span .. 2**span: a wide range
            # inside one tile, but not inside one dot product (whose fp32 sum would then be
            # dominated by a few terms, a test of the accumulator rather than of the kernel).
            t = torch.randn(shape, generator=gen, device=device)
            outer_dim = (
                (0 if operands[0] == "N" else 1) if index == 0 else (1 if operands[1] == "N" else 0)
            )
            exps = torch.randint(-span, span + 1, (shape[outer_dim],), generator=gen, device=device)
            scale = torch.pow(2.0, exps.float())
            scale = scale[:, None] if outer_dim == 0 else scale[None, :]
            return (t * scale * problem.shape[2] ** -0.25).to(dtype)

        cases = {
            "zero_one": tuple(ints(s) for s in shapes[:2]),
            "dynamic_range": (ranged(shapes[0], 0, 6), ranged(shapes[1], 1, 4)),
        }
        # The bias and the residual: large, so the epilogue's adds and activation matter (a
        # residual's rows as far apart as A's, which a reduced-precision add would lose).
        extra = []
        if split_layout(problem.layout)[1]:
            extra.append((4 * torch.randn(shapes[2], generator=gen, device=device)).to(dtype))
        if has_residual(problem.layout):
            rows = torch.randint(-6, 7, (shapes[-1][0], 1), generator=gen, device=device)
            residual = torch.randn(shapes[-1], generator=gen, device=device)
            extra.append((residual * torch.pow(2.0, rows.float())).to(dtype))
        return {name: pair + tuple(extra) for name, pair in cases.items()}

    def _operands(self, problem, a, b):
        operands, _, _ = split_layout(problem.layout)
        return (a.T if operands[0] == "T" else a), (b.T if operands[1] == "T" else b)

    def reference(self, problem, *inputs):
        a, b = self._operands(problem, inputs[0], inputs[1])
        if is_tf32(problem.layout):
            a, b = to_tf32(a), to_tf32(b)
        _, has_bias, activation = split_layout(problem.layout)
        c = a.double() @ b.double()
        if has_bias:
            c = c + inputs[2].double()
        c = apply_activation(c, activation)
        return c + inputs[-1].double() if has_residual(problem.layout) else c

    def baseline(self, problem, *inputs, out):
        a, b = self._operands(problem, inputs[0], inputs[1])
        _, has_bias, activation = split_layout(problem.layout)
        residual = has_residual(problem.layout)
        with self.numerics(problem):
            if has_bias:
                torch.addmm(inputs[2], a, b, out=out)
            elif residual:  # cuBLAS adds it in its own epilogue (beta = 1)
                torch.addmm(inputs[-1], a, b, out=out)
                return
            else:
                torch.matmul(a, b, out=out)
        # A model's activation writes a new tensor (one pass), and its residual add another:
        # in place on that tensor, the add moves the same bytes and allocates nothing.
        result = apply_activation(out, activation)  # `out` itself without one
        if residual:  # after the bias: F.linear(x, w, b) + residual, as a model writes it
            result.add_(inputs[-1])
        return None if result is out else result

    def flops(self, problem):
        m, n, k = problem.shape
        return 2 * m * n * k

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        shapes = self.input_shapes(problem) + [self.output_spec(problem).shape]
        return elt * sum(math.prod(s) for s in shapes)

    def unfused_bytes(self, problem):
        # The activation's pass over C (cuBLAS adds a bias in its epilogue, not an
        # activation); a residual's add writes the product and reads it back, where the
        # fused GEMM reads the residual it would have read anyway.
        m, n, _ = problem.shape
        passes = (split_layout(problem.layout)[2] != "none") + has_residual(problem.layout)
        return 2 * m * n * problem.torch_dtype.itemsize * passes

    def tolerance(self, problem):
        # One output rounding (bf16: 2**-9, fp16: 2**-12 relative) plus fp32 summation-order
        # differences; the activation adds a little more in low precision.
        if problem.dtype == "bf16":
            return Tolerance(rtol=1.6e-2, atol=1e-2)
        if problem.dtype == "fp32":
            # TF32 rounds every input to 10 mantissa bits (fp16's), unlike fp16 inputs that
            # are exact: each product is off by up to 2**-10 relative, ~1e-3 on the unit sums.
            return Tolerance(rtol=1e-2, atol=1e-2)
        return Tolerance(rtol=4e-3, atol=2e-3)

    def sweep(self, problem):
        m, n, k = problem.shape
        shapes = [
            (1, 1, 1),  # tiny
            (3, 5, 7),  # odd everything, K below any tile
            (17, 33, 65),  # one past powers of two
            (64, 64, 64),  # exactly one small tile
            (127, 96, 200),  # non-power-of-two, K tail
            (1, n, k),  # decode row against the workload's weight
            (max(1, m - 1), n, k + 3),  # the workload with odd M and unaligned K
            (m, n, k),  # the workload itself
        ]
        seen, out = set(), []
        for s in shapes:
            if s not in seen:
                seen.add(s)
                out.append(problem.with_shape(*s))
        return out

    def families(self) -> list[Family]:
        from kernels.ops.matmul.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        from kernels.ops.matmul.starting_points import starting_points

        return starting_points(problem)
