"""swiglu_gate_cutlass_sm90: the gate and up projections as one CUTLASS 3.x Hopper GEMM over the
interleaved weight (layouts "i8" and "i8+rowscale", an RMSNorm folded in: each row's scale
applied before the gating), gated in a register epilogue; one shared library per configuration.

The C++ (kernels/epilogue_gemm_sm90.cuh, then cutlass_sm90.cu beside this file, pasted into
every candidate) runs the (M, 2N, K) GEMM with CUTLASS's warp-specialized TMA + wgmma mainloop
and its own epilogue: each thread holds a gate column and its up column side by side (the
interleave puts them 8 columns apart, where wgmma's accumulator layout gives both to one
thread), so it writes silu(gate) * up straight from registers. The two (M, N) intermediates
of two GEMMs never exist. Built with nvcc for sm_90a through `harness.cuda_ext.load_library`
at import (cached by source + flags + headers + nvcc version), called through the C types the
candidate declares (FUNCTIONS).

Compile-time levers: tile (M, N, K; N counts interleaved columns), cluster, schedule
(cooperative: two consumer warpgroups split a tile; ping-pong: each owns one and their
epilogues overlap the other's mainloop) and the store (pair: each thread stores its two
adjacent outputs, 4 bytes; quad: the four lanes that hold a row's 8-column chunk trade them so
each stores 8 outputs, 16 bytes; bulk, cooperative only: the tile's outputs gathered in shared
memory, each row written by one asynchronous bulk copy that runs under the next tile's
mainloop, where the warps of a pair or quad store wait in the epilogue until the memory system
has taken their stores). Run-time levers, no rebuild: the order the tiles are taken
in (raster and swizzle, kernels/epilogue_gemm.py's ORDER_CHOICES).
On an H200 (benchmarks/results/swiglu_cutlass_probe_h200*.json) the mainloop runs at cuBLAS's rate; what the epilogue cost was its math more than its stores
(quad stores lost to pair stores), and with one tanh.approx per output the kernel runs within
2-3 % of a plain GEMM of the same FLOPs: 1.06x torch.compile on Qwen2-7B's and Llama-3-8B's
MLPs, 1.35x at 16384x2816x1024.

The alignment rule (`fast_path_blocker`): TMA reads x's and w's rows, so K is a multiple of 8
elements and every row 16-byte aligned; the quad store writes 16 bytes, so out's rows are too
(N is a multiple of 8 by the layout). Where a call's tensors miss that, run() zero-pads K into
aligned copies (zeros along K add nothing), runs the same kernel and copies the result out: a
correctness path for odd sweep shapes, refused by check() for a problem's own shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels.dual_gemm import SMALL_M
from kernels.epilogue_gemm import (
    ALONG_N,
    PINGPONG,
    TILE_CHOICES,
    EpilogueGemmFamily,
    candidate_template,
    cuda_source,
)
from kernels.ops.swiglu_gate.op import INTERLEAVED, ROW_SCALE, has_row_scale
from kernels.problem import Problem

SOURCE = Path(__file__).with_name("cutlass_sm90.cu")
CUDA_SOURCE = cuda_source(SOURCE)

# The candidate after kernels/epilogue_gemm.py's CANDIDATE_HEAD.
OP_PART = '''
STORE_CODES = {"pair": 0, "quad": 1, "bulk": 2}
LIBRARY = CudaLibrary(
    "kf_swiglu_cutlass_sm90",
    CUDA_SOURCE,
    (*tile_flags(), f"-DKF_STORE={STORE_CODES[STORE]}", f"-DKF_ROW_SCALE={int(ROW_SCALE)}"),
    headers=(CUTLASS,),
)
ABI_VERSION = 3

# The C prototypes in CUDA_SOURCE, as the harness binds them ("tensor": the tensor's address).
FUNCTIONS = {
    "kf_abi_version": CFunction("int"),
    "kf_swiglu": CFunction(
        "int",
        ("tensor",) * 4  # x, w (interleaved), the row scale (or none), out
        + ("int",) * 3  # m, n, k
        + ("int64_t",) * 3  # row strides of x, w, out
        + ("int",) * 2  # the tile order: swizzle, raster
        + ("tensor", "int64_t", "void*"),  # workspace, its bytes, the CUDA stream
    ),
    "kf_workspace_size": CFunction("int64_t", ("int",) * 5),  # m, n, k, swizzle, raster
    "kf_last_error": CFunction("const char*"),
    "kf_describe": CFunction("const char*"),
}

# Built (or loaded from the compile cache) at import, so a precompile builds it ahead.
_LIB = checked(load_library(LIBRARY, FUNCTIONS), ABI_VERSION)


def fast_path_blocker(x, w, out):
    """Why these tensors cannot go straight to the kernel (None when they can)."""
    for name, t in (("x", x), ("w", w), ("out", out)):
        if not aligned(t):
            return f"{name} {tuple(t.shape)} stride {t.stride()}: rows not 16-byte aligned"
    return None


def _launch(x, w, scale, out):
    m, n = out.shape
    k = x.shape[1]
    ws_bytes, ws = workspace(_LIB, m, n, k, out.device)
    code = _LIB.kf_swiglu(
        x, w, scale, out, m, n, k, x.stride(0), w.stride(0), out.stride(0),
        *tile_order(), ws, ws_bytes, torch.cuda.current_stream(out.device).cuda_stream,
    )
    if code:
        raise RuntimeError(f"kf_swiglu_cutlass_sm90: {_LIB.kf_last_error()} (code {code})")


def _run_padded(x, w, scale, out):
    """Correctness path for strides or a K that TMA cannot take: x and w zero-padded to whole
    16-byte rows, an aligned output, the same kernel."""
    m, n = out.shape
    kp = -(-x.shape[1] // ALIGN) * ALIGN
    out_p = torch.empty(m, n, dtype=out.dtype, device=out.device)
    _launch(padded(x, m, kp), padded(w, w.shape[0], kp), scale, out_p)
    out.copy_(out_p)


def run(x, w, *scale, out):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[DTYPE]
    if any(t.dtype != dtype for t in (x, w, out)):
        raise TypeError(f"this candidate is built for {DTYPE} tensors only")
    if ROW_SCALE and (len(scale) != 1 or scale[0].dtype != torch.float32):
        raise TypeError("layout i8+rowscale takes one float32 row scale after w")
    if not ROW_SCALE and scale:
        raise TypeError("layout i8 takes no row scale")
    if not out.is_cuda:
        raise RuntimeError("swiglu_gate_cutlass_sm90 runs on CUDA tensors only (an sm_90 GPU)")
    s = scale[0].contiguous() if scale else None  # one float per row, read by the epilogue
    with torch.cuda.device(out.device):
        if fast_path_blocker(x, w, out) is None:
            _launch(x, w, s, out)
        else:
            _run_padded(x, w, s, out)
'''


class CutlassSm90SwigluGate(EpilogueGemmFamily):
    name = "swiglu_gate_cutlass_sm90"
    op = "swiglu_gate"
    layouts = (INTERLEAVED, ROW_SCALE)
    description = (
        "one CUTLASS 3.x Hopper GEMM over the interleaved gate/up weight (TMA + wgmma, "
        "warp-specialized), silu(gate) * up in a register epilogue"
    )
    extra_choices = {"STORE": ["quad", "pair", "bulk"]}
    build_params = (*TILE_CHOICES, *extra_choices)

    def template(self) -> str:
        return candidate_template(OP_PART, SOURCE)

    def default(self, problem: Problem) -> dict[str, Any]:
        # Bulk stores where the schedule allows them: on Qwen2-7B's MLP (2048x18944x3584) the
        # cooperative 128x256 tile ran 732.0 µs with them, 747.6 with pair stores (H100,
        # swiglu_cutlass_probe_h100_bulk.json), and the model job's search chose them too.
        point = super().default(problem)
        return {**point, "STORE": "bulk" if point["SCHEDULE"] == "cooperative" else "pair"}

    def check(self, problem: Problem, params: Mapping[str, Any]) -> str | None:
        if params.get("STORE") == "bulk" and params.get("SCHEDULE") != "cooperative":
            return "bulk stores copy a tile that both warpgroups write: the cooperative schedule"
        return super().check(problem, params)

    def fixed(self, problem: Problem) -> dict[str, Any]:
        return {**super().fixed(problem), "ROW_SCALE": has_row_scale(problem)}

    def starting_points(self, problem: Problem) -> list[dict[str, Any]]:
        """The probes' leaders (swiglu_cutlass_probe_h200_tanh.json, _h100_bulk.json): the
        cooperative 128x256 tile with bulk stores, then pair stores, and ping-pong tiles; the
        first and a ping-pong one in the matmul winners' order too (no build of their own).
        None for a few rows (decode): 64-row tiles would read the weights for mostly empty
        rows, where the dual family streams them."""
        if problem.shape[0] <= SMALL_M:
            return []
        pingpong = {**PINGPONG, "STORE": "pair"}
        changes: list[dict[str, Any]] = [
            {},
            {"STORE": "pair"},
            pingpong,
            {**PINGPONG, "STORE": "quad"},
            {"TILE_M": 64, "CLUSTER_M": 1, "SCHEDULE": "pingpong", "STORE": "pair"},
            ALONG_N,
            {**pingpong, **ALONG_N},
        ]
        points = [{**self.default(problem), **c} for c in changes]
        return [p for p in points if self.check(problem, p) is None]
