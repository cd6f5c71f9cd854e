"""Shared pieces of the row-wise memory-bound ops (rmsnorm, layernorm, softmax, sum, ...).

Each such op reads an (M, N) tensor row by row. Their families share one parameter space:
  MODE              "one_pass": the whole row sits in registers (block = next power of two
                    of N, chosen at run time); rows wider than MAX_ONE_PASS fall back to
                    "two_pass", which streams the row in BLOCK_N chunks (statistics first,
                    then the output; the second read mostly hits L2).
  BLOCK_N           chunk width of the two-pass loop.
  ROWS              rows per program, loaded as one [ROWS, block] tile (more bytes in flight).
  NUM_WARPS         warps per program; with the block size this sets the vector width
                    (elements per thread = block / (32 * NUM_WARPS)).
  EVICT_FIRST       stream the input past L1/L2 in one-pass mode (it is read exactly once).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from kernels.problem import Family, Op, OutputSpec, ParamSpace, Problem, Tolerance
from kernels.render import render_module

MAX_ONE_PASS = 16384  # widest row (elements) kept whole in registers


def low_precision_tolerance(problem: Problem) -> Tolerance:
    """One rounding of the output dtype plus fp32 reduction-order noise."""
    return {
        "fp32": Tolerance(rtol=1e-5, atol=1e-5),
        "fp16": Tolerance(rtol=2e-3, atol=2e-3),
        "bf16": Tolerance(rtol=1.6e-2, atol=1.6e-2),
    }[problem.dtype]


class RowwiseOp(Op):
    """An op over x of shape (M, N), plus optional length-N parameter vectors."""

    dims = ("M", "N")
    vectors: tuple[str, ...] = ()  # names of (N,) parameter inputs, e.g. ("weight",)

    def input_shapes(self, problem):
        m, n = problem.shape
        return [(m, n)] + [(n,) for _ in self.vectors]

    def output_spec(self, problem):
        return OutputSpec(tuple(problem.shape), problem.torch_dtype)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        m, n = problem.shape
        x = torch.randn((m, n), generator=gen, device=device).to(problem.torch_dtype)
        vecs = [
            (1 + 0.5 * torch.randn((n,), generator=gen, device=device)).to(problem.torch_dtype)
            for _ in self.vectors
        ]
        return (x, *vecs)

    def adversarial_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        m, n = problem.shape
        dtype = problem.torch_dtype
        _, *vecs = self.make_inputs(problem, seed=seed, device=device)
        big = 1000 * torch.randn((m, n), generator=gen, device=device)  # large magnitudes
        flat = 500 + 1e-2 * torch.randn((m, n), generator=gen, device=device)  # tiny variance
        same = torch.randn((1, n), generator=gen, device=device).expand(m, n)  # identical rows
        cases = {"large_values": big, "near_constant_rows": flat, "identical_rows": same}
        return {name: (x.to(dtype).contiguous(), *vecs) for name, x in cases.items()}

    def bytes_moved(self, problem):
        elt = problem.torch_dtype.itemsize
        out = self.output_spec(problem)
        ins = sum(math.prod(s) for s in self.input_shapes(problem)) * elt
        return ins + math.prod(out.shape) * out.dtype.itemsize

    def tolerance(self, problem):
        return low_precision_tolerance(problem)

    def sweep(self, problem):
        m, n = problem.shape
        shapes = [(1, 1), (3, 7), (5, 100), (17, 257), (64, 1024), (7, 20000), (m, n)]
        seen, out = set(), []
        for s in shapes:
            if s not in seen:
                seen.add(s)
                out.append(problem.with_shape(*s))
        return out


class NormOp(RowwiseOp):
    """A normalization whose eps belongs to the problem: layout "" is the op's EPS; another is
    written "eps=<value>" (Python's shortest spelling: eps=1e-05), so a model's own eps is
    computed exactly, never swapped for ours."""

    EPS: float

    def eps(self, problem: Problem) -> float:
        return float(problem.layout.removeprefix("eps=")) if problem.layout else self.EPS

    def layout_for(self, eps: float) -> str:
        """The layout that names `eps` ("" for the op's own)."""
        return "" if float(eps) == self.EPS else f"eps={float(eps)!r}"

    def layout_note(self) -> str:
        return f"eps=<value> for another eps than {self.EPS!r}"

    def layout_error(self, layout: str) -> str | None:
        if layout == "":
            return None
        try:
            eps = float(layout.removeprefix("eps=")) if layout.startswith("eps=") else None
        except ValueError:
            eps = None
        if eps is None or not math.isfinite(eps) or eps <= 0:
            return (
                f"{self.name} takes no layout, or eps=<a positive number> (its own eps is "
                f"{self.EPS!r}), not {layout!r}"
            )
        if layout != self.layout_for(eps):
            return f"write {self.layout_for(eps) or 'no layout'!r} for eps {eps!r}, not {layout!r}"
        return None


class RowwiseFamily(Family):
    """A row-wise family: the subclass gives the template; space/default/check are shared."""

    template: str
    summary: str = ""
    modes: tuple[str, ...] = ("one_pass", "two_pass")

    def fixed(self, problem: Problem) -> dict[str, Any]:
        return {"MAX_ONE_PASS": MAX_ONE_PASS}

    def space(self, problem):
        return ParamSpace(
            {
                "MODE": list(self.modes),
                "BLOCK_N": [256, 512, 1024, 2048, 4096, 8192],
                "ROWS": [1, 2, 4, 8],
                "NUM_WARPS": [1, 2, 4, 8, 16],
                "EVICT_FIRST": [False, True],
            },
            constraints=("regs: ROWS*block/(32*NUM_WARPS) elements per thread",),
        )

    def default(self, problem):
        n = problem.shape[-1]
        if n <= MAX_ONE_PASS and "one_pass" in self.modes:
            width = max(16, 1 << (n - 1).bit_length())
            warps = min(16, max(1, width // 512))
            return {
                "MODE": "one_pass",
                "BLOCK_N": 1024,
                "ROWS": 1,
                "NUM_WARPS": warps,
                "EVICT_FIRST": False,
            }
        return {
            "MODE": self.modes[-1],
            "BLOCK_N": 2048,
            "ROWS": 1,
            "NUM_WARPS": 8,
            "EVICT_FIRST": False,
        }

    def check(self, problem, params: Mapping[str, Any]):
        if (why := super().check(problem, params)) is not None:
            return why
        n = problem.shape[-1]
        block = (
            max(16, 1 << (n - 1).bit_length())
            if params["MODE"] == "one_pass"
            else params["BLOCK_N"]
        )
        if params["MODE"] == "one_pass" and n > MAX_ONE_PASS:
            block = params["BLOCK_N"]  # run() falls back to two_pass
        per_thread = params["ROWS"] * block / (32 * params["NUM_WARPS"])
        if per_thread > 256:
            return f"{per_thread:.0f} elements per thread would spill; more warps or fewer rows"
        return None

    def render(self, problem, params):
        ordered = {k: params[k] for k in self.space(problem).choices}
        return render_module(
            self.template,
            family=self.name,
            problem=problem,
            params=ordered,
            fixed=self.fixed(problem),
            summary=self.summary,
        )


# run()'s shared launch logic: block width, fallback to two-pass, grid.
LAUNCH_HELPER = '''
def launch_shape(n_rows, n_cols):
    """(mode, block width, grid) for this call: one-pass unless the row is too wide."""
    mode = MODE
    block = max(16, triton.next_power_of_2(n_cols))
    if mode == "one_pass" and block > MAX_ONE_PASS:
        mode = "two_pass"
    if mode == "two_pass":
        block = BLOCK_N
    return mode, block, (triton.cdiv(n_rows, ROWS),)
'''.strip()
