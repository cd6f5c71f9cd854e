// One CUTLASS 3.x Hopper GEMM configuration behind a plain C ABI (no torch headers), called by
// a matmul_cutlass_sm90 candidate through the C types it declares (the harness binds them).
// D = act(A @ B + bias) + residual, fp32 accumulation.
//
// Compile-time configuration (-D flags, set by the candidate's constants):
//   KF_ELEM        0: bf16, 1: fp16
//   KF_A_K_MAJOR   1: A is stored (M, K) row-major; 0: stored (K, M) row-major ("TN")
//   KF_B_K_MAJOR   1: B is stored (N, K) row-major ("NT"); 0: stored (K, N) row-major
//   KF_TILE_M/N/K  CTA tile;  KF_CLUSTER_M/N  thread-block cluster (TMA multicast)
//   KF_SCHEDULE    0: warp-specialized cooperative, 1: ping-pong
//   KF_SCHEDULER   0: persistent, 1: stream-K (also split-K and data-parallel at run time),
//                  2: batched split-K: K cut into `splits` equal batches of one persistent GEMM
//                  that writes fp32 partials to the workspace, summed in a fixed order (+ bias,
//                  activation) by a second kernel: deterministic, no turnstile between CTAs
//   KF_STAGES      mainloop stages, 0: as many as fit beside the epilogue
//   KF_BIAS        1: + bias[N];  KF_ACT  0 none, 1 relu, 2 silu, 3 gelu (tanh form),
//                  4 gelu (erf form)
//   KF_RES         1: + residual[M, N] (the epilogue's source C, beta = 1; layouts "+res"
//                  have no activation, so its place after the activation is moot)
// Run-time: raster order, swizzle, splits and decomposition (scheduler arguments), sizes,
// leading dimensions, the stream and the workspace.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

using namespace cute;

#ifndef KF_RES
#define KF_RES 0
#endif

#if KF_ELEM == 0
using Element = cutlass::bfloat16_t;
#else
using Element = cutlass::half_t;
#endif
using Accumulator = float;
constexpr int kAlignment = 16 / sizeof(Element);  // TMA: 16-byte aligned rows

using LayoutA = cute::conditional_t<KF_A_K_MAJOR, cutlass::layout::RowMajor,
                                    cutlass::layout::ColumnMajor>;
using LayoutB = cute::conditional_t<KF_B_K_MAJOR, cutlass::layout::ColumnMajor,
                                    cutlass::layout::RowMajor>;
using LayoutD = cutlass::layout::RowMajor;

using TileShape = Shape<Int<KF_TILE_M>, Int<KF_TILE_N>, Int<KF_TILE_K>>;
using ClusterShape = Shape<Int<KF_CLUSTER_M>, Int<KF_CLUSTER_N>, _1>;

#if KF_SCHEDULE == 0
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#else
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#endif

#if KF_SCHEDULER == 1
using TileScheduler = cutlass::gemm::StreamKScheduler;
#else
using TileScheduler = cutlass::gemm::PersistentScheduler;
#endif
constexpr bool kBatchedSplitK = KF_SCHEDULER == 2;

#if KF_ACT == 1
template <class T> using Activation = cutlass::epilogue::thread::ReLu<T>;
#elif KF_ACT == 2
template <class T> using Activation = cutlass::epilogue::thread::SiLu<T>;
#elif KF_ACT == 3
template <class T> using Activation = cutlass::epilogue::thread::GELU_taylor<T>;
#elif KF_ACT == 4
template <class T> using Activation = cutlass::epilogue::thread::GELU<T>;
#else
template <class T> using Activation = cutlass::epilogue::thread::Identity<T>;
#endif

// The source matrix C is the residual (beta = 1) or none (ElementC = void: nothing loaded).
// Batched split-K writes plain fp32 partials; its reduce kernel applies bias, activation
// and residual.
#if KF_RES && KF_SCHEDULER != 2
using ElementC = Element;
#else
using ElementC = void;
#endif
#if KF_SCHEDULER == 2
using ElementOut = float;
using Fusion = cutlass::epilogue::fusion::LinearCombination<float, float, void, float>;
#elif KF_BIAS
using ElementOut = Element;
using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<
    Activation, Element, float, Element, ElementC, float>;
#else
using ElementOut = Element;
using Fusion = cutlass::epilogue::fusion::LinearCombination<Element, float, ElementC, float>;
#endif
constexpr int kAlignmentOut = 16 / sizeof(ElementOut);

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, Accumulator, float, ElementC, LayoutD,
    kAlignmentOut, ElementOut, LayoutD, kAlignmentOut, EpilogueSchedule, Fusion>::CollectiveOp;

#if KF_STAGES == 0
using Stages = cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
    sizeof(typename CollectiveEpilogue::SharedStorage))>;
#else
using Stages = cutlass::gemm::collective::StageCount<KF_STAGES>;
#endif

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlignment, Element,
    LayoutB, kAlignment, Accumulator, TileShape, ClusterShape, Stages,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                        CollectiveMainloop, CollectiveEpilogue,
                                                        TileScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
using Arguments = typename Gemm::Arguments;

namespace kf {

// Batched split-K's second kernel: out[r, c..c+7] = act(sum_s parts[s, r, c..c+7] + bias)
// + residual[r, c..c+7], the splits added in order (deterministic); 16-byte loads and stores
// (N % 8 == 0).
__global__ void reduce_splits(const float* __restrict__ parts, Element* __restrict__ d,
                              const Element* __restrict__ bias,
                              const Element* __restrict__ residual, int m, int n, int64_t ldd,
                              int64_t ldr, int splits) {
  const int64_t groups = n / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= groups * m) return;
  const int64_t row = idx / groups;
  const int64_t col = (idx % groups) * 8;
  const int64_t plane = static_cast<int64_t>(m) * n;
  const float* p = parts + row * n + col;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int s = 0; s < splits; ++s) {
    const float4 lo = *reinterpret_cast<const float4*>(p + s * plane);
    const float4 hi = *reinterpret_cast<const float4*>(p + s * plane + 4);
    acc[0] += lo.x; acc[1] += lo.y; acc[2] += lo.z; acc[3] += lo.w;
    acc[4] += hi.x; acc[5] += hi.y; acc[6] += hi.z; acc[7] += hi.w;
  }
  cutlass::AlignedArray<Element, 8> out;
  Activation<float> act;
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < 8; ++i) {
    float v = acc[i];
#if KF_BIAS
    v += static_cast<float>(bias[col + i]);
#endif
    v = act(v);
#if KF_RES
    v += static_cast<float>(residual[row * ldr + col + i]);
#endif
    out[i] = Element(v);
  }
  (void)bias;
  (void)residual;
  (void)ldr;
  *reinterpret_cast<cutlass::AlignedArray<Element, 8>*>(d + row * ldd + col) = out;
}

}  // namespace kf

namespace {

// The stride type of one operand with its single dynamic non-batch mode set to `ld`;
// the batch stride is the whole matrix (one batch), which keeps it 16-byte aligned for TMA.
template <class Stride>
Stride strided(int64_t ld, int64_t rows) {
  Stride s{};
  if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(get<0>(s))>>) {
    get<1>(s) = ld;
  } else {
    get<0>(s) = ld;
  }
  get<2>(s) = ld * rows;
  return s;
}

// Batched split-K: the largest split count <= `splits` that cuts K into whole 16-byte pieces.
int batch_splits(int k, int splits) {
  int s = splits < 1 ? 1 : splits;
  while (s > 1 && k % (s * kAlignment) != 0) --s;
  return s;
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

thread_local char g_error[512] = "";
std::mutex g_mutex;
Gemm g_gemm;  // holds the params of the last initialize (TMA descriptors): reused when equal

struct CallKey {
  const void *a, *b, *d, *bias, *residual, *workspace;
  int m, n, k, device;
  int64_t lda, ldb, ldd, ldr;
  int splits, swizzle, raster, decomposition;
  bool operator==(const CallKey& o) const { return std::memcmp(this, &o, sizeof(o)) == 0; }
};
CallKey g_last{};
bool g_has_last = false;

int sm_count(int device) {
  static int counts[64] = {0};
  if (device < 0 || device >= 64) return 0;
  if (counts[device] == 0) {
    cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device);
  }
  return counts[device];
}

// Batched split-K: batch l multiplies A[:, l*kc:(l+1)*kc] by B[l*kc:(l+1)*kc, :] into the fp32
// plane l of `d` (m x n, dense). The batch strides step along K inside the same operands.
template <class Stride>
Stride k_batched(int64_t ld, bool k_contiguous, int64_t kc) {
  Stride s = strided<Stride>(ld, 0);
  get<2>(s) = k_contiguous ? kc : kc * ld;
  return s;
}

Arguments make_arguments(const void* a, const void* b, void* d, const void* bias,
                         const void* residual, int m, int n, int k, int64_t lda, int64_t ldb,
                         int64_t ldd, int64_t ldr, int splits, int swizzle, int raster,
                         int decomposition, int device) {
  Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {m, n, k, 1};
  args.mainloop.ptr_A = static_cast<const Element*>(a);
  args.mainloop.dA = strided<typename GemmKernel::StrideA>(lda, KF_A_K_MAJOR ? m : k);
  args.mainloop.ptr_B = static_cast<const Element*>(b);
  args.mainloop.dB = strided<typename GemmKernel::StrideB>(ldb, KF_B_K_MAJOR ? n : k);
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = cute::is_void_v<ElementC> ? 0.0f : 1.0f;
#if KF_BIAS && KF_SCHEDULER != 2
  args.epilogue.thread.bias_ptr = static_cast<const Element*>(bias);
#else
  (void)bias;
#endif
  if constexpr (cute::is_void_v<ElementC>) {
    (void)residual;
    (void)ldr;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = strided<typename GemmKernel::StrideC>(ldd, m);
  } else {
    args.epilogue.ptr_C = static_cast<const ElementC*>(residual);
    args.epilogue.dC = strided<typename GemmKernel::StrideC>(ldr, m);
  }
  args.epilogue.ptr_D = static_cast<ElementOut*>(d);
  args.epilogue.dD = strided<typename GemmKernel::StrideD>(ldd, m);
  if constexpr (kBatchedSplitK) {  // `d` is the fp32 partials, `k` the whole K
    const int s = batch_splits(k, splits);
    const int64_t kc = k / s;
    args.problem_shape = {m, n, static_cast<int>(kc), s};
    args.mainloop.dA = k_batched<typename GemmKernel::StrideA>(lda, KF_A_K_MAJOR, kc);
    args.mainloop.dB = k_batched<typename GemmKernel::StrideB>(ldb, KF_B_K_MAJOR, kc);
    args.epilogue.dD = strided<typename GemmKernel::StrideD>(n, m);  // dense planes
    args.epilogue.dC = args.epilogue.dD;
  }
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count(device);
  using Raster = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = static_cast<Raster>(raster);
  args.scheduler.max_swizzle_size = swizzle;
#if KF_SCHEDULER == 1
  using Decomposition = decltype(args.scheduler.decomposition_mode);
  args.scheduler.splits = splits;
  args.scheduler.decomposition_mode = static_cast<Decomposition>(decomposition);
  // Deterministic: the partial sums are added in a fixed order (the default; said here).
  args.scheduler.reduction_mode = decltype(args.scheduler.reduction_mode)::Deterministic;
#else
  (void)splits;
  (void)decomposition;
#endif
  return args;
}

// Batched split-K keeps its fp32 partials at the start of the workspace.
int64_t partials_bytes(int m, int n, int k, int splits) {
  if constexpr (!kBatchedSplitK) return 0;
  return round_up(static_cast<int64_t>(batch_splits(k, splits)) * m * n * sizeof(float), 256);
}

int fail(int code, const char* what) {
  std::snprintf(g_error, sizeof(g_error), "%s", what);
  return code;
}

}  // namespace

extern "C" {

// Bumped when the signatures below change; the candidate checks it after loading.
int kf_abi_version() { return 2; }

const char* kf_last_error() { return g_error; }

// What was compiled, for the resource report and sanity checks.
const char* kf_describe() {
  static char text[256];
  std::snprintf(text, sizeof(text),
                "tile=%dx%dx%d cluster=%dx%d schedule=%d scheduler=%d stages=%d "
                "smem=%d threads=%d bias=%d act=%d res=%d",
                KF_TILE_M, KF_TILE_N, KF_TILE_K, KF_CLUSTER_M, KF_CLUSTER_N, KF_SCHEDULE,
                KF_SCHEDULER, (int)CollectiveMainloop::DispatchPolicy::Stages,
                (int)GemmKernel::SharedStorageSize, (int)GemmKernel::MaxThreadsPerBlock,
                KF_BIAS, KF_ACT, KF_RES);
  return text;
}

// Bytes of device workspace kf_gemm needs for these sizes and scheduler arguments.
int64_t kf_workspace_size(int m, int n, int k, int splits, int swizzle, int raster,
                          int decomposition) {
  int device = 0;
  cudaGetDevice(&device);
  Arguments args = make_arguments(nullptr, nullptr, nullptr, nullptr, nullptr, m, n, k, k, n, n,
                                  n, splits, swizzle, raster, decomposition, device);
  return partials_bytes(m, n, k, splits) + static_cast<int64_t>(Gemm::get_workspace_size(args));
}

// D = act(A @ B + bias) + residual on `stream` (a cudaStream_t); bias and residual may be
// null where the build has none. Returns 0, or an error code with kf_last_error() saying why:
// 1 cannot implement (alignment, sizes), 2 workspace too small, 3 initialize failed,
// 4 launch failed.
int kf_gemm(const void* a, const void* b, void* d, const void* bias, const void* residual, int m,
            int n, int k, int64_t lda, int64_t ldb, int64_t ldd, int64_t ldr, int splits,
            int swizzle, int raster, int decomposition, void* workspace, int64_t workspace_bytes,
            void* stream) {
  int device = 0;
  cudaGetDevice(&device);
  if (KF_RES && residual == nullptr) return fail(1, "this build adds a residual: none given");
  CallKey key{a,      b,   d,   bias, residual, workspace, m,      n,       k,      device,
              lda,    ldb, ldd, ldr,  splits,   swizzle,   raster, decomposition};
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  std::lock_guard<std::mutex> lock(g_mutex);
  // Params (and their TMA descriptors) depend only on the key; a kernel without workspace
  // reuses them. A workspace (stream-K) is re-initialised on every call.
  bool reuse = g_has_last && key == g_last;
  const int64_t partials = partials_bytes(m, n, k, splits);
  char* gemm_workspace = static_cast<char*>(workspace) + partials;
  if (!reuse) {
    void* gemm_d = kBatchedSplitK ? workspace : d;
    Arguments args = make_arguments(a, b, gemm_d, bias, residual, m, n, k, lda, ldb, ldd, ldr,
                                     splits, swizzle, raster, decomposition, device);
    if (Gemm::can_implement(args) != cutlass::Status::kSuccess) {
      g_has_last = false;
      return fail(1, "CUTLASS cannot implement this problem (sizes, strides or alignment)");
    }
    size_t need = Gemm::get_workspace_size(args);
    if (partials + static_cast<int64_t>(need) > workspace_bytes) {
      g_has_last = false;
      return fail(2, "workspace too small");
    }
    if (g_gemm.initialize(args, gemm_workspace, s) != cutlass::Status::kSuccess) {
      g_has_last = false;
      return fail(3, "CUTLASS initialize failed");
    }
    g_last = key;
    g_has_last = need == 0;
  }
  // run() checks the launch itself (cudaGetLastError after it).
  cutlass::Status status = g_gemm.run(s);
  if (status != cutlass::Status::kSuccess) {
    g_has_last = false;
    char what[400];
    std::snprintf(what, sizeof(what), "CUTLASS launch failed: %s (a GPU other than sm_90?)",
                  cutlassGetStatusString(status));
    return fail(4, what);
  }
  if constexpr (kBatchedSplitK) {
    const int64_t groups = static_cast<int64_t>(m) * (n / 8);
    const int threads = 256;
    kf::reduce_splits<<<static_cast<unsigned>((groups + threads - 1) / threads), threads, 0, s>>>(
        static_cast<const float*>(workspace), static_cast<Element*>(d),
        static_cast<const Element*>(bias), static_cast<const Element*>(residual), m, n, ldd, ldr,
        batch_splits(k, splits));
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
      g_has_last = false;
      return fail(4, cudaGetErrorString(err));
    }
  }
  return 0;
}

}  // extern "C"
