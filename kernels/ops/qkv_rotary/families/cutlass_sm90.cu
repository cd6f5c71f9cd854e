// qkv_rotary (layouts "i8", "i8+bias"): the q, k and v projections as ONE CUTLASS GEMM, the
// bias and the rotary embedding in its epilogue; follows kernels/epilogue_gemm_sm90.cuh in one
// translation unit.
//   out[m, h*D + j]       = a1 cos[m, j] - a2 sin[m, j]
//   out[m, h*D + D/2 + j] = a2 cos[m, j] + a1 sin[m, j]     (a1, a2: head h's rows j, D/2 + j)
// for q's and k's heads (columns below `rotated`, in interleaved order); v's heads are stored
// as they are. x is (M, K); w is (N, K), N = (H + 2 HKV) D: w_q, w_k and w_v one after the
// other, and within each head the two halves interleaved in groups of 8 rows (a one-time copy
// at load time, kernels/ops/qkv_rotary/op.py `interleave_heads`): rows 16g..16g+7 of a head
// are its rows 8g..8g+7 and rows 16g+8..16g+15 its rows D/2 + 8g..D/2 + 8g+7. wgmma's
// accumulator gives each thread columns c, c + 1 of every 8-column chunk, so a thread holds
// two adjacent first-half values and, 8 columns on, their second halves: it rotates them in
// registers and stores each half's two outputs in 4 bytes, into the heads' natural order
// (out is the op's output for every layout). The bias (same interleave) is added first.
// KF_HEAD_DIM is D (the candidate's HEAD_DIM): where a tile holds whole heads, each thread
// loads a row's cos/sin once for every head in it.
// KF_ROPE 1 is GPT-J's rotary (layouts "pairs+rot=<R>+head_dim=<D>+kv_heads=<n>"): w is the
// three weights one after the other, not interleaved; the pairs (2i, 2i+1) of the first
// KF_ROTARY_DIM dims of each q and k head turn by cos/sin (M, R/2), and wgmma's accumulator
// gives a thread both columns of each such pair (c, c + 1), stored where they were.
// KF_ROW_SCALE 1 (layouts "i8[+bias]+rowscale": an RMSNorm folded in): row m's products are
// scaled by row_scale[m] (float32) before the bias and the rotation.

#ifndef KF_ROW_SCALE
#define KF_ROW_SCALE 0
#endif
#ifndef KF_ROPE
#define KF_ROPE 0
#endif
#ifndef KF_ROTARY_DIM
#define KF_ROTARY_DIM KF_HEAD_DIM
#endif

namespace kf {

class RotaryEpilogue : public RegisterEpilogueBase {
 public:
  struct Arguments {
    Element* ptr_out = nullptr;
    int64_t ldo = 0;  // elements between rows of out
    const Element* cos = nullptr;  // (M, D/2)
    const Element* sin = nullptr;
    int64_t ldcs = 0;  // elements between rows of cos and of sin
    const Element* bias = nullptr;  // (N,) interleaved like w's rows, or none
    int head_dim = 0;  // D
    int rotated = 0;  // columns of q's and k's heads: (H + HKV) D
    const float* row_scale = nullptr;  // (M,): KF_ROW_SCALE only
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    // Whole 16-row groups per head; 4-byte stores and cos/sin loads: even strides, aligned.
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
    return args.ptr_out != nullptr && args.cos != nullptr && args.sin != nullptr &&
           (KF_ROW_SCALE == 0 || (args.row_scale != nullptr && KF_ROPE == 0)) &&
           args.head_dim == KF_HEAD_DIM && args.head_dim % (KF_ROPE == 1 ? 2 : 16) == 0 &&
           get<1>(problem_shape) % args.head_dim == 0 && args.rotated % args.head_dim == 0 &&
           args.ldo % 2 == 0 && args.ldcs % 2 == 0 && aligned(args.ptr_out) &&
           aligned(args.cos) && aligned(args.sin) && (args.bias == nullptr || aligned(args.bias));
  }

  CUTLASS_HOST_DEVICE
  RotaryEpilogue(Params const& params, SharedStorage const& = SharedStorage()) : params(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    const int m_size = get<0>(problem_shape_mnkl);
    const int n_size = get<1>(problem_shape_mnkl);
    Tensor thread_coords = thread_coordinates(problem_shape_mnkl, blk_shape_mnk, blk_coord_mnkl,
                                              tiled_mma, thread_idx);
    CUTE_STATIC_ASSERT_V(size(thread_coords) == size(accumulators));
    static_assert(cute::is_static<FrgLayout>::value, "accumulator layout must be static");
    if constexpr (KF_ROPE == 1) {
      rotate_adjacent_pairs(thread_coords, accumulators, m_size, n_size);
    } else if constexpr (kTileHoldsWholeHeads) {
      rotate_by_rows(thread_coords, accumulators, m_size, n_size);
    } else {
      for_each_pair(thread_coords, accumulators, m_size, n_size,
                    [&](int m, int n, float a1, float b1, float a2, float b2) {
                      const int j = first_output(n);
                      const int64_t at = static_cast<int64_t>(m) * params.ldcs + j;
                      const uint32_t cs = n < params.rotated ? word(params.cos + at) : 0;
                      const uint32_t sn = n < params.rotated ? word(params.sin + at) : 0;
                      const bool bias = params.bias != nullptr;  // n even: one word a half
                      store_pair(m, n, j, a1, b1, a2, b2, cs, sn, bias ? word(params.bias + n) : 0,
                                 bias ? word(params.bias + n + 8) : 0, row_scale(m));
                    });
    }
  }

 private:
  static constexpr int kHeadDim = KF_HEAD_DIM;
  // A tile of whole heads (TILE_N a multiple of D) reads the same cos/sin for every head in
  // it: each thread loads a row's D/16 pairs of cos and of sin once, all together (one memory
  // latency per row, where loads issued pair by pair stalled the epilogue on each: the
  // accumulators leave few registers to run ahead with), and uses them for every head.
  static constexpr bool kTileHoldsWholeHeads = KF_TILE_N % kHeadDim == 0;
  static constexpr int kGroups = kHeadDim / 16;  // 16-column groups per head: 8 pairs of j

  // Where column n's pair (j, j + 1) starts within the half head, with n's head.
  CUTLASS_DEVICE static int first_output(int n) {
    const int c = n % kHeadDim;
    return (c / 16) * 8 + (c & 7);
  }

  // One pair's outputs: the bias added, q's and k's heads (n < rotated) turned by (cos, sin),
  // each half's two outputs stored in one 4-byte word, in the head's natural order.
  // Row m's folded-norm scale (1 without KF_ROW_SCALE: the multiplies fold away).
  CUTLASS_DEVICE float row_scale(int m) const {
#if KF_ROW_SCALE
    return __ldg(params.row_scale + m);
#else
    return 1.0f;
#endif
  }

  CUTLASS_DEVICE void store_pair(int m, int n, int j, float a1, float b1, float a2, float b2,
                                 uint32_t cos_word, uint32_t sin_word, uint32_t bias_first,
                                 uint32_t bias_second, float scale) const {
    a1 *= scale;  // a folded norm's row scale, before the bias
    b1 *= scale;
    a2 *= scale;
    b2 *= scale;
    if (params.bias != nullptr) {
      const auto first = floats(bias_first), second = floats(bias_second);
      a1 += first[0];
      b1 += first[1];
      a2 += second[0];
      b2 += second[1];
    }
    Element* row = params.ptr_out + static_cast<int64_t>(m) * params.ldo + (n - n % kHeadDim) + j;
    if (n < params.rotated) {
      const auto cs = floats(cos_word), sn = floats(sin_word);
      *reinterpret_cast<uint32_t*>(row) =
          packed(a1 * cs[0] - a2 * sn[0], b1 * cs[1] - b2 * sn[1]);
      *reinterpret_cast<uint32_t*>(row + kHeadDim / 2) =
          packed(a2 * cs[0] + a1 * sn[0], b2 * cs[1] + b1 * sn[1]);
    } else {
      *reinterpret_cast<uint32_t*>(row) = packed(a1, b1);
      *reinterpret_cast<uint32_t*>(row + kHeadDim / 2) = packed(a2, b2);
    }
  }

  // GPT-J's rotary: values i, i + 1 of the accumulator are one row's columns (c, c + 1), c
  // even: a rotary pair where c lies in a q or k head's first KF_ROTARY_DIM dims. Taken row by
  // row as rotate_by_rows does (a block holds two rows per thread, 8 rows apart, values 0, 1
  // and 2, 3 of every 4), each row's cos/sin loaded before any of its pairs is computed: one
  // 2 x 2-byte word per 8-column chunk, 16 registers for a 128-column tile (a wider tile,
  // on top of its 128 accumulators, would spill: its pairs load their own).
  template <class Coords, class Accumulators>
  CUTLASS_DEVICE void rotate_adjacent_pairs(Coords const& coords, Accumulators const& acc,
                                            int m_size, int n_size) const {
    static_assert(KF_ROTARY_DIM % 2 == 0 && KF_ROTARY_DIM <= kHeadDim, "rotary dims");
    constexpr int kBlock = size<0>(Accumulators{}.layout());
    constexpr int kChunks = kBlock / 4;  // a row's 8-column chunks in one block
    constexpr bool kTablesAhead = kChunks <= 16;
    static_assert(kBlock % 4 == 0 && size(Accumulators{}.layout()) % kBlock == 0,
                  "unexpected accumulator layout");
    CUTLASS_PRAGMA_UNROLL
    for (int b = 0; b < size(acc); b += kBlock) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 4; r += 2) {
        const int m = get<0>(coords(b + r));
        uint32_t tables[kTablesAhead ? kChunks : 1];
        if constexpr (kTablesAhead) {
          CUTLASS_PRAGMA_UNROLL
          for (int chunk = 0; chunk < kChunks; ++chunk) {
            tables[chunk] = table_words(m, get<1>(coords(b + 4 * chunk + r)), m_size);
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int chunk = 0; chunk < kChunks; ++chunk) {
          const int i = b + 4 * chunk + r;
          const int n = get<1>(coords(i));
          if (get<0>(coords(i)) != m || get<0>(coords(i + 1)) != m ||
              get<1>(coords(i + 1)) != n + 1 || (n & 1)) {
            __trap();  // a layout other than wgmma's would pair the wrong columns
          }
          if (m >= m_size || n >= n_size) continue;
          const uint32_t words = kTablesAhead ? tables[chunk] : table_words(m, n, m_size);
          float a = acc(i), v = acc(i + 1);
          if (n < params.rotated && n % kHeadDim < KF_ROTARY_DIM) {
            const auto cs = floats(words);  // cos, sin
            const float turned = a * cs[0] - v * cs[1];
            v = v * cs[0] + a * cs[1];
            a = turned;
          }
          *reinterpret_cast<uint32_t*>(params.ptr_out + static_cast<int64_t>(m) * params.ldo +
                                       n) = packed(a, v);
        }
      }
    }
  }

  // Column n's cos and sin on row m as one word (cos in the low half); nothing is read (0)
  // where n is not rotated (v's heads, a head's dims from KF_ROTARY_DIM on) or m is past the
  // problem.
  CUTLASS_DEVICE uint32_t table_words(int m, int n, int m_size) const {
    const int c = n % kHeadDim;
    if (m >= m_size || n >= params.rotated || c >= KF_ROTARY_DIM) return 0;
    const int64_t t = static_cast<int64_t>(m) * params.ldcs + c / 2;
    const uint32_t cos_bits = __ldg(reinterpret_cast<unsigned short const*>(params.cos + t));
    const uint32_t sin_bits = __ldg(reinterpret_cast<unsigned short const*>(params.sin + t));
    return cos_bits | (sin_bits << 16);
  }

  // for_each_pair's walk (the same accumulator layout and checks), taken row by row: a block
  // of the accumulator (one wgmma atom's tile) holds two rows per thread (values 0, 1 and 4, 5
  // of each 8 on one, 2, 3 and 6, 7 on the other, 8 rows on), 16 columns per 8 values. Each
  // row's cos/sin are loaded before any of its pairs is computed.
  template <class Coords, class Accumulators>
  CUTLASS_DEVICE void rotate_by_rows(Coords const& coords, Accumulators const& acc, int m_size,
                                     int n_size) const {
    constexpr int kBlock = size<0>(Accumulators{}.layout());
    static_assert(kBlock % 8 == 0 && size(Accumulators{}.layout()) % kBlock == 0 &&
                      (kBlock / 8) % kGroups == 0,
                  "a wgmma atom of whole heads expected");
    constexpr int kPairs = kBlock / 8;  // a row's pairs in one block
    // A block's bias words, loaded once for both its rows, all at once: 16 registers for a
    // 128-column tile; a 256-column one (on top of 128 accumulators) would spill, so each of
    // its pairs loads its own.
    constexpr bool kBiasAhead = kPairs <= 8;
    CUTLASS_PRAGMA_UNROLL
    for (int b = 0; b < size(acc); b += kBlock) {
      uint32_t bias_words[kBiasAhead ? 2 * kPairs : 1];
      if constexpr (kBiasAhead) {
        const int n_first = get<1>(coords(b));
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < 2 * kPairs; ++k) {
          const int n = n_first + 8 * k;
          bias_words[k] = params.bias != nullptr && n < n_size ? word(params.bias + n) : 0;
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 4; r += 2) {
        const int m = get<0>(coords(b + r));
        const int n0 = get<1>(coords(b + r));
        if (n0 % kHeadDim >= 8) __trap();  // a block's first pair starts a head's group 0
        uint32_t cos_words[kGroups], sin_words[kGroups];
        CUTLASS_PRAGMA_UNROLL
        for (int g = 0; g < kGroups; ++g) {
          const int64_t at = static_cast<int64_t>(m) * params.ldcs + g * 8 + (n0 & 7);
          const bool load = m < m_size;
          cos_words[g] = load ? word(params.cos + at) : 0;
          sin_words[g] = load ? word(params.sin + at) : 0;
        }
        const float scale = m < m_size ? row_scale(m) : 0.0f;  // once a row, with its tables
        CUTLASS_PRAGMA_UNROLL
        for (int i = b; i < b + kBlock; i += 8) {
          const auto first_at = coords(i + r);
          const auto second_at = coords(i + r + 4);
          const int n = get<1>(first_at);
          const int g = ((i - b) / 8) % kGroups;  // the pair's group, the same in every head
          if (get<0>(first_at) != m || get<1>(second_at) != n + 8 ||
              get<0>(second_at) != m || get<1>(coords(i + r + 1)) != n + 1 ||
              n != n0 + 2 * (i - b)) {
            __trap();  // a layout other than wgmma's would pair the wrong columns
          }
          if (m < m_size && n < n_size) {
            const int k = (i - b) / 8;
            const bool load = !kBiasAhead && params.bias != nullptr;
            store_pair(m, n, g * 8 + (n & 7), acc(i + r), acc(i + r + 1), acc(i + r + 4),
                       acc(i + r + 5), cos_words[g], sin_words[g],
                       kBiasAhead ? bias_words[2 * k] : load ? word(params.bias + n) : 0,
                       kBiasAhead ? bias_words[2 * k + 1] : load ? word(params.bias + n + 8) : 0,
                       scale);
          }
        }
      }
    }
  }

  Params params;
};

using RotaryGemm = EpilogueGemm<RotaryEpilogue>;

// What a call's params depend on (EpilogueGemm::run reuses them for the same key).
struct RotaryKey {
  const void *x, *w, *bias, *cos, *sin, *row_scale, *out;
  int m, n, k, head_dim, rotated, device, swizzle, raster;
  int64_t ldx, ldw, ldcs, ldo;
};
static_assert(std::has_unique_object_representations_v<RotaryKey>, "keys compare as bytes");

}  // namespace kf

extern "C" {

// Bumped when the signatures below change; the candidate checks it after loading.
int kf_abi_version() { return 3; }

const char* kf_last_error() { return kf::g_error; }

const char* kf_describe() {
  static char text[192];
  kf::RotaryGemm::describe(text, sizeof(text));
  return text;
}

int64_t kf_workspace_size(int m, int n, int k, int swizzle, int raster) {
  return kf::RotaryGemm::workspace_size(m, n, k, {swizzle, raster});
}

// out (M, N) = [rotary(q) | rotary(k) | v] of s * (x @ w^T) (+ bias) on `stream` (a
// cudaStream_t); bias may be null, and row_scale (s, float32 (M,)) is null without
// KF_ROW_SCALE; the tiles in the order swizzle and raster say (kf::TileOrder). 0, or an error
// code with kf_last_error() (kf::EpilogueGemm::run).
int kf_qkv_rotary(const void* x, const void* w, const void* bias, const void* cos,
                  const void* sin, const void* row_scale, void* out, int m, int n, int k,
                  int head_dim, int rotated, int64_t ldx, int64_t ldw, int64_t ldcs, int64_t ldo,
                  int swizzle, int raster, void* workspace, int64_t workspace_bytes,
                  void* stream) {
  int device = 0;
  cudaGetDevice(&device);
  const kf::RotaryKey key{x, w, bias, cos, sin, row_scale, out, m, n, k, head_dim, rotated,
                          device, swizzle, raster, ldx, ldw, ldcs, ldo};
  const auto arguments = [&] {
    kf::RotaryEpilogue::Arguments epilogue;
    epilogue.ptr_out = static_cast<Element*>(out);
    epilogue.ldo = ldo;
    epilogue.cos = static_cast<const Element*>(cos);
    epilogue.sin = static_cast<const Element*>(sin);
    epilogue.ldcs = ldcs;
    epilogue.bias = static_cast<const Element*>(bias);
    epilogue.head_dim = head_dim;
    epilogue.rotated = rotated;
    epilogue.row_scale = static_cast<const float*>(row_scale);
    return kf::RotaryGemm::arguments(x, w, m, n, k, ldx, ldw, epilogue, {swizzle, raster});
  };
  return kf::RotaryGemm::run(key, arguments, workspace, workspace_bytes, stream);
}

}  // extern "C"
