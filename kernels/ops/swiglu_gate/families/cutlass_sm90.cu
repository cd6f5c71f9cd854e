// swiglu_gate (layout "i8"): SwiGLU's gate and up projections as ONE CUTLASS GEMM, gated in its
// epilogue; follows kernels/epilogue_gemm_sm90.cuh in one translation unit.
//   out[m, j] = silu(x[m] . w_gate[j]) * (x[m] . w_up[j])
// x is (M, K); w is (2N, K) with the gate and up rows interleaved in groups of 8 (a one-time
// copy at load time, kernels/ops/swiglu_gate/op.py `interleave`): rows 16g..16g+7 are
// w_gate[8g..8g+7] and rows 16g+8..16g+15 are w_up[8g..8g+7]. The GEMM is a plain (M, 2N, K)
// one at full tile efficiency; wgmma's accumulator gives each thread columns c, c + 1 of every
// 8-column chunk, so a thread holds two adjacent gates and, 8 columns on, their ups: it gates
// them in registers and writes the (M, N) result straight from them (no shared memory, no TMA
// store). The two (M, N) intermediates that two GEMMs and a gating pass write never exist.
//
// KF_STORE 0: each thread stores its 2 adjacent outputs (4 bytes); 1: each quad of lanes
// trades them so that each lane stores 8 (16 bytes); 2 (cooperative schedule only): the
// tile's outputs are gathered in shared memory and each row leaves in one asynchronous bulk
// copy (cp.async.bulk), so the tile's global writes run under the next tile's mainloop where
// 0 and 1 hold the warps in the epilogue until the memory system has taken every store (the
// cooperative epilogue is not overlapped with a mainloop as a ping-pong one is).
// KF_ROW_SCALE 1 (layout "i8+rowscale": an RMSNorm folded in): row m's gate and up are scaled
// by row_scale[m] (float32) before the gating: out = silu(s g) * (s u).

#ifndef KF_STORE
#define KF_STORE 0
#endif
#ifndef KF_ROW_SCALE
#define KF_ROW_SCALE 0
#endif

namespace kf {

#if KF_STORE == 2
static_assert(KF_SCHEDULE == 0, "bulk stores: the cooperative schedule (two warpgroups, one tile)");
constexpr int kOutCols = KF_TILE_N / 2;  // outputs per tile row
// 4-byte words per row in shared memory: the row's outputs and 16 bytes more, so that the 8
// rows one store instruction writes start 4 banks apart (no bank conflicts) and every row
// stays 16-byte aligned for its bulk copy.
constexpr int kRowWords = kOutCols / 2 + 4;
// The consumer threads' barrier around the rows (one that CUTLASS's kernels do not reserve).
constexpr auto kRowsBarrier = cutlass::arch::ReservedNamedBarriers::FirstUserBarrier;
#endif

class SwigluEpilogue : public RegisterEpilogueBase {
 public:
#if KF_STORE == 2
  struct SharedStorage {
    alignas(128) uint32_t rows[KF_TILE_M][kRowWords];
  };
  using TensorStorage = SharedStorage;
#endif
  struct Arguments {
    Element* ptr_out = nullptr;
    int64_t ldo = 0;  // elements between rows of out
    const float* row_scale = nullptr;  // (M,): KF_ROW_SCALE only
  };
  using Params = Arguments;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    // Stores of 2 (pair) or 8 (quad; a bulk copy's 16 bytes) outputs: rows and `out` aligned.
    const int vector = KF_STORE == 0 ? 2 : 8;
    return args.ptr_out != nullptr && (KF_ROW_SCALE == 0 || args.row_scale != nullptr) &&
           get<1>(problem_shape) % 16 == 0 &&
           args.ldo % vector == 0 &&
           reinterpret_cast<uintptr_t>(args.ptr_out) % (vector * sizeof(Element)) == 0;
  }

  CUTLASS_HOST_DEVICE
  explicit SwigluEpilogue(Params const& params) : params(params) {}
  CUTLASS_HOST_DEVICE
  SwigluEpilogue(Params const& params, SharedStorage const&) : params(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char* smem) {
    const int m_size = get<0>(problem_shape_mnkl);
    const int n2_size = get<1>(problem_shape_mnkl);  // interleaved columns: 2N
    Tensor thread_coords = thread_coordinates(problem_shape_mnkl, blk_shape_mnk, blk_coord_mnkl,
                                              tiled_mma, thread_idx);
    CUTE_STATIC_ASSERT_V(size(thread_coords) == size(accumulators));
    static_assert(cute::is_static<FrgLayout>::value, "accumulator layout must be static");
#if KF_STORE == 0
    for_each_output_pair(thread_coords, accumulators, m_size, n2_size,
                         [&](int m, int feature, uint32_t word) {
                           *reinterpret_cast<uint32_t*>(
                               params.ptr_out + static_cast<int64_t>(m) * params.ldo + feature) =
                               word;
                         });
#elif KF_STORE == 2
    // As pair stores, into this tile's rows in shared memory; then thread t copies row t out.
    auto& rows = reinterpret_cast<SharedStorage*>(smem)->rows;
    constexpr int threads = size(TiledMma{});  // both consumer warpgroups
    static_assert(KF_TILE_M <= threads, "a copying thread per row");
    const int m0 = get<0>(blk_coord_mnkl) * KF_TILE_M;
    const int f0 = get<1>(blk_coord_mnkl) * kOutCols;  // the tile's first output column
    // The last tile's copies have read their rows (a copy waits on its own thread's copies)
    // before anyone writes them again: long done, a mainloop ago.
    cute::tma_store_wait<0>();
    cutlass::arch::NamedBarrier::sync(threads, kRowsBarrier);
    for_each_output_pair(thread_coords, accumulators, m_size, n2_size,
                         [&](int m, int feature, uint32_t word) {
                           rows[m - m0][(feature - f0) / 2] = word;
                         });
    cute::tma_store_fence();  // the rows, visible to the bulk copies (the async proxy)
    cutlass::arch::NamedBarrier::sync(threads, kRowsBarrier);
    const int m = m0 + thread_idx;
    const int n_size = n2_size / 2;
    if (thread_idx < KF_TILE_M && m < m_size && f0 < n_size) {
      const int bytes = min(kOutCols, n_size - f0) * static_cast<int>(sizeof(Element));
      cute::SM90_BULK_COPY_S2G::copy(&rows[thread_idx][0],
                                     params.ptr_out + static_cast<int64_t>(m) * params.ldo + f0,
                                     bytes);
      cute::tma_store_arrive();
    }
#else
    // Groups of 8, and each quad of lanes (which holds the 8 columns of a chunk, two each)
    // trades its gated pairs so that lane q ends up with all 8 outputs of chunk pair q of every
    // 4: one 16-byte store per lane, the quad's 64 bytes of a row contiguous (whole sectors,
    // where 4-byte stores fill half of each).
    static_assert(decltype(size(accumulators))::value % 32 == 0, "tile N must be a multiple of 64");
    const int lane = threadIdx.x % 32;
    const int q = lane % 4;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accumulators); i += 32) {
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 4; h += 2) {  // the thread's two rows, r and r + 8
        const int m = get<0>(thread_coords(i + h));
        const int n0 = get<1>(thread_coords(i + h));
        const float s = m < m_size ? scale_of(m) : 0.0f;  // rows past M are computed, not stored
        uint32_t pairs[4];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < 4; ++j) {
          const int v = i + 8 * j + h;  // chunk pair j: gates v, v + 1; ups v + 4, v + 5
          if (get<1>(thread_coords(v)) != n0 + 16 * j || get<0>(thread_coords(v)) != m ||
              get<1>(thread_coords(v + 4)) != n0 + 16 * j + 8 ||
              get<1>(thread_coords(v + 1)) != n0 + 16 * j + 1 || (n0 & 15) != 2 * q) {
            __trap();
          }
          pairs[j] = packed(gated(s * accumulators(v), s * accumulators(v + 4)),
                            gated(s * accumulators(v + 1), s * accumulators(v + 5)));
        }
        // Round r: lane l sends its pair for chunk pair (l - r) % 4; lane q receives from lane
        // (q + r) % 4 its pair for chunk pair q.
        uint32_t mine[4];
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < 4; ++r) {
          const uint32_t sent = pick((q - r) & 3, pairs);
          const uint32_t got = __shfl_sync(0xffffffffu, sent, (lane & ~3) | ((q + r) & 3));
          const int from = (q + r) & 3;
          mine[0] = from == 0 ? got : mine[0];
          mine[1] = from == 1 ? got : mine[1];
          mine[2] = from == 2 ? got : mine[2];
          mine[3] = from == 3 ? got : mine[3];
        }
        const int feature = ((n0 - 2 * q) / 16 + q) * 8;  // chunk pair q's first output
        if (m < m_size && 2 * feature < n2_size) {
          *reinterpret_cast<uint4*>(params.ptr_out + static_cast<int64_t>(m) * params.ldo +
                                    feature) = make_uint4(mine[0], mine[1], mine[2], mine[3]);
        }
      }
    }
#endif
  }

 private:
  // Calls fn(m, feature, word) for each pair of adjacent outputs this thread holds: row m,
  // outputs feature and feature + 1, gated and packed into one word. Groups of 8: columns
  // 16g..16g+7 are gates 8g..8g+7 and 16g+8..16g+15 their ups, so each pair of adjacent gates
  // comes with its ups.
  template <class Coords, class Accumulators, class Fn>
  CUTLASS_DEVICE void for_each_output_pair(Coords const& coords, Accumulators const& acc,
                                           int m_size, int n2_size, Fn&& fn) const {
    for_each_pair(coords, acc, m_size, n2_size,
                  [&](int m, int n, float g0, float g1, float u0, float u1) {
                    const float s = scale_of(m);
                    fn(m, (n / 16) * 8 + (n & 7),
                       packed(gated(s * g0, s * u0), gated(s * g1, s * u1)));
                  });
  }
  // Row m's scale (1 without KF_ROW_SCALE: the multiplies fold away). A thread holds two rows
  // of each tile, so the loads are few and each is one broadcast through L1.
  CUTLASS_DEVICE float scale_of(int m) const {
#if KF_ROW_SCALE
    return __ldg(params.row_scale + m);
#else
    return 1.0f;
#endif
  }
  // silu(g) * u = g * u * sigmoid(g), and sigmoid(g) = (1 + tanh(g / 2)) / 2: with a = g / 2
  // and h = a * u that is h + h * tanh(a): one tanh.approx (a MUFU op) and three FP32 ops,
  // where exp and an IEEE divide took two MUFU ops and a Newton step. Per tile that math, not
  // the stores, was the epilogue's cost (swiglu_cutlass_probe_h200_g8 -> _tanh). tanh.approx
  // is good to ~2^-11, so the output is off by at most ~2^-12 |g u|: an eighth of one bf16
  // rounding of g u (relative to silu(g) u it grows where silu is tiny, g << 0; the checks'
  // tolerance has an absolute part for that).
  CUTLASS_DEVICE static float gated(float gate, float up) {
    const float a = 0.5f * gate;
    const float h = a * up;
    return fmaf(h, cutlass::fast_tanh(a), h);
  }
  CUTLASS_DEVICE static uint32_t pick(int j, uint32_t const (&v)[4]) {  // no local memory
    return j == 0 ? v[0] : j == 1 ? v[1] : j == 2 ? v[2] : v[3];
  }

  Params params;
};

#if KF_STORE == 2
// The register epilogue's adapter, and at the kernel's end a wait for this thread's last bulk
// copies to have read shared memory, which the CTA gives up when it exits.
struct BulkStoreAdapter
    : cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<SwigluEpilogue> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<SwigluEpilogue>;
  using Base::Base;
  template <class... Args>
  CUTLASS_DEVICE auto store_tail(Args... args) {
    cute::tma_store_wait<0>();
    return Base::store_tail(args...);
  }
};
using SwigluGemm = GemmOf<BulkStoreAdapter>;
#else
using SwigluGemm = EpilogueGemm<SwigluEpilogue>;
#endif

// What a call's params depend on (EpilogueGemm::run reuses them for the same key).
struct SwigluKey {
  const void *x, *w, *row_scale, *out;
  int m, n, k, device, swizzle, raster;
  int64_t ldx, ldw, ldo;
};
static_assert(std::has_unique_object_representations_v<SwigluKey>, "keys compare as bytes");

}  // namespace kf

extern "C" {

// Bumped when the signatures below change; the candidate checks it after loading.
int kf_abi_version() { return 3; }

const char* kf_last_error() { return kf::g_error; }

const char* kf_describe() {
  static char text[192];
  char build[160];
  kf::SwigluGemm::describe(build, sizeof(build));
  std::snprintf(text, sizeof(text), "%s store=%d row_scale=%d", build, KF_STORE, KF_ROW_SCALE);
  return text;
}

int64_t kf_workspace_size(int m, int n, int k, int swizzle, int raster) {
  return kf::SwigluGemm::workspace_size(m, 2 * n, k, {swizzle, raster});
}

// out (M, N) = silu(x @ gate rows of w^T) * (x @ up rows of w^T) on `stream` (a cudaStream_t),
// each row's gate and up scaled by row_scale (float32, M; null without KF_ROW_SCALE) first.
// The tiles in the order swizzle and raster say (kf::TileOrder). 0, or an error code with
// kf_last_error() (kf::EpilogueGemm::run).
int kf_swiglu(const void* x, const void* w, const void* row_scale, void* out, int m, int n,
              int k, int64_t ldx, int64_t ldw, int64_t ldo, int swizzle, int raster,
              void* workspace, int64_t workspace_bytes, void* stream) {
  int device = 0;
  cudaGetDevice(&device);
  const kf::SwigluKey key{x, w, row_scale, out, m, n, k, device, swizzle, raster, ldx, ldw, ldo};
  const auto arguments = [&] {
    return kf::SwigluGemm::arguments(
        x, w, m, 2 * n, k, ldx, ldw,
        {static_cast<Element*>(out), ldo, static_cast<const float*>(row_scale)},
        {swizzle, raster});
  };
  return kf::SwigluGemm::run(key, arguments, workspace, workspace_bytes, stream);
}

}  // extern "C"
