"""matmul_cuda_wmma: a CUDA C++ starting point (WMMA tensor cores), so the CUDA backend is used.

Shared-memory tiles of A and B (zero-filled past the edges, strided loads so every layout
works), warps laid out WARPS_M x WARPS_N, each holding (BLOCK_M/WARPS_M/16) x
(BLOCK_N/WARPS_N/16) 16x16x16 accumulator fragments in fp32, and a per-warp staged epilogue
(bias, activation, bounds-checked store). The meta-parameters reach the CUDA code as -D flags,
so two candidates differ only in the constants at the top of the module. Deliberately plain:
no cp.async, TMA or wgmma yet; that is the agents' job.
"""

from __future__ import annotations

from kernels.ops.matmul.families.common import fixed_constants, serves_residual
from kernels.problem import Family, ParamSpace, Problem
from kernels.render import render_module

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

// ELEM, BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N, HAS_BIAS, ACTIVATION: -D flags.
constexpr int WARP_M = BLOCK_M / WARPS_M;  // rows of C per warp
constexpr int WARP_N = BLOCK_N / WARPS_N;
constexpr int FRAGS_M = WARP_M / 16;
constexpr int FRAGS_N = WARP_N / 16;
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int PAD = 8;  // keeps rows 16-byte aligned and breaks shared-memory bank conflicts

// torch builds extensions with __CUDA_NO_BFLOAT16_CONVERSIONS__ (and the half equivalent),
// so conversions are spelled out.
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }

__device__ __forceinline__ float activate(float x) {
#if ACTIVATION == 1
  return fmaxf(x, 0.0f);
#elif ACTIVATION == 2
  return x / (1.0f + __expf(-x));
#elif ACTIVATION == 3
  float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
#elif ACTIVATION == 4
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
#else
  return x;
#endif
}

__global__ void __launch_bounds__(THREADS) matmul_wmma_kernel(
    const ELEM* __restrict__ a, const ELEM* __restrict__ b, ELEM* __restrict__ c,
    const ELEM* __restrict__ bias, int M, int N, int K,
    long sam, long sak, long sbk, long sbn, long scm) {
  __shared__ __align__(32) ELEM a_tile[BLOCK_M][BLOCK_K + PAD];
  __shared__ __align__(32) ELEM b_tile[BLOCK_K][BLOCK_N + PAD];
  __shared__ __align__(32) float staging[WARPS_M * WARPS_N][16 * 16];

  const int m0 = blockIdx.y * BLOCK_M, n0 = blockIdx.x * BLOCK_N;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FRAGS_M][FRAGS_N];
  for (int i = 0; i < FRAGS_M; ++i)
    for (int j = 0; j < FRAGS_N; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
    for (int e = threadIdx.x; e < BLOCK_M * BLOCK_K; e += THREADS) {
      int r = e / BLOCK_K, kk = e % BLOCK_K, gm = m0 + r, gk = k0 + kk;
      a_tile[r][kk] = (gm < M && gk < K) ? a[gm * sam + gk * sak] : from_float<ELEM>(0.0f);
    }
    for (int e = threadIdx.x; e < BLOCK_K * BLOCK_N; e += THREADS) {
      int kk = e / BLOCK_N, cn = e % BLOCK_N, gk = k0 + kk, gn = n0 + cn;
      b_tile[kk][cn] = (gk < K && gn < N) ? b[gk * sbk + gn * sbn] : from_float<ELEM>(0.0f);
    }
    __syncthreads();
    for (int kk = 0; kk < BLOCK_K; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, ELEM, wmma::row_major> fa[FRAGS_M];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, ELEM, wmma::row_major> fb;
      for (int i = 0; i < FRAGS_M; ++i)
        wmma::load_matrix_sync(fa[i], &a_tile[warp_m * WARP_M + i * 16][kk], BLOCK_K + PAD);
      for (int j = 0; j < FRAGS_N; ++j) {
        wmma::load_matrix_sync(fb, &b_tile[kk][warp_n * WARP_N + j * 16], BLOCK_N + PAD);
        for (int i = 0; i < FRAGS_M; ++i) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
      }
    }
    __syncthreads();
  }

  // Epilogue: each fragment goes through the warp's staging square, then to global memory.
  float* stage = staging[warp];
  for (int i = 0; i < FRAGS_M; ++i) {
    for (int j = 0; j < FRAGS_N; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        int gm = m0 + warp_m * WARP_M + i * 16 + e / 16;
        int gn = n0 + warp_n * WARP_N + j * 16 + e % 16;
        if (gm < M && gn < N) {
          float v = stage[e];
#if HAS_BIAS
          v += to_float(bias[gn]);
#endif
          c[gm * scm + gn] = from_float<ELEM>(activate(v));
        }
      }
      __syncwarp();
    }
  }
}

void matmul(torch::Tensor a, torch::Tensor b, torch::Tensor bias, torch::Tensor out) {
  // a and b are the logical (M, K) and (K, N) views; any strides.
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  dim3 grid((N + BLOCK_N - 1) / BLOCK_N, (M + BLOCK_M - 1) / BLOCK_M);
  auto stream = at::cuda::getCurrentCUDAStream();
  matmul_wmma_kernel<<<grid, THREADS, 0, stream>>>(
      reinterpret_cast<const ELEM*>(a.data_ptr()), reinterpret_cast<const ELEM*>(b.data_ptr()),
      reinterpret_cast<ELEM*>(out.data_ptr()), reinterpret_cast<const ELEM*>(bias.data_ptr()),
      M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

TEMPLATE = (
    '''$HEADER

from harness.cuda_ext import load_cuda

$CONSTANTS

ACTIVATION_CODES = {"none": 0, "relu": 1, "silu": 2, "gelu": 3, "gelu_erf": 4}
CPP_SOURCE = "void matmul(torch::Tensor a, torch::Tensor b, torch::Tensor bias, torch::Tensor out);"
CUDA_SOURCE = r"""'''
    + CUDA_SOURCE.replace(
        "#include <mma.h>", "#include <mma.h>\n#include <ATen/cuda/CUDAContext.h>"
    )
    + '''"""

# Built (or loaded from the compile cache) at import, as every CUDA C++ family: the screen's
# and the judge's compile children build it ahead by importing it. Built lazily in prepare(), it
# was compiled by nvcc inside the screening child instead, whose 30-s turn it then outran
# (2x H200 worker-scaling run, 2026-11-28: every point of a task's first screen lost that way).
_extension = load_cuda(
    "kf_matmul_wmma",
    cuda_source=CUDA_SOURCE,
    cpp_source=CPP_SOURCE,
    functions=["matmul"],
    extra_cuda_cflags=(
        "-O3",
        "-lineinfo",
        f"-DELEM={ELEM}",
        f"-DBLOCK_M={BLOCK_M}",
        f"-DBLOCK_N={BLOCK_N}",
        f"-DBLOCK_K={BLOCK_K}",
        f"-DWARPS_M={WARPS_M}",
        f"-DWARPS_N={WARPS_N}",
        f"-DHAS_BIAS={int(HAS_BIAS)}",
        f"-DACTIVATION={ACTIVATION_CODES[ACTIVATION]}",
    ),
)


def run(a, b, *rest, out):
    a_view = a.T if A_TRANS else a  # logical (M, K)
    b_view = b.T if B_TRANS else b  # logical (K, N)
    bias = rest[0] if HAS_BIAS else out  # any tensor when there is no bias; never read
    _extension.matmul(a_view, b_view, bias, out)
'''
)


class CudaWmmaMatmul(Family):
    name = "matmul_cuda_wmma"
    op = "matmul"
    backend = "cuda"
    description = "CUDA C++ WMMA starter: shared-memory tiles, fp32 fragments, staged epilogue"

    def serves(self, layout: str) -> bool:
        return serves_residual(self, layout)

    def space(self, problem: Problem) -> ParamSpace:
        return ParamSpace(
            {
                "BLOCK_M": [32, 64, 128],
                "BLOCK_N": [32, 64, 128],
                "BLOCK_K": [16, 32, 64],
                "WARPS_M": [1, 2, 4],
                "WARPS_N": [1, 2, 4],
            },
            constraints=(
                "BLOCK_M % (16*WARPS_M) == 0 and BLOCK_N % (16*WARPS_N) == 0",
                "static smem: (BLOCK_M*(BLOCK_K+8) + BLOCK_K*(BLOCK_N+8))*elt + warps*1 KiB <= 48 KiB",
            ),
        )

    def default(self, problem: Problem) -> dict:
        return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "WARPS_M": 2, "WARPS_N": 4}

    def check(self, problem: Problem, params) -> str | None:
        if (why := super().check(problem, params)) is not None:
            return why
        p = params
        if problem.dtype not in ("bf16", "fp16"):
            return f"{problem.dtype} is not built (WMMA fragments of bf16 and fp16 only)"
        if p["BLOCK_M"] % (16 * p["WARPS_M"]) or p["BLOCK_N"] % (16 * p["WARPS_N"]):
            return "each warp needs whole 16x16 fragments"
        elt = problem.torch_dtype.itemsize
        smem = (p["BLOCK_M"] * (p["BLOCK_K"] + 8) + p["BLOCK_K"] * (p["BLOCK_N"] + 8)) * elt
        smem += p["WARPS_M"] * p["WARPS_N"] * 1024
        if smem > 48 * 1024:
            return f"needs {smem} bytes of static shared memory, over 48 KiB"
        return None

    def render(self, problem: Problem, params) -> str:
        fixed = {
            "ELEM": "__nv_bfloat16" if problem.dtype == "bf16" else "__half",
            **fixed_constants(problem),
        }
        return render_module(
            TEMPLATE,
            family=self.name,
            problem=problem,
            params={k: params[k] for k in self.space(problem).choices},
            fixed=fixed,
            summary=self.description,
        )
