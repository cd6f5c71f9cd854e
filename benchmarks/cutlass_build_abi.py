"""Building and opening CUTLASS builds from a probe: the nvcc line of a Hopper GEMM's tile,
cluster and schedule (every family's source reads them alike), `matmul_cutlass_sm90`'s plain
GEMM at that config (CUTLASS's own epilogue, nothing added: the floor an op's fused epilogue
is measured against), and a build's entry point opened with ctypes: its C signature,
kf_workspace_size's and the two strings every family exports (kf_last_error, kf_describe).
The probes call a build directly, outside the harness, to time it beside others."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

PTR, INT, INT64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64

PLAIN_SOURCE = Path(__file__).resolve().parents[1] / "kernels/ops/matmul/families/cutlass_sm90.cu"
# kf_gemm's run-time arguments: one split, CUTLASS's own tile order (swizzle 1, raster 0: the
# probes' TILE_ORDER), data-parallel (decomposition 1)
PLAIN_RUNTIME = (1, 1, 0, 1)


def gemm_command(tile: tuple[int, int, int], cluster: tuple[int, int], schedule: int) -> list[str]:
    """nvcc and the flags for a GEMM of this tile (M, N, K), cluster (M, N) and schedule (0
    cooperative, 1 ping-pong): persistent, as many stages as fit, bf16."""
    import cutlass_library

    include = Path(cutlass_library.__file__).parent / "source/include"
    (tm, tn, tk), (cm, cn) = tile, cluster
    return [
        "nvcc", "-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
        "-gencode=arch=compute_90a,code=sm_90a", f"-I{include}", "-Xcompiler", "-fPIC",
        "-shared", "-Xptxas", "-v", "-DKF_ELEM=0", f"-DKF_TILE_M={tm}", f"-DKF_TILE_N={tn}",
        f"-DKF_TILE_K={tk}", f"-DKF_CLUSTER_M={cm}", f"-DKF_CLUSTER_N={cn}",
        f"-DKF_SCHEDULE={schedule}", "-DKF_SCHEDULER=0", "-DKF_STAGES=0",
    ]  # fmt: skip


def plain_gemm_command(
    tile: tuple[int, int, int], cluster: tuple[int, int], schedule: int, out: Path
) -> list[str]:
    """matmul_cutlass_sm90's build of this config: x (M, K) @ w (N, K)^T, nothing added."""
    return gemm_command(tile, cluster, schedule) + [
        "-DKF_A_K_MAJOR=1", "-DKF_B_K_MAJOR=1", "-DKF_BIAS=0", "-DKF_ACT=0", "-DKF_RES=0",
        str(PLAIN_SOURCE), "-o", str(out),
    ]  # fmt: skip


def open_build(path: Path, entry: str, argtypes: list, workspace_ints: int) -> ctypes.CDLL:
    """entry's argtypes (returning an int error code) and kf_workspace_size's int count."""
    lib = ctypes.CDLL(str(path))
    getattr(lib, entry).argtypes = argtypes
    getattr(lib, entry).restype = INT
    lib.kf_workspace_size.argtypes = [INT] * workspace_ints
    lib.kf_workspace_size.restype = INT64
    lib.kf_last_error.restype = ctypes.c_char_p
    lib.kf_describe.restype = ctypes.c_char_p
    return lib


def open_plain(path: Path) -> ctypes.CDLL:
    # matmul_cutlass_sm90's kf_gemm, ABI 2: a, b, d, bias, residual, m, n, k, lda, ldb, ldd,
    # ldr, splits, swizzle, raster, decomposition, workspace, its bytes, stream
    return open_build(
        path, "kf_gemm", [PTR] * 5 + [INT] * 3 + [INT64] * 4 + [INT] * 4 + [PTR, INT64, PTR], 7
    )


def plain_gemm(lib: ctypes.CDLL, x, w) -> Callable:
    """A call of the plain build: out (M, N) = x (M, K) @ w (N, K)^T on torch's stream, into
    one output and workspace allocated here (contiguous bf16 CUDA tensors)."""
    import torch

    m, k = x.shape
    n = w.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=torch.bfloat16)
    ws = torch.empty(max(1, lib.kf_workspace_size(m, n, k, *PLAIN_RUNTIME)), device=x.device,
                     dtype=torch.uint8)  # fmt: skip
    stream = torch.cuda.current_stream().cuda_stream

    def gemm():
        code = lib.kf_gemm(x.data_ptr(), w.data_ptr(), out.data_ptr(), None, None, m, n, k,
                           k, k, n, n, *PLAIN_RUNTIME, ws.data_ptr(), ws.numel(), stream)  # fmt: skip
        if code:
            raise RuntimeError(lib.kf_last_error().decode())
        return out

    return gemm
