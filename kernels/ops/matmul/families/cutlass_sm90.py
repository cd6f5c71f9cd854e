"""matmul_cutlass_sm90: CUTLASS 3.x Hopper GEMMs (CollectiveBuilder + GemmUniversal), one
shared library per configuration.

The C++ (cutlass_sm90.cu beside this file, pasted into every candidate) instantiates one
warp-specialized TMA + wgmma kernel from the pinned `nvidia-cutlass` wheel's headers and exports
a plain C entry point (`kf_gemm`: pointers, sizes, leading dimensions, scheduler arguments, the
stream, a workspace); the candidate builds it with nvcc for sm_90a through
`harness.cuda_ext.load_library` at import (cached by source + flags + headers + nvcc version,
so a precompile builds it ahead) and calls it through the C types it declares (FUNCTIONS; the
harness binds them). No torch headers: the build does not depend on the torch version and can
be made on a machine without a GPU.

Compile-time levers: tile (M, N, K), cluster (TMA multicast of the shared operand), kernel
schedule (cooperative: two consumer warpgroups split one tile; ping-pong: each warpgroup owns a
tile and their epilogues overlap the other's mainloop), tile scheduler (persistent; stream-K,
which also does split-K and data-parallel, its partial tiles added CTA after CTA in a fixed
order; or batched split-K: K cut into SPLITS batches of one persistent GEMM writing fp32
partials, then a second kernel sums them in order and applies bias and activation, so small-M
shapes get enough CTAs with any schedule and no CTA waits on another), stages (0: as many as
fit). Run-time levers, no rebuild: raster order, swizzle (super-tile width in tiles), split
count and decomposition mode.

The alignment rule (one place: `fast_path_blocker`): TMA needs every operand's rows 16-byte
aligned, i.e. the contiguous extent (K, N or M by layout) a multiple of 8 elements. The
candidate is still correct everywhere: where a call's tensors miss that, run() zero-pads the
operands into aligned copies, runs the same kernel and copies the valid part out (torch copies,
no vendor GEMM). That path exists for correctness on odd sweep shapes, not for speed, so
check() refuses problems whose own shape would take it (GPT-2's N = 50257, say): the search
never spends a build on a point that would be timed on the padded path.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels.ops.matmul.families.common import SMEM_LIMIT, fixed_constants
from kernels.ops.matmul.op import has_residual, split_layout
from kernels.problem import Family, ParamSpace, Problem
from kernels.render import render_module

# The headers every candidate builds against; requirements.txt pins the same version
# (kernels/tests/test_cutlass_family.py checks that they agree).
CUTLASS_PIN = "nvidia-cutlass==4.2.0.0"
CUDA_SOURCE = (Path(__file__).with_name("cutlass_sm90.cu")).read_text()
ALIGN_ELEMENTS = 8  # 16 bytes of fp16/bf16
# Shared memory the TMA epilogue keeps beside the mainloop stages (output staging of the
# auto-chosen epilogue subtile, two buffers, plus barriers): an upper bound for check().
EPILOGUE_SMEM = 32 * 1024
MAX_ACC_PER_THREAD = 128  # fp32 accumulators per consumer thread (CUTLASS's largest tiles)

TEMPLATE = '''$HEADER

import torch

from harness.cuda_ext import CFunction, CudaLibrary, load_library

$CONSTANTS

CUTLASS = "__CUTLASS_PIN__"  # the pinned headers the library is built against
ALIGN = 8  # TMA: 16-byte aligned rows of fp16/bf16
ELEMENT_CODES = {"bf16": 0, "fp16": 1}
ACTIVATION_CODES = {"none": 0, "relu": 1, "silu": 2, "gelu": 3, "gelu_erf": 4}
SCHEDULE_CODES = {"cooperative": 0, "pingpong": 1}
SCHEDULER_CODES = {"persistent": 0, "streamk": 1, "batched_splitk": 2}
RASTER_CODES = {"heuristic": 0, "along_m": 1, "along_n": 2}
DECOMPOSITION_CODES = {"heuristic": 0, "data_parallel": 1, "splitk": 2, "streamk": 3}

CUDA_SOURCE = r"""__CUDA_SOURCE__"""


def nvcc_flags():
    """The compile-time half of the point; the run-time half goes to kf_gemm on each call."""
    return (
        "-std=c++17",
        "-O3",
        "-DNDEBUG",
        "--expt-relaxed-constexpr",
        "-gencode=arch=compute_90a,code=sm_90a",  # wgmma and setmaxnreg need sm_90a
        f"-DKF_ELEM={ELEMENT_CODES[DTYPE]}",
        f"-DKF_A_K_MAJOR={int(not A_TRANS)}",
        f"-DKF_B_K_MAJOR={int(B_TRANS)}",
        f"-DKF_TILE_M={TILE_M}",
        f"-DKF_TILE_N={TILE_N}",
        f"-DKF_TILE_K={TILE_K}",
        f"-DKF_CLUSTER_M={CLUSTER_M}",
        f"-DKF_CLUSTER_N={CLUSTER_N}",
        f"-DKF_SCHEDULE={SCHEDULE_CODES[SCHEDULE]}",
        f"-DKF_SCHEDULER={SCHEDULER_CODES[SCHEDULER]}",
        f"-DKF_STAGES={STAGES}",
        f"-DKF_BIAS={int(HAS_BIAS)}",
        f"-DKF_ACT={ACTIVATION_CODES[ACTIVATION]}",
        f"-DKF_RES={int(HAS_RESIDUAL)}",
    )


LIBRARY = CudaLibrary("kf_cutlass_sm90", CUDA_SOURCE, nvcc_flags(), headers=(CUTLASS,))
ABI_VERSION = 2


# The C prototypes in CUDA_SOURCE, as the harness binds them ("tensor": the tensor's address).
FUNCTIONS = {
    "kf_abi_version": CFunction("int"),
    "kf_gemm": CFunction(
        "int",
        ("tensor",) * 5  # a, b, out, bias (None: no bias), residual (None: none)
        + ("int",) * 3  # m, n, k
        + ("int64_t",) * 4  # row strides of a, b, out, residual
        + ("int",) * 4  # splits, swizzle, raster, decomposition
        + ("tensor", "int64_t", "void*"),  # workspace, its bytes, the CUDA stream
    ),
    "kf_workspace_size": CFunction("int64_t", ("int",) * 7),
    "kf_last_error": CFunction("const char*"),
    "kf_describe": CFunction("const char*"),
}


def _checked(lib):
    if lib.kf_abi_version() != ABI_VERSION:
        raise RuntimeError(f"kf_cutlass_sm90 ABI {lib.kf_abi_version()}, expected {ABI_VERSION}")
    return lib


# Built (or loaded from the compile cache) at import, so a precompile builds it ahead.
_LIB = _checked(load_library(LIBRARY, FUNCTIONS))
_RUNTIME = (SPLITS, SWIZZLE, RASTER_CODES[RASTER], DECOMPOSITION_CODES[DECOMPOSITION])


def _rows_aligned(t, cols):
    """A stored (rows, cols) matrix TMA can read or write: unit column stride, 16-byte aligned
    base and row stride, and a row length that is a whole number of 16-byte units."""
    return (
        t.stride(1) == 1
        and t.stride(0) % ALIGN == 0
        and cols % ALIGN == 0
        and t.data_ptr() % 16 == 0
    )


def fast_path_blocker(a, b, bias, residual, out):
    """Why these tensors cannot go straight to the kernel (None when they can)."""
    stored = (("a", a), ("b", b), ("out", out)) + ((("residual", residual),) if residual is not None else ())
    for name, t in stored:
        if not _rows_aligned(t, t.shape[1]):
            return f"{name} {tuple(t.shape)} stride {t.stride()}: rows not 16-byte aligned"
    if bias is not None and (bias.stride(0) != 1 or bias.data_ptr() % 16):
        return "bias not contiguous and 16-byte aligned"
    return None


def _launch(a, b, bias, residual, out):
    m, n = out.shape
    k = a.shape[0] if A_TRANS else a.shape[1]
    ws_bytes, workspace = 0, None
    if SCHEDULER != "persistent":  # stream-K's fixup area, batched split-K's fp32 partials
        ws_bytes = _LIB.kf_workspace_size(m, n, k, *_RUNTIME)
        if ws_bytes:  # stream-ordered: freed after the launch, reused only behind it
            workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=out.device)
    code = _LIB.kf_gemm(
        a, b, out, bias, residual,
        m, n, k, a.stride(0), b.stride(0), out.stride(0),
        0 if residual is None else residual.stride(0), *_RUNTIME,
        workspace, ws_bytes, torch.cuda.current_stream(out.device).cuda_stream,
    )
    if code:
        raise RuntimeError(f"kf_cutlass_sm90: {_LIB.kf_last_error()} (code {code})")


def _round_up(x):
    return -(-x // ALIGN) * ALIGN


def _padded(t, rows, cols):
    p = t.new_zeros(rows, cols)
    p[: t.shape[0], : t.shape[1]] = t
    return p


def _run_padded(a, b, bias, residual, out):
    """Correctness path for sizes or strides TMA cannot take: zero-pad each operand's
    contiguous dimension to whole 16-byte rows (zeros along K add nothing), run the same
    kernel, keep the valid part of the output."""
    m, n = out.shape
    k = a.shape[0] if A_TRANS else a.shape[1]
    mp, np_, kp = (_round_up(m) if A_TRANS else m), _round_up(n), _round_up(k)
    a_p = _padded(a, *((kp, mp) if A_TRANS else (mp, kp)))
    b_p = _padded(b, *((np_, kp) if B_TRANS else (kp, np_)))
    bias_p = None if bias is None else _padded(bias[None, :], 1, np_)[0]
    residual_p = None if residual is None else _padded(residual, mp, np_)
    out_p = torch.empty(mp, np_, dtype=out.dtype, device=out.device)
    _launch(a_p, b_p, bias_p, residual_p, out_p)
    out.copy_(out_p[:m, :n])


def run(a, b, *rest, out):
    bias = rest[0] if HAS_BIAS else None
    residual = rest[-1] if HAS_RESIDUAL else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[DTYPE]
    if any(t.dtype != dtype for t in (a, b, out, *rest)):
        raise TypeError(f"this candidate is built for {DTYPE} tensors only")
    if not out.is_cuda:
        raise RuntimeError("matmul_cutlass_sm90 runs on CUDA tensors only (an sm_90 GPU)")
    with torch.cuda.device(out.device):
        if fast_path_blocker(a, b, bias, residual, out) is None:
            _launch(a, b, bias, residual, out)
        else:
            _run_padded(a, b, bias, residual, out)
'''


def render_template() -> str:
    """TEMPLATE with the pinned headers and the C++ source pasted in ($ escaped for the
    string.Template step that fills $HEADER and $CONSTANTS)."""
    source = CUDA_SOURCE.replace("$", "$$")
    return TEMPLATE.replace("__CUTLASS_PIN__", CUTLASS_PIN).replace("__CUDA_SOURCE__", source)


def contiguous_extents(problem: Problem) -> dict[str, int]:
    """Each stored matrix's contiguous (row) length at this problem's shape and layout."""
    m, n, k = problem.shape
    operands, _, _ = split_layout(problem.layout)
    return {
        "A": m if operands[0] == "T" else k,
        "B": k if operands[1] == "T" else n,
        "out": n,
    }


def accumulators_per_thread(params: Mapping[str, Any]) -> float:
    """fp32 accumulator registers per consumer thread: a cooperative tile is split by two
    warpgroups, a ping-pong tile belongs to one."""
    groups = 2 if params["SCHEDULE"] == "cooperative" else 1
    return params["TILE_M"] * params["TILE_N"] / (128 * groups)


class CutlassSm90Matmul(Family):
    name = "matmul_cutlass_sm90"
    op = "matmul"
    backend = "cuda"
    description = (
        "CUTLASS 3.x Hopper GEMM (TMA + wgmma, warp-specialized, clusters, persistent or "
        "stream-K/split-K), one C-ABI library per configuration"
    )

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "TILE_M": [64, 128, 256],
                "TILE_N": [64, 128, 192, 256],
                "TILE_K": [64, 128],
                "CLUSTER_M": [1, 2, 4],
                "CLUSTER_N": [1, 2],
                "SCHEDULE": ["cooperative", "pingpong"],
                "SCHEDULER": ["persistent", "streamk", "batched_splitk"],
                "STAGES": [0, 2, 3, 4, 5, 6, 7],
                "RASTER": ["heuristic", "along_m", "along_n"],
                "SWIZZLE": [1, 2, 4, 8],
                "SPLITS": [1, 2, 3, 4, 6, 8, 12, 16],
                "DECOMPOSITION": ["data_parallel", "heuristic", "splitk", "streamk"],
            },
            constraints=(
                "cooperative: TILE_M in (128, 256); pingpong: TILE_M in (64, 128)",
                "accumulators TILE_M*TILE_N/(128*warpgroups) <= 128 per thread",
                "stages*(TILE_M+TILE_N)*TILE_K*2 + 32 KiB epilogue <= 227 KiB (auto: >= 2 fit)",
                "CLUSTER_M*CLUSTER_N <= 4",
                "streamk needs cooperative; persistent: DECOMPOSITION data_parallel, SPLITS 1",
                "batched_splitk: DECOMPOSITION splitk (SPLITS > 1)",
                "SPLITS > 1 exactly when DECOMPOSITION is splitk",
                "the problem's rows are 16-byte aligned (else the padded path would be timed)",
            ),
        )

    # nvcc_flags() in the render: one shared library per combination, whatever the shape.
    # STAGES is left at auto (0) in the library (as many as fit): the search tries others.
    build_params = (
        "TILE_M", "TILE_N", "TILE_K", "CLUSTER_M", "CLUSTER_N", "SCHEDULE", "SCHEDULER",
    )  # fmt: skip

    def runtime_for(self, problem: Problem, built: Mapping[str, Any]) -> dict[str, Any]:
        if built["SCHEDULER"] == "batched_splitk":
            return {"DECOMPOSITION": "splitk", "SPLITS": 4}
        if built["SCHEDULER"] == "streamk":
            return {"DECOMPOSITION": "heuristic", "SPLITS": 1}
        return {"DECOMPOSITION": "data_parallel", "SPLITS": 1}

    def default(self, problem: Problem) -> dict[str, Any]:
        # The stock CUTLASS choice for large bf16 GEMMs on the H100.
        return {
            "TILE_M": 128,
            "TILE_N": 256,
            "TILE_K": 64,
            "CLUSTER_M": 2,
            "CLUSTER_N": 1,
            "SCHEDULE": "cooperative",
            "SCHEDULER": "persistent",
            "STAGES": 0,
            "RASTER": "heuristic",
            "SWIZZLE": 1,
            "SPLITS": 1,
            "DECOMPOSITION": "data_parallel",
        }

    def check(self, problem: Problem, params: Mapping[str, Any]) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        p = params
        if p["SCHEDULE"] == "cooperative" and p["TILE_M"] not in (128, 256):
            return "a cooperative tile is split by two warpgroups: TILE_M must be 128 or 256"
        if p["SCHEDULE"] == "pingpong" and p["TILE_M"] not in (64, 128):
            return "a ping-pong warpgroup owns a whole tile: TILE_M must be 64 or 128"
        if accumulators_per_thread(p) > MAX_ACC_PER_THREAD:
            return f"{accumulators_per_thread(p):.0f} fp32 accumulators per thread, over 128"
        stage = (p["TILE_M"] + p["TILE_N"]) * p["TILE_K"] * problem.torch_dtype.itemsize
        stages = p["STAGES"] or 2  # auto picks as many as fit; at least two must
        # A residual is the epilogue's source C: TMA-loaded through shared memory of its own.
        smem = stages * stage + EPILOGUE_SMEM * (1 + has_residual(problem.layout))
        if smem > SMEM_LIMIT:
            return f"{stages} stages of {stage} bytes + epilogue = {smem} bytes, over {SMEM_LIMIT}"
        if p["CLUSTER_M"] * p["CLUSTER_N"] > 4:
            return "clusters of more than 4 CTAs are not in the space"
        if p["SCHEDULER"] == "streamk" and p["SCHEDULE"] != "cooperative":
            return "CUTLASS's stream-K scheduler runs with the cooperative schedule only"
        if p["SCHEDULER"] == "persistent" and (
            p["DECOMPOSITION"] != "data_parallel" or p["SPLITS"] != 1
        ):
            return (
                "the persistent scheduler is data-parallel: DECOMPOSITION data_parallel, SPLITS 1"
            )
        if p["SCHEDULER"] == "batched_splitk" and p["DECOMPOSITION"] != "splitk":
            return "batched split-K splits K: DECOMPOSITION splitk with SPLITS > 1"
        if (p["SPLITS"] > 1) != (p["DECOMPOSITION"] == "splitk"):
            return "SPLITS > 1 goes with DECOMPOSITION splitk, and splitk with SPLITS > 1"
        return self.shape_blocker(problem)

    def shape_blocker(self, problem: Problem) -> str | None:
        """Why this problem's own shape would run on the padded path (None: the fast path)."""
        if problem.dtype not in ("bf16", "fp16"):
            return f"{problem.dtype} is not built (bf16 and fp16 only)"
        odd = {name: size for name, size in contiguous_extents(problem).items() if size % 8}
        if odd:
            rows = ", ".join(f"{name} rows of {size}" for name, size in odd.items())
            return (
                f"TMA needs 16-byte aligned rows; {rows} elements are not a multiple of "
                f"{ALIGN_ELEMENTS}: this shape would be timed on the padded fallback"
            )
        return None

    def render(self, problem: Problem, params: Mapping[str, Any]) -> str:
        fixed = {"DTYPE": problem.dtype, **fixed_constants(problem)}
        return render_module(
            render_template(),
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed=fixed,
            summary=self.description,
        )
