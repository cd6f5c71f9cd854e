"""qkv_rotary: the attention input projections in one GEMM, rotary embedding in the epilogue.

    q = rotary(x @ w_q^T), k = rotary(x @ w_k^T), v = x @ w_v^T,  out = [q | k | v]

Shape (M, H, HKV, D, K): x is (M, K) tokens; w_q is (H*D, K), w_k and w_v are (HKV*D, K)
(nn.Linear's layout; HKV < H is grouped-query attention); cos and sin are (M, D/2) per token.
out is (M, (H + 2*HKV) * D): q's heads, then k's, then v's, each head's D values contiguous,
so q, k and v are column slices of it. Rotary is the rotate-half (GPT-NeoX / Llama) form of
kernels/ops/rotary: y[:D/2] = x1 cos - x2 sin, y[D/2:] = x2 cos + x1 sin per head.

Layout "+bias": the three projections have biases b_q (H*D,), b_k and b_v (HKV*D,), added
before the rotation, as nn.Linear(bias=True) does (Qwen2's q/k/v projections).

Layouts "i8+kv_heads=<HKV>" and "i8+bias+kv_heads=<HKV>" take the three weights as one (N, K)
matrix, N = (H + 2*HKV) * D (w_q, w_k, w_v one after the other), with each head's two halves
interleaved in groups of 8 rows (`interleave_heads`; D a multiple of 16), and the biases as one
(N,) vector in the same order. The layout names the k/v heads because the inputs cannot: which
rows are v's (the last HKV heads, not rotated) is then the layout's, so one PyTorch fallback per
layout serves every token count (a download package's). A model's weights are constant, so
that is a one-time copy at load time, and the three projections become one GEMM whose tiles
hold each rotary pair's two columns side by side: the CUTLASS family rotates them in its
register epilogue (families/cutlass_sm90.cu). The output is the same for every layout. The
baseline is that one GEMM with PyTorch (F.linear) and the rotation as a second pass, what a
model with a concatenated q/k/v weight runs.

Layouts "i8+rowscale+kv_heads=<HKV>" and "i8+bias+rowscale+kv_heads=<HKV>" are the "i8" ones
with the RMSNorm before the projections folded in (kernels/row_scale.py): the weight is the
interleaved one times the norm's weight, and a float32 (M,) row scale s comes last; each
row's products are scaled before the bias and the rotation: y = s * (x @ w^T) + b.

Layout "pairs+rot=<R>+head_dim=<D>+kv_heads=<HKV>" is GPT-J's rotary: the pairs (2i, 2i+1) of the first R
dims of each q and k head turn by cos/sin (M, R/2) (`rotate_pairs`; R even, at most D), the rest
pass as they are; the three weights come as one (N, K) matrix, w_q, w_k and w_v one after the
other (no interleave: a GEMM tile's thread already holds each pair's two columns), no bias.

Fused, x is read once for the three products, and q and k are rotated before they are first
written, instead of written, read, rotated and written again.
"""

from __future__ import annotations

import math
import re

import torch

from kernels import row_scale, zero_one
from kernels.problem import Op, OutputSpec, Problem, ProblemError, Tolerance

BIAS = "+bias"
INTERLEAVED = "i8"
GROUP = 8  # rows of a head's first half, then the same rows of its second half
ROW_SCALE = f"+{row_scale.TAG}"
_INTERLEAVED_LAYOUT = re.compile(r"i8(\+bias)?(\+rowscale)?\+kv_heads=([1-9][0-9]*)")
PAIRS = "pairs"
_PAIRS_LAYOUT = re.compile(
    r"pairs\+rot=([1-9][0-9]*)\+head_dim=([1-9][0-9]*)\+kv_heads=([1-9][0-9]*)"
)


# A library class's layout (Op.library_layout): the build's rope, row scale and head dims.
_LIBRARY_LAYOUT = re.compile(
    r"(?P<rope>i8(\+rowscale)?|pairs\+rot=[1-9][0-9]*)\+head_dim=(?P<d>[1-9][0-9]*)"
)


def pairs_layout(rotary_dim: int, head_dim: int, kv_heads: int) -> str:
    """GPT-J's layout: "pairs+rot=<R>+head_dim=<D>+kv_heads=<n>" (the weight is one matrix
    of heads: the layout names which rows are a head's and which heads are v's, so a download
    package's fallback can split them)."""
    return f"{PAIRS}+rot={rotary_dim}+head_dim={head_dim}+kv_heads={kv_heads}"


def is_pairs(problem) -> bool:
    return problem.layout.startswith(PAIRS)


def rotary_dim(problem) -> int:
    """How many of each head's dims turn: the "pairs" layouts' R, else all D."""
    match = _PAIRS_LAYOUT.fullmatch(problem.layout)
    return int(match.group(1)) if match else problem.shape[3]


def one_weight(problem) -> bool:
    """The layouts that take q/k/v's weights as one matrix ("i8", "pairs")."""
    return is_interleaved(problem) or is_pairs(problem)


def interleaved_layout(kv_heads: int, *, bias: bool, rowscale: bool = False) -> str:
    """The "i8" layout of a problem with `kv_heads` k/v heads: "i8[+bias][+rowscale]+kv_heads=<n>"."""
    parts = (BIAS if bias else "") + (ROW_SCALE if rowscale else "")
    return f"{INTERLEAVED}{parts}+kv_heads={kv_heads}"


def has_bias(problem) -> bool:
    return BIAS in problem.layout


def has_row_scale(problem) -> bool:
    """An RMSNorm folded in: the inputs end with its float32 (M,) row scale."""
    return ROW_SCALE in problem.layout


def is_interleaved(problem) -> bool:
    return problem.layout.startswith(INTERLEAVED)


def interleave_heads(t: torch.Tensor, head_dim: int, group: int = GROUP) -> torch.Tensor:
    """Rows (dim 0) of t, heads of `head_dim` rows each, with each head's halves interleaved:
    `group` rows of the first half, then the same rows of the second half, and so on."""
    rest = t.shape[1:]
    halves = t.reshape(-1, 2, head_dim // (2 * group), group, *rest)
    return halves.transpose(1, 2).reshape(t.shape).contiguous()


def deinterleave_heads(t: torch.Tensor, head_dim: int, group: int = GROUP) -> torch.Tensor:
    """The inverse of `interleave_heads`."""
    rest = t.shape[1:]
    pairs = t.reshape(-1, head_dim // (2 * group), 2, group, *rest)
    return pairs.transpose(1, 2).reshape(t.shape).contiguous()


def to_interleaved(problem, inputs: tuple) -> tuple:
    """The standard layout's inputs (x, w_q, w_k, w_v, cos, sin, *biases) as the "i8" layout's
    (x, w, cos, sin, *bias)."""
    d = problem.shape[3]
    x, w_q, w_k, w_v, cos, sin, *biases = inputs
    w = interleave_heads(torch.cat([w_q, w_k, w_v]), d)
    return (x, w, cos, sin) + ((interleave_heads(torch.cat(biases), d),) if biases else ())


def from_interleaved(problem, inputs: tuple) -> tuple:
    """The "i8" layout's inputs as the standard layout's (the inverse of `to_interleaved`)."""
    _, h, hkv, d, _ = problem.shape
    x, w, cos, sin, *bias = inputs
    sizes = [h * d, hkv * d, hkv * d]
    weights = deinterleave_heads(w, d).split(sizes)
    biases = deinterleave_heads(bias[0], d).split(sizes) if bias else ()
    return (x, *weights, cos, sin, *biases)


def rotate_pairs(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """y (M, heads, D) with the pairs (2i, 2i+1) of its first R dims rotated by per-token
    cos/sin (M, R/2) (GPT-J's rotate_every_two); the other dims as they are."""
    r = 2 * cos.shape[-1]
    even, odd = y[..., 0:r:2], y[..., 1:r:2]
    c, s = cos[:, None, :], sin[:, None, :]
    turned = torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)
    return torch.cat([turned, y[..., r:]], dim=-1)


def rotate_half(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """y (M, heads, D) rotated by per-token cos/sin (M, D/2)."""
    half = y.shape[-1] // 2
    y1, y2 = y[..., :half], y[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([y1 * c - y2 * s, y2 * c + y1 * s], dim=-1)


class QkvRotaryOp(Op):
    name = "qkv_rotary"
    dims = ("M", "H", "HKV", "D", "K")
    dtypes = ("fp16", "bf16")
    layouts = ("", BIAS)
    description = "q/k/v projections in one GEMM, rotary embedding of q and k in the epilogue"

    def layout_note(self):
        return (
            "i8[+bias][+rowscale]+kv_heads=<HKV>: the three weights (and biases) as one, each "
            "head's halves interleaved in groups of 8 rows (+rowscale: an RMSNorm folded in, its "
            "float32 row scale last); pairs+rot=<R>+head_dim=<D>+kv_heads=<HKV>: GPT-J's "
            "rotary (pairs of the first R dims) over the three weights as one"
        )

    def layout_error(self, layout):
        if (
            layout in self.layouts
            or _INTERLEAVED_LAYOUT.fullmatch(layout)
            or _PAIRS_LAYOUT.fullmatch(layout)
        ):
            return None
        return (
            f"{self.name} takes no layout, +bias, i8[+bias][+rowscale]+kv_heads=<HKV> or "
            f"pairs+rot=<R>+head_dim=<D>+kv_heads=<HKV>, not {layout!r}"
        )

    def library_layout(self, problem):
        """The CUTLASS family's builds depend on the head dim (KF_HEAD_DIM), the rotary dims
        and rope and a folded norm, not on the heads (the columns they span and which are
        v's are run-time arguments) nor on a bias (a pointer, or none): a class names D and
        no heads or bias, so Llama-3-8B's q/k/v and Qwen2-7B's share their builds."""
        d = problem.shape[3]
        if is_pairs(problem):
            return f"{PAIRS}+rot={rotary_dim(problem)}+head_dim={d}"
        if is_interleaved(problem):
            rowscale = ROW_SCALE if has_row_scale(problem) else ""
            return f"{INTERLEAVED}{rowscale}+head_dim={d}"
        return problem.layout

    def library_problem(self, shape, dtype, library_layout):
        """The class's problem at the library's M, heads and K, with its own head dim."""
        match = _LIBRARY_LAYOUT.fullmatch(library_layout)
        if match is None:
            return super().library_problem(shape, dtype, library_layout)
        m, h, hkv, _, k = shape
        d, rope = int(match["d"]), match["rope"]
        if rope.startswith(PAIRS):
            layout = f"{rope}+head_dim={d}+kv_heads={hkv}"
        else:
            layout = f"{rope}+kv_heads={hkv}"
        return Problem(self.name, (m, h, hkv, d, k), dtype, layout)

    def validate(self, problem):
        super().validate(problem)
        _, _, hkv, d, _ = problem.shape
        if d % 2:
            raise ProblemError(f"D={d}: the head dim must be even")
        if is_interleaved(problem) and problem.layout != interleaved_layout(
            hkv, bias=has_bias(problem), rowscale=has_row_scale(problem)
        ):
            raise ProblemError(
                f"layout {problem.layout} names other k/v heads than the shape's HKV={hkv}"
            )
        if is_pairs(problem):
            r = rotary_dim(problem)
            if problem.layout != pairs_layout(r, d, hkv):
                raise ProblemError(
                    f"layout {problem.layout} names other heads than the shape's D={d}, HKV={hkv}"
                )
            if r % 2 or r > d:
                raise ProblemError(f"rot={r}: the rotary dims must be even and at most D={d}")
        if is_interleaved(problem) and d % (2 * GROUP):
            raise ProblemError(
                f"layout {problem.layout} interleaves groups of {GROUP} rows of each half-head: "
                f"D={d} must be a multiple of {2 * GROUP}"
            )

    def fixed_dims(self, problem):
        # The interleaved weight's rows are the layout's heads: a q/k/v split of other heads
        # would read it as another matrix.
        return frozenset({"H", "HKV", "D"}) if one_weight(problem) else frozenset()

    def input_shapes(self, problem):
        m, h, hkv, d, k = problem.shape
        if is_pairs(problem):
            r = rotary_dim(problem)
            return [(m, k), ((h + 2 * hkv) * d, k), (m, r // 2), (m, r // 2)]
        if is_interleaved(problem):
            n = (h + 2 * hkv) * d
            shapes = [(m, k), (n, k), (m, d // 2), (m, d // 2)]
            shapes += [(n,)] if has_bias(problem) else []
            return shapes + [(m,)] if has_row_scale(problem) else shapes
        shapes = [(m, k), (h * d, k), (hkv * d, k), (hkv * d, k), (m, d // 2), (m, d // 2)]
        return shapes + [(h * d,), (hkv * d,), (hkv * d,)] if has_bias(problem) else shapes

    def output_spec(self, problem):
        m, h, hkv, d, _ = problem.shape
        return OutputSpec((m, (h + 2 * hkv) * d), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        inputs = self._standard_inputs(problem, seed=seed, device=device)
        if not has_row_scale(problem):
            return self._as_layout(problem, inputs)
        # Rows of a residual stream and each one's RMS scale: the scaled rows are ~N(0, 1).
        x = row_scale.spread_rows(inputs[0], torch.Generator(device=device).manual_seed(seed))
        return self._as_layout(problem, (x, *inputs[1:]), row_scale.rms_scale(x))

    def _as_layout(self, problem, inputs: tuple, scale=None) -> tuple:
        """The standard layout's inputs as this problem's layout takes them (the "+rowscale"
        layouts' scale last)."""
        if is_interleaved(problem):
            return to_interleaved(problem, inputs) + ((scale,) if has_row_scale(problem) else ())
        if is_pairs(problem):
            x, w_q, w_k, w_v, cos, sin = inputs
            return (x, torch.cat([w_q, w_k, w_v]), cos, sin)
        return inputs

    def _standard_inputs(self, problem, *, seed, device):
        """The "" / "+bias" layouts' inputs (the "i8" layouts' are the same, interleaved)."""
        gen = torch.Generator(device=device).manual_seed(seed)
        m, h, hkv, d, k = problem.shape
        dtype = problem.torch_dtype

        def randn(shape, scale):
            return (torch.randn(shape, generator=gen, device=device) * scale).to(dtype)

        pos = torch.arange(m, device=device, dtype=torch.float32)[:, None]
        r = rotary_dim(problem)
        freq = 10000.0 ** (-torch.arange(r // 2, device=device, dtype=torch.float32) * 2 / r)
        angle = pos * freq[None, :] + torch.rand((1, 1), generator=gen, device=device)
        inputs = (
            randn((m, k), 1.0),
            randn((h * d, k), k**-0.5),
            randn((hkv * d, k), k**-0.5),
            randn((hkv * d, k), k**-0.5),
            angle.cos().to(dtype),
            angle.sin().to(dtype),
        )
        if not has_bias(problem):
            return inputs
        # As large as the products (trained q/k biases are): a bias added after the rotation,
        # or to the wrong head, does not hide under the tolerance.
        return inputs + (randn((h * d,), 1.0), randn((hkv * d,), 1.0), randn((hkv * d,), 1.0))

    def adversarial_inputs(self, problem, *, seed, device):
        standard = self._standard_inputs(problem, seed=seed, device=device)
        x, wq, wk, wv, cos, sin, *biases = standard
        gen = torch.Generator(device=device).manual_seed(seed + 5)

        def ints(t):  # 0/1 entries: exact sums, any slip in which row feeds which head shows
            return zero_one.like(t, gen)

        # An output is at most 2 * scale * (ones in x's row) + 1 (a rotation mixes two sums):
        # x's rows hold as many ones as keep that within half the dtype (kernels/zero_one.py).
        scaled = has_row_scale(problem)
        ones = int(torch.finfo(x.dtype).max) // (4 * (2**row_scale.TOP if scaled else 1))
        # Distinct weights per projection and per half-head, so a swapped q/k/v or a swapped
        # half is not hidden by symmetric inputs; cos = 0, sin = 1 is a pure swap of halves.
        swap = (torch.zeros_like(cos), torch.ones_like(sin))
        x01 = zero_one.rows(x, gen, at_most=ones)
        cases = {
            "zero_one": (x01, ints(wq), ints(wk), ints(wv), cos, sin, *map(ints, biases)),
            "swap_halves": (x, wq, wk, wv, *swap, *biases),
        }
        scales = {}
        if scaled:
            scales = {
                "zero_one": row_scale.powers_of_two(problem.shape[0], gen, device),
                "swap_halves": row_scale.rms_scale(x),
            }
        return {name: self._as_layout(problem, c, scales.get(name)) for name, c in cases.items()}

    def reference(self, problem, *inputs):
        m, h, hkv, d, _ = problem.shape
        if is_pairs(problem):
            x, w, cos, sin = (t.double() for t in inputs)
            y = (x @ w.T).view(m, h + 2 * hkv, d)
            turned = rotate_pairs(y[:, : h + hkv], cos, sin)
            return torch.cat([turned, y[:, h + hkv :]], dim=1).reshape(m, -1)
        if has_row_scale(problem):  # s * (x @ w^T) = (s * x) @ w^T, exactly in float64
            *inputs, scale = inputs
            inputs = [inputs[0].double() * scale.double()[:, None], *inputs[1:]]
        if is_interleaved(problem):
            inputs = from_interleaved(problem, inputs)
        x, w_q, w_k, w_v, cos, sin, *biases = inputs
        x = x.double()
        cos, sin = cos.double(), sin.double()
        b_q, b_k, b_v = (b.double() for b in biases) if biases else (0.0, 0.0, 0.0)
        q = rotate_half((x @ w_q.double().T + b_q).view(m, h, d), cos, sin)
        k = rotate_half((x @ w_k.double().T + b_k).view(m, hkv, d), cos, sin)
        v = x @ w_v.double().T + b_v
        return torch.cat([q.reshape(m, -1), k.reshape(m, -1), v], dim=1)

    def baseline(self, problem, *inputs, out):
        # q, k and v as the model's code makes them, three tensors: packing them into `out`
        # would charge torch a pass over the whole output that no model makes (`pack` joins
        # them, outside the timing).
        m, h, hkv, d, _ = problem.shape
        if is_pairs(problem):  # one GEMM over the three weights, then the rotation's pass
            x, w, cos, sin = inputs
            y = torch.nn.functional.linear(x, w).view(m, h + 2 * hkv, d)
            return rotate_pairs(y[:, : h + hkv], cos, sin), y[:, h + hkv :]
        if is_interleaved(problem):
            return self._interleaved_baseline(problem, *inputs)
        x, w_q, w_k, w_v, cos, sin, *biases = inputs
        b_q, b_k, b_v = biases or (None, None, None)
        linear = torch.nn.functional.linear
        q = rotate_half(linear(x, w_q, b_q).view(m, h, d), cos, sin)
        k = rotate_half(linear(x, w_k, b_k).view(m, hkv, d), cos, sin)
        return q, k, linear(x, w_v, b_v)

    def _interleaved_baseline(self, problem, x, w, cos, sin, *rest):
        """One GEMM over the interleaved weight, then the rotation of q's and k's heads as a
        pass over its columns; v's heads stay where the GEMM wrote them (a view). A folded
        norm's rows are scaled first (the norm's last pass)."""
        m, h, hkv, d, _ = problem.shape
        bias = rest[:1] if has_bias(problem) else ()
        if has_row_scale(problem):
            x = row_scale.scaled_rows(x, rest[-1])
        y = torch.nn.functional.linear(x, w, bias[0] if bias else None)
        # (row, head, group, half, 8): columns 16g..16g+7 of a head are its first half's
        # 8g..8g+7, the next 8 its second half's.
        pairs = y.view(m, h + 2 * hkv, d // (2 * GROUP), 2, GROUP)
        first, second = pairs[:, : h + hkv, :, 0], pairs[:, : h + hkv, :, 1]
        c = cos.view(m, 1, d // (2 * GROUP), GROUP)
        s_ = sin.view(m, 1, d // (2 * GROUP), GROUP)
        turned = torch.empty(
            (m, h + hkv, 2, d // (2 * GROUP), GROUP), dtype=y.dtype, device=y.device
        )
        # Rounded as rotate_half rounds: each product, then their sum.
        torch.sub(first * c, second * s_, out=turned[:, :, 0])
        torch.add(second * c, first * s_, out=turned[:, :, 1])
        return turned, pairs[:, h + hkv :].transpose(2, 3)

    def pack(self, problem, parts):
        """[q | k | v], each part's heads in the standard order (d contiguous per head)."""
        m = problem.shape[0]
        return torch.cat([part.reshape(m, -1) for part in parts], dim=1)

    def flops(self, problem):
        m, h, hkv, d, k = problem.shape
        return 2 * m * (h + 2 * hkv) * d * k

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        shapes = self.input_shapes(problem) + [self.output_spec(problem).shape]
        return elt * sum(math.prod(s) for s in shapes)

    def unfused_bytes(self, problem):
        # The rotary over q and k (reads and writes each); v is the GEMM's output as it is.
        # Folded, the norm's normalized rows too (written, where the fold writes a float a row).
        m, h, hkv, d, k = problem.shape
        norm = m * k if has_row_scale(problem) else 0
        return (2 * m * (h + hkv) * d + norm) * problem.torch_dtype.itemsize

    def tolerance(self, problem):
        # A GEMM's rounding, then a rotation whose two products PyTorch rounds separately.
        if problem.dtype == "bf16":
            return Tolerance(rtol=2.4e-2, atol=1.6e-2)
        return Tolerance(rtol=6e-3, atol=3e-3)

    def sweep(self, problem):
        m, h, hkv, d, k = problem.shape
        # One weight ("i8", "pairs") is one matrix of the model's heads: which of its rows are q's,
        # k's and v's is the problem's (H, HKV, D), so its sweep varies tokens and K only.
        heads = [(h, hkv, d)] * 3 if one_weight(problem) else [(1, 1, 2), (2, 1, 6), (3, 3, 16)]
        shapes = [
            (1, *heads[0], 1),
            (3, *heads[1], 7),  # odd sizes, D/2 below any tile, GQA
            (17, *heads[2], 65),
            (1, h, hkv, d, k),  # a decode row against the workload's weights
            (max(1, m - 1), h, hkv, d, k + 3),  # odd M, unaligned K
            (m, h, hkv, d, k),
        ]
        return [problem.with_shape(*s) for s in dict.fromkeys(shapes)]

    def families(self):
        from kernels.ops.qkv_rotary.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        # The dual-GEMM grid for the problem's regime (kernels/dual_gemm.py); not measured
        # yet: the model job's screen times them on the GPU.
        return [(f.name, p) for f in self.families() for p in f.starting_points(problem)]
