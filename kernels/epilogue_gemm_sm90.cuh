// A CUTLASS 3.x Hopper GEMM whose epilogue is an op's own: the mainloop is CUTLASS's (TMA +
// wgmma, warp-specialized, persistent), and the accumulators go to an operator-style epilogue
// class (the shape of CUTLASS's DefaultEpilogue, run through Sm90TmaWarpSpecializedAdapter)
// that computes from them in registers and stores the op's output. The ops that pair two
// weight rows per output (swiglu_gate's gate and up, qkv_rotary's two halves of a head) lay the
// rows out 8 apart (their "i8" layouts), where wgmma's accumulator gives both to one thread.
//
// An op's .cu follows this text in one translation unit (kernels/epilogue_gemm.py pastes them
// together): it defines its epilogue class and its extern "C" entry points, and runs the GEMM
// through kf::EpilogueGemm<ItsEpilogue>.
//
// Compile-time configuration (-D flags):
//   KF_ELEM 0: bf16, 1: fp16;  KF_TILE_M/N/K CTA tile;  KF_CLUSTER_M/N cluster;
//   KF_SCHEDULE 0: cooperative, 1: ping-pong;  KF_STAGES 0: as many as fit
//   KF_SCHEDULER 0: persistent (whole tiles), 1: stream-K (CUTLASS's heuristic decomposition,
//                deterministic reduction: the partial tiles are added before the epilogue
//                sees the accumulators, so an op's epilogue is the same for both)
// Run-time levers (no rebuild): the order the tiles are taken in (kf::TileOrder).

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>

#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/fast_math.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/numeric_conversion.h"

using namespace cute;

#if KF_ELEM == 0
using Element = cutlass::bfloat16_t;
#else
using Element = cutlass::half_t;
#endif
constexpr int kAlignment = 16 / sizeof(Element);

namespace kf {

// CUTLASS's host-side queries, answered for an epilogue (or an epilogue visitor tree's node)
// whose Params are its Arguments and that needs no workspace.
struct PlainHostSide {
  template <class ProblemShape, class Arguments>
  static constexpr Arguments to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                     void*) {
    return args;
  }
  template <class ProblemShape, class Arguments>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape, class Arguments>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
};

// What every epilogue class shares: CUTLASS's epilogue interface with no source matrix, no
// shared memory and no workspace. An op's epilogue derives from it and adds its Arguments
// (its Params too), can_implement and operator().
struct RegisterEpilogueBase : PlainHostSide {
  using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  using ElementOutput = Element;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementScalar = float;
  using ElementC = void;
  using ElementD = Element;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct ThreadEpilogueOp {  // what GemmUniversalAdapter names; the math is the op's own
    using ElementOutput = Element;
    using ElementAccumulator = float;
    using ElementCompute = float;
    static constexpr int kCount = 1;
  };
  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  // The (row, column) of each accumulator this thread holds, for a tile of `blk_shape_mnk`.
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class TiledMma>
  CUTLASS_DEVICE static auto thread_coordinates(ProblemShapeMNKL problem_shape_mnkl,
                                                BlockShapeMNK blk_shape_mnk,
                                                BlockCoordMNKL blk_coord_mnkl,
                                                TiledMma tiled_mma, int thread_idx) {
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    Tensor coords = local_tile(
        make_identity_tensor(make_shape(get<0>(problem_shape_mnkl), get<1>(problem_shape_mnkl))),
        take<0, 2>(blk_shape_mnk), make_coord(m_coord, n_coord));
    return tiled_mma.get_thread_slice(thread_idx).partition_C(coords);
  }

  // Calls fn(m, n, a0, a1, b0, b1) for each pair of adjacent columns (n, n + 1) this thread
  // holds on a row (a0, a1) with the same columns 8 on (n + 8, n + 9: b0, b1), inside the
  // problem. wgmma's accumulator gives a thread columns (c, c + 1) of every 8-column chunk:
  // values i..i+3 are those of one chunk on two rows (r, r + 8), values i+4..i+7 the same of
  // the next chunk. The "i8" layouts put an output's two weight rows there; any other
  // accumulator layout would pair the wrong ones: stop, never write them.
  template <class Coords, class Accumulators, class Fn>
  CUTLASS_DEVICE static void for_each_pair(Coords const& coords, Accumulators const& acc,
                                           int m_size, int n_size, Fn&& fn) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 8) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 4; r += 2) {
        const auto first_at = coords(i + r);
        const auto second_at = coords(i + r + 4);
        const int m = get<0>(first_at);
        const int n = get<1>(first_at);
        if (get<1>(second_at) != n + 8 || get<0>(second_at) != m || (n & 1) || (n & 15) >= 8 ||
            get<1>(coords(i + r + 1)) != n + 1) {
          __trap();
        }
        if (m < m_size && n < n_size) {
          fn(m, n, acc(i + r), acc(i + r + 1), acc(i + r + 4), acc(i + r + 5));
        }
      }
    }
  }

  // Two floats as two outputs in one 4-byte word (cvt.rn.bf16x2.f32 for bf16).
  CUTLASS_DEVICE static uint32_t packed(float a, float b) {
    cutlass::Array<float, 2> both;
    both[0] = a;
    both[1] = b;
    const auto out = cutlass::NumericArrayConverter<Element, float, 2>{}(both);
    return reinterpret_cast<uint32_t const&>(out);
  }

  // Two adjacent inputs (p 4-byte aligned, read-only while the kernel runs) as one word: one
  // 4-byte load where there were two 2-byte ones, through the read-only path (ld.global.nc),
  // so the compiler may issue it ahead of the epilogue's stores to out: a plain load must wait
  // for every earlier store that could alias it. An epilogue issues a row's loads together,
  // before its math: the accumulators leave few registers to run ahead with.
  CUTLASS_DEVICE static uint32_t word(Element const* p) {
    return __ldg(reinterpret_cast<unsigned int const*>(p));
  }

  // A word's two elements (the first in the low half) as floats.
  CUTLASS_DEVICE static cutlass::Array<float, 2> floats(uint32_t word) {
    return cutlass::NumericArrayConverter<float, Element, 2>{}(
        reinterpret_cast<cutlass::Array<Element, 2> const&>(word));
  }
};

thread_local char g_error[256] = "";

inline int fail(int code, const char* what) {
  std::snprintf(g_error, sizeof(g_error), "%s", what);
  return code;
}

inline int sm_count(int device) {
  static int counts[64] = {0};
  if (device < 0 || device >= 64) return 0;
  if (counts[device] == 0) {
    cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device);
  }
  return counts[device];
}

// The order the persistent CTAs take output tiles in, a scheduler argument: raster 0 is
// CUTLASS's heuristic (along M where N has more tiles), 1 along M, 2 along N; swizzle (1, 2,
// 4, 8) tiles of the other dimension swept together, so neighbouring CTAs share operand tiles
// in L2. The matmul family's winners often take one other than the default (along N, 8).
struct TileOrder {
  int swizzle = 1;
  int raster = 0;
};

using TileShape = Shape<Int<KF_TILE_M>, Int<KF_TILE_N>, Int<KF_TILE_K>>;
using ClusterShape = Shape<Int<KF_CLUSTER_M>, Int<KF_CLUSTER_N>, _1>;
#if KF_SCHEDULE == 0
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using TmaEpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#else
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using TmaEpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#endif

// The GEMM around a collective epilogue: an op's register epilogue (EpilogueGemm below), or
// one CUTLASS's epilogue builder made (an EVT through shared memory and TMA stores), whose
// shared memory the mainloop's stages leave room for.
template <class CollectiveEpilogue_>
struct GemmOf {
  using CollectiveEpilogue = CollectiveEpilogue_;
#if KF_SCHEDULER == 1
  using TileScheduler = cutlass::gemm::StreamKScheduler;
#else
  using TileScheduler = cutlass::gemm::PersistentScheduler;
#endif
  using EpilogueSmem = typename CollectiveEpilogue::SharedStorage;
#if KF_STAGES == 0
  using Stages = std::conditional_t<
      std::is_empty_v<EpilogueSmem>, cutlass::gemm::collective::StageCountAuto,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(EpilogueSmem))>>;
#else
  using Stages = cutlass::gemm::collective::StageCount<KF_STAGES>;
#endif
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor,
      kAlignment, Element, cutlass::layout::ColumnMajor, kAlignment, float, TileShape,
      ClusterShape, Stages, KernelSchedule>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue,
                                                          TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Arguments = typename Gemm::Arguments;

  // x (M, K) row-major times w (N, K) row-major (nn.Linear's layout), transposed.
  static Arguments arguments(const void* x, const void* w, int m, int n, int k, int64_t ldx,
                             int64_t ldw, typename CollectiveEpilogue::Arguments epilogue,
                             TileOrder order) {
    int device = 0;
    cudaGetDevice(&device);
    Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop.ptr_A = static_cast<const Element*>(x);
    args.mainloop.dA = cute::make_stride(ldx, cute::Int<1>{}, ldx * m);
    args.mainloop.ptr_B = static_cast<const Element*>(w);
    args.mainloop.dB = cute::make_stride(ldw, cute::Int<1>{}, ldw * n);
    args.epilogue = epilogue;
    args.hw_info.device_id = device;
    args.hw_info.sm_count = sm_count(device);
    using Raster = decltype(args.scheduler.raster_order);
    args.scheduler.raster_order = static_cast<Raster>(order.raster);
    args.scheduler.max_swizzle_size = order.swizzle;
#if KF_SCHEDULER == 1
    using Decomposition = decltype(args.scheduler.decomposition_mode);
    args.scheduler.decomposition_mode = Decomposition::Heuristic;
    args.scheduler.reduction_mode = decltype(args.scheduler.reduction_mode)::Deterministic;
#endif
    return args;
  }

  // Runs the GEMM on `stream`. Params (and their TMA descriptors) depend only on `key` (the
  // call's pointers, sizes and strides): a call like the last one reuses them, and only a new
  // key calls make_arguments() to build them, which keeps the host's launch short (and a
  // CUDA graph's capture plain). 0, or an error code with
  // g_error: 1 cannot implement (sizes, strides, alignment), 2 workspace too small,
  // 3 initialize failed, 4 launch failed.
  template <class Key, class MakeArguments>
  static int run(Key const& key, MakeArguments&& make_arguments, void* workspace,
                 int64_t workspace_bytes, void* stream) {
    static std::mutex mutex;
    static Gemm gemm;
    static Key last{};
    static bool has_last = false;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    std::lock_guard<std::mutex> lock(mutex);
    if (!(has_last && std::memcmp(&key, &last, sizeof(Key)) == 0)) {
      has_last = false;
      const Arguments args = make_arguments();
      if (Gemm::can_implement(args) != cutlass::Status::kSuccess) {
        return fail(1, "CUTLASS cannot implement this problem (sizes, strides or alignment)");
      }
      const size_t need = Gemm::get_workspace_size(args);
      if (static_cast<int64_t>(need) > workspace_bytes) return fail(2, "workspace too small");
      if (gemm.initialize(args, workspace, s) != cutlass::Status::kSuccess) {
        return fail(3, "CUTLASS initialize failed");
      }
      last = key;
      has_last = need == 0;
    }
    const cutlass::Status status = gemm.run(s);
    if (status != cutlass::Status::kSuccess) {
      has_last = false;
      char what[200];
      std::snprintf(what, sizeof(what), "CUTLASS launch failed: %s (a GPU other than sm_90?)",
                    cutlassGetStatusString(status));
      return fail(4, what);
    }
    return 0;
  }

  static int64_t workspace_size(int m, int n, int k, TileOrder order) {
    return static_cast<int64_t>(
        Gemm::get_workspace_size(arguments(nullptr, nullptr, m, n, k, k, k, {}, order)));
  }

  // The build, for logs: "tile=128x256x64 cluster=2x1 schedule=0 stages=4 smem=196864".
  static void describe(char* text, size_t size) {
    std::snprintf(text, size, "tile=%dx%dx%d cluster=%dx%d schedule=%d stages=%d smem=%d",
                  KF_TILE_M, KF_TILE_N, KF_TILE_K, KF_CLUSTER_M, KF_CLUSTER_N, KF_SCHEDULE,
                  (int)CollectiveMainloop::DispatchPolicy::Stages,
                  (int)GemmKernel::SharedStorageSize);
  }
};

// A GEMM whose epilogue is an op's register epilogue class (no shared memory, no TMA store).
template <class Epilogue>
using EpilogueGemm =
    GemmOf<cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>>;

}  // namespace kf
