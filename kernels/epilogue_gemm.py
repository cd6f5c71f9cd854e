"""What CUTLASS families with their own epilogue share: the C++ (epilogue_gemm_sm90.cuh: a Hopper
GEMM whose accumulators go to an op's epilogue class, run with params cached per call) and the
family rules of its tiles. A family's source is that text followed by the op's own .cu, pasted
whole into every candidate as one translation unit (the harness builds what the candidate
shows, nothing included from elsewhere but the pinned CUTLASS headers)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels.ops.matmul.families.common import SMEM_LIMIT
from kernels.ops.matmul.families.cutlass_sm90 import ALIGN_ELEMENTS, CUTLASS_PIN
from kernels.problem import Family, ParamSpace, Problem
from kernels.render import render_module

SHARED = (Path(__file__).with_name("epilogue_gemm_sm90.cuh")).read_text()


# What every candidate of these families begins with: the build of its library (the shared
# C++ and the op's, CUDA_SOURCE, pasted in by `candidate_template`) for its point's tile, and
# the host helpers around its calls. The op's part follows: its FUNCTIONS, LIBRARY and run().
CANDIDATE_HEAD = '''$HEADER

import torch

from harness.cuda_ext import CFunction, CudaLibrary, load_library

$CONSTANTS

CUTLASS = "__CUTLASS_PIN__"  # the pinned headers the library is built against
ALIGN = 8  # TMA: 16-byte aligned rows of fp16/bf16
ELEMENT_CODES = {"bf16": 0, "fp16": 1}
SCHEDULE_CODES = {"cooperative": 0, "pingpong": 1}
SCHEDULER_CODES = {"persistent": 0, "streamk": 1}
RASTER_CODES = {"heuristic": 0, "along_m": 1, "along_n": 2}  # kf::TileOrder's raster

CUDA_SOURCE = r"""__CUDA_SOURCE__"""


def tile_flags():
    """nvcc's flags for this point's tile and dtype (the op's own follow)."""
    return (
        "-std=c++17",
        "-O3",
        "-DNDEBUG",
        "--expt-relaxed-constexpr",
        "-gencode=arch=compute_90a,code=sm_90a",  # wgmma and setmaxnreg need sm_90a
        f"-DKF_ELEM={ELEMENT_CODES[DTYPE]}",
        f"-DKF_TILE_M={TILE_M}",
        f"-DKF_TILE_N={TILE_N}",
        f"-DKF_TILE_K={TILE_K}",
        f"-DKF_CLUSTER_M={CLUSTER_M}",
        f"-DKF_CLUSTER_N={CLUSTER_N}",
        f"-DKF_SCHEDULE={SCHEDULE_CODES[SCHEDULE]}",
        f"-DKF_SCHEDULER={SCHEDULER_CODES[SCHEDULER]}",
        "-DKF_STAGES=0",
    )


def checked(lib, abi_version):
    """The library, once its ABI is the one this candidate calls."""
    if lib.kf_abi_version() != abi_version:
        raise RuntimeError(f"library ABI {lib.kf_abi_version()}, expected {abi_version}")
    return lib


_WORKSPACE_BYTES = {}  # (m, n, k) -> bytes: asked of the library once per shape, not per call


def tile_order():
    """This point's kf::TileOrder (swizzle, raster): run-time scheduler arguments."""
    return SWIZZLE, RASTER_CODES[RASTER]


def workspace(lib, m, n, k, device):
    """(bytes, tensor or None) of CUTLASS's workspace for an (m, n, k) GEMM; stream-ordered:
    freed after the launch, reused only behind it."""
    if (m, n, k) not in _WORKSPACE_BYTES:
        _WORKSPACE_BYTES[(m, n, k)] = lib.kf_workspace_size(m, n, k, *tile_order())
    size = _WORKSPACE_BYTES[(m, n, k)]
    return size, (torch.empty(size, dtype=torch.uint8, device=device) if size else None)


def aligned(t, align=ALIGN):
    """Contiguous along its last dim, `align` elements per access: sizes and strides multiples
    of it, the address of 2 * align bytes (fp16/bf16). ALIGN: TMA's 16-byte rows."""
    return (
        t.stride(-1) == 1
        and all(s % align == 0 for s in t.stride()[:-1])
        and t.shape[-1] % align == 0
        and t.data_ptr() % (2 * align) == 0
    )


def padded(t, rows, cols):
    """t zero-padded to (rows, cols): zeros along K add nothing to a product."""
    p = t.new_zeros(rows, cols)
    p[: t.shape[0], : t.shape[1]] = t
    return p
'''


def candidate_template(op_part: str, op_source: Path) -> str:
    """A family's candidate text: CANDIDATE_HEAD, then `op_part`, with the pinned headers and
    the C++ (the shared GEMM, then the op's .cu) pasted in ($ escaped for the string.Template
    step that fills $HEADER and $CONSTANTS)."""
    source = cuda_source(op_source).replace("$", "$$")
    return (
        (CANDIDATE_HEAD + op_part)
        .replace("__CUTLASS_PIN__", CUTLASS_PIN)
        .replace("__CUDA_SOURCE__", source)
    )


def cuda_source(op_source: Path) -> str:
    """The shared GEMM, then the op's epilogue and entry points."""
    return f"{SHARED}\n// ---- {op_source.name}: the op's epilogue and entry points\n\n{op_source.read_text()}"


# Every build parameter changes what is compiled: a family's library holds each valid
# combination of these and its own.
TILE_CHOICES: dict[str, list[Any]] = {
    "TILE_M": [64, 128, 256],
    "TILE_N": [64, 128, 256],
    "TILE_K": [64, 128],
    "CLUSTER_M": [1, 2],
    "CLUSTER_N": [1, 2],
    "SCHEDULE": ["cooperative", "pingpong"],
    # Stream-K: the tiles' K iterations dealt evenly over the SMs, partial tiles added in a
    # fixed order before the epilogue; what a few waves of whole tiles would leave idle
    # (Qwen2's q/k/v: 288 tiles of 128x256 on 132 SMs).
    "SCHEDULER": ["persistent", "streamk"],
}
TILE_CONSTRAINTS = (
    "cooperative: TILE_M in (128, 256); pingpong: TILE_M in (64, 128)",
    "streamk: cooperative only",
    "accumulators TILE_M*TILE_N/(128*warpgroups) <= 128 per thread",
    "2 stages of (TILE_M+TILE_N)*TILE_K*2 bytes fit (no epilogue shared memory)",
    "the problem's K is a multiple of 8 (else the padded path would be timed)",
)
MAX_ACC_PER_THREAD = 128  # fp32 accumulators per consumer thread
DEFAULT_TILE = {
    "TILE_M": 128,
    "TILE_N": 256,
    "TILE_K": 64,
    "CLUSTER_M": 2,
    "CLUSTER_N": 1,
    "SCHEDULE": "cooperative",
    "SCHEDULER": "persistent",
}
# Ping-pong tiles: each warpgroup's epilogue runs under the other's mainloop (the leader at
# 16384x2816x1024, a short K, in swiglu_cutlass_probe_h200_tanh.json).
PINGPONG = {"TILE_N": 128, "SCHEDULE": "pingpong"}
# Run-time levers, the same build (a library's builds leave them out): kf::TileOrder, the order
# the persistent CTAs take the output tiles in.
ORDER_CHOICES: dict[str, list[Any]] = {
    "RASTER": ["heuristic", "along_m", "along_n"],
    "SWIZZLE": [1, 2, 4, 8],
}
DEFAULT_ORDER = {"RASTER": "heuristic", "SWIZZLE": 1}  # CUTLASS's own
# The order of the matmul family's CUTLASS winners at GPT-style MLP shapes on an H200 (bias +
# GELU at 4096x4096x1024, 1.77x torch: model_gpt_block_h200.json; at 2048x16384x4096, 1.19x:
# model_gptj_block_h200_roofplan.json): along N, 8 tiles swept together.
ALONG_N = {"RASTER": "along_n", "SWIZZLE": 8}


class EpilogueGemmFamily(Family):
    """A family of kernels/epilogue_gemm_sm90.cuh GEMMs: the tile rules, the K alignment TMA
    needs, and the render, for an op whose problem shape ends with K."""

    backend = "cuda"
    extra_choices: dict[str, list[Any]] = {}  # the op's own build parameters

    def template(self) -> str:
        """The candidate module's text for render_module (the C++ pasted in, $ escaped)."""
        raise NotImplementedError

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            TILE_CHOICES | self.extra_choices | ORDER_CHOICES, constraints=TILE_CONSTRAINTS
        )

    def default(self, problem: Problem) -> dict[str, Any]:
        return {**DEFAULT_TILE, **DEFAULT_ORDER}

    def check(self, problem: Problem, params: Mapping[str, Any]) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        p = params
        groups = 2 if p["SCHEDULE"] == "cooperative" else 1
        if p["SCHEDULE"] == "cooperative" and p["TILE_M"] not in (128, 256):
            return "a cooperative tile is split by two warpgroups: TILE_M must be 128 or 256"
        if p["SCHEDULE"] == "pingpong" and p["TILE_M"] not in (64, 128):
            return "a ping-pong warpgroup owns a whole tile: TILE_M must be 64 or 128"
        if p["SCHEDULER"] == "streamk" and p["SCHEDULE"] != "cooperative":
            return "CUTLASS's stream-K scheduler runs the cooperative schedule only"
        if (acc := p["TILE_M"] * p["TILE_N"] / (128 * groups)) > MAX_ACC_PER_THREAD:
            return f"{acc:.0f} fp32 accumulators per thread, over {MAX_ACC_PER_THREAD}"
        stage = (p["TILE_M"] + p["TILE_N"]) * p["TILE_K"] * problem.torch_dtype.itemsize
        if 2 * stage > SMEM_LIMIT:
            return f"two stages of {stage} bytes do not fit in {SMEM_LIMIT}"
        return self.shape_blocker(problem)

    def shape_blocker(self, problem: Problem) -> str | None:
        """Why this problem's own shape would run on the padded path (None: the fast path)."""
        if problem.dtype not in ("bf16", "fp16"):
            return f"{problem.dtype} is not built (bf16 and fp16 only)"
        k = problem.shape[-1]
        if k % ALIGN_ELEMENTS:
            return (
                f"TMA needs 16-byte aligned rows; K = {k} is not a multiple of "
                f"{ALIGN_ELEMENTS}: this shape would be timed on the padded fallback"
            )
        return None

    def fixed(self, problem: Problem) -> dict[str, Any]:
        """The candidate's constants that the problem sets (not searched)."""
        return {"DTYPE": problem.dtype}

    def render(self, problem: Problem, params: Mapping[str, Any]) -> str:
        return render_module(
            self.template(),
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed=self.fixed(problem),
            summary=self.description,
        )
