"""qkv_rotary_cutlass_sm90: the q, k and v projections as one CUTLASS 3.x Hopper GEMM over the
interleaved weight (layouts "i8[+bias][+rowscale]+kv_heads=<n>"; +rowscale: a folded RMSNorm's
row scale applied first), bias and rotary
embedding in a register epilogue; one shared library per configuration. GPT-J's rotary
(layouts "pairs+rot=<R>+head_dim=<D>+kv_heads=<n>": adjacent pairs of the first R dims) over the three
weights as they are, one after the other, in the same GEMM (KF_ROPE 1).

The C++ (kernels/epilogue_gemm_sm90.cuh, then cutlass_sm90.cu beside this file, pasted into
every candidate) runs the (M, (H + 2 HKV) D, K) GEMM with CUTLASS's warp-specialized TMA +
wgmma mainloop and its own epilogue: the interleave puts each rotary pair's two columns (j and
D/2 + j of a head) 8 columns apart, where wgmma's accumulator layout gives both to one thread,
so it adds the bias, rotates q's and k's heads with the token's cos/sin and stores every head
in its natural order, straight from registers. Compiled, PyTorch runs the projections as three
GEMMs and the rotation (and the layout attention wants) as passes over their outputs.

Which of the weight's rows are q's, k's and v's is the problem's (H, HKV, D): a candidate is
rendered with them as constants (the op's sweep keeps them); D is the C++'s too, so a tile of
whole heads loads each row's cos/sin once for all of them. The alignment rule is the
swiglu family's: K a multiple of 8 elements (TMA), else run() zero-pads K into aligned copies,
a correctness path for odd sweep shapes that check() refuses for a problem's own shape.
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
from kernels.ops.qkv_rotary.op import INTERLEAVED, PAIRS, has_row_scale, is_pairs, rotary_dim
from kernels.problem import Problem

SOURCE = Path(__file__).with_name("cutlass_sm90.cu")
CUDA_SOURCE = cuda_source(SOURCE)

# The candidate after kernels/epilogue_gemm.py's CANDIDATE_HEAD.
OP_PART = '''
ROPE_CODES = {"half": 0, "pairs": 1}  # rotate-half over "i8"'s interleave; GPT-J's pairs
EPILOGUE_CODES = {"register": 0, "tma": 1}
LIBRARY = CudaLibrary(
    "kf_qkv_rotary_cutlass_sm90",
    CUDA_SOURCE,
    (
        *tile_flags(),
        f"-DKF_HEAD_DIM={HEAD_DIM}",
        f"-DKF_ROPE={ROPE_CODES[ROPE]}",
        f"-DKF_ROTARY_DIM={ROTARY_DIM}",
        f"-DKF_ROW_SCALE={int(ROW_SCALE)}",
        f"-DKF_EPILOGUE={EPILOGUE_CODES[EPILOGUE]}",
    ),
    headers=(CUTLASS,),
)
ABI_VERSION = 3

# The C prototypes in CUDA_SOURCE, as the harness binds them ("tensor": the tensor's address).
FUNCTIONS = {
    "kf_abi_version": CFunction("int"),
    "kf_qkv_rotary": CFunction(
        "int",
        ("tensor",) * 7  # x, w (interleaved), bias (or none), cos, sin, row scale (or none), out
        + ("int",) * 5  # m, n, k, head_dim, rotated columns
        + ("int64_t",) * 4  # row strides of x, w, cos and sin, out
        + ("int",) * 2  # the tile order: swizzle, raster
        + ("tensor", "int64_t", "void*"),  # workspace, its bytes, the CUDA stream
    ),
    "kf_workspace_size": CFunction("int64_t", ("int",) * 5),  # m, n, k, swizzle, raster
    "kf_last_error": CFunction("const char*"),
    "kf_describe": CFunction("const char*"),
}

# Built (or loaded from the compile cache) at import, so a precompile builds it ahead.
_LIB = checked(load_library(LIBRARY, FUNCTIONS), ABI_VERSION)


def fast_path_blocker(x, w, cos, sin, bias, out):
    """Why these tensors cannot go straight to the kernel (None when they can): TMA reads x
    and w in 16-byte rows; the epilogue reads cos, sin and the bias and writes out in pairs."""
    out_align = ALIGN if EPILOGUE == "tma" else 2  # TMA stores whole 16-byte rows
    wanted = [("x", x, ALIGN), ("w", w, ALIGN), ("cos", cos, 2), ("sin", sin, 2)]
    wanted.append(("out", out, out_align))
    for name, t, align in wanted + ([("bias", bias, 2)] if bias is not None else []):
        if not aligned(t, align):
            return f"{name} {tuple(t.shape)} stride {t.stride()}: not aligned for the kernel"
    return None


def _launch(x, w, cos, sin, bias, scale, out):
    m, n = out.shape
    k = x.shape[1]
    ws_bytes, ws = workspace(_LIB, m, n, k, out.device)
    code = _LIB.kf_qkv_rotary(
        x, w, bias, cos, sin, scale, out, m, n, k, HEAD_DIM, (HEADS + KV_HEADS) * HEAD_DIM,
        x.stride(0), w.stride(0), cos.stride(0), out.stride(0),
        *tile_order(), ws, ws_bytes, torch.cuda.current_stream(out.device).cuda_stream,
    )
    if code:
        raise RuntimeError(f"kf_qkv_rotary_cutlass_sm90: {_LIB.kf_last_error()} (code {code})")


def _run_padded(x, w, cos, sin, bias, scale, out):
    """Correctness path for strides or a K that TMA cannot take: x and w zero-padded to whole
    16-byte rows, aligned copies of the rest, the same kernel."""
    m, n = out.shape
    kp = -(-x.shape[1] // ALIGN) * ALIGN
    tables = [t.contiguous().clone() for t in (cos, sin)]
    bias_p = None if bias is None else bias.contiguous().clone()
    out_p = torch.empty(m, n, dtype=out.dtype, device=out.device)
    _launch(padded(x, m, kp), padded(w, w.shape[0], kp), *tables, bias_p, scale, out_p)
    out.copy_(out_p)


def run(x, w, cos, sin, *rest, out):
    # rest: the bias (layouts "+bias"), then a folded norm's float32 row scale ("+rowscale")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[DTYPE]
    scale = rest[-1] if ROW_SCALE and rest else None
    bias = rest[:-1] if ROW_SCALE else rest
    if ROW_SCALE and (scale is None or scale.dtype != torch.float32):
        raise TypeError("a +rowscale layout takes a float32 row scale last")
    if any(t.dtype != dtype for t in (x, w, cos, sin, out, *bias)):
        raise TypeError(f"this candidate is built for {DTYPE} tensors only")
    if 2 * cos.shape[1] != ROTARY_DIM or out.shape[1] != (HEADS + 2 * KV_HEADS) * HEAD_DIM:
        raise ValueError(
            f"built for {HEADS} q heads and {KV_HEADS} k/v heads of {HEAD_DIM}, "
            f"{ROTARY_DIM} of them rotated: out {tuple(out.shape)}, cos {tuple(cos.shape)}"
        )
    if not out.is_cuda:
        raise RuntimeError("qkv_rotary_cutlass_sm90 runs on CUDA tensors only (an sm_90 GPU)")
    b = bias[0] if bias else None
    s = scale.contiguous() if scale is not None else None  # one float a row, for the epilogue
    with torch.cuda.device(out.device):
        if fast_path_blocker(x, w, cos, sin, b, out) is None:
            _launch(x, w, cos, sin, b, s, out)
        else:
            _run_padded(x, w, cos, sin, b, s, out)
'''


class CutlassSm90QkvRotary(EpilogueGemmFamily):
    name = "qkv_rotary_cutlass_sm90"
    op = "qkv_rotary"
    layouts = (
        "i8+kv_heads=<n>",
        "i8+bias+kv_heads=<n>",
        "i8[+bias]+rowscale+kv_heads=<n>",
        "pairs+rot=<R>+head_dim=<D>+kv_heads=<n>",
    )
    description = (
        "one CUTLASS 3.x Hopper GEMM over the interleaved q/k/v weight (TMA + wgmma, "
        "warp-specialized), bias and rotary in a register epilogue (GPT-J's rotary also "
        "in CUTLASS's TMA-store epilogue)"
    )
    # EPILOGUE: "register" stores each thread's outputs from registers (every layout); "tma"
    # (GPT-J's pairs alone) turns them in an EVT leaf of CUTLASS's collective epilogue, which
    # stores through shared memory with TMA as CUTLASS's plain GEMMs do
    extra_choices = {"EPILOGUE": ["register", "tma"]}
    build_params = (*TILE_CHOICES, *extra_choices)

    def serves(self, layout: str) -> bool:
        return layout.startswith((INTERLEAVED, PAIRS))

    def default(self, problem: Problem) -> dict[str, Any]:
        """The TMA epilogue where it serves (GPT-J's pairs): at GPT-J's q/k/v on an H100 it ran
        275 us where the register epilogue ran 303 and cuBLAS's GEMM alone 263.5
        (qkv_rotary_cutlass_probe_h100_v2.json)."""
        epilogue = "register" if _tma_refusal(problem) else "tma"
        return {**super().default(problem), "EPILOGUE": epilogue}

    def check(self, problem: Problem, params: Mapping[str, Any]) -> str | None:
        if params.get("EPILOGUE") == "tma" and (refusal := _tma_refusal(problem)):
            return refusal
        return super().check(problem, params)

    def template(self) -> str:
        return candidate_template(OP_PART, SOURCE)

    def starting_points(self, problem: Problem) -> list[dict[str, Any]]:
        """The swiglu family's leaders (the same GEMM, a lighter epilogue), and the default
        tile under stream-K: q/k/v's N is a few heads, so whole tiles leave SMs idle in the
        last wave; the leading tiles in the matmul winners' order too (no build of their
        own). None for a few rows (decode), where the dual family streams the weights."""
        if problem.shape[0] <= SMALL_M:
            return []
        changes: list[dict[str, Any]] = [
            {},
            {"SCHEDULER": "streamk"},
            PINGPONG,
            {"TILE_M": 64, "CLUSTER_M": 1, "SCHEDULE": "pingpong"},
            ALONG_N,
            {**PINGPONG, **ALONG_N},
            {"EPILOGUE": "register"},  # pairs layouts: the default's other epilogue
            {**ALONG_N, "EPILOGUE": "register"},
        ]
        points = []
        for change in changes:
            point = {**self.default(problem), **change}
            if point not in points and self.check(problem, point) is None:
                points.append(point)
        return points

    def fixed(self, problem: Problem) -> dict[str, Any]:
        _, h, hkv, d, _ = problem.shape
        return {
            **super().fixed(problem),
            "HEADS": h,
            "KV_HEADS": hkv,
            "HEAD_DIM": d,
            "ROPE": "pairs" if is_pairs(problem) else "half",
            "ROTARY_DIM": rotary_dim(problem),
            "ROW_SCALE": has_row_scale(problem),
        }


def _tma_refusal(problem: Problem) -> str | None:
    """Why the TMA epilogue cannot take this problem (None when it can)."""
    _, h, hkv, d, _ = problem.shape
    if not is_pairs(problem):
        return "the TMA epilogue is built for GPT-J's rotary (pairs layouts) alone"
    if (h + 2 * hkv) * d % 8:
        return "the TMA epilogue stores 16-byte rows: (H + 2 HKV) D must be a multiple of 8"
    return None
