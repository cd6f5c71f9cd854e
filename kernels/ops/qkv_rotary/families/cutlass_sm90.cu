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
#ifndef KF_EPILOGUE
#define KF_EPILOGUE 0
#endif
#if KF_EPILOGUE == 1
#if KF_ROPE != 1 || KF_ROW_SCALE
#error "the TMA epilogue (KF_EPILOGUE 1) is GPT-J's rotary (KF_ROPE 1) alone"
#endif
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#endif

namespace kf {

// GPT-J's rotary (KF_ROPE 1), one rule for both of its epilogues: column n (even) and n + 1
// are a pair turned where n lies in a q or k head's first KF_ROTARY_DIM dims; row m's cos and
// sin for it as one word (cos in the low half); the turn.
CUTLASS_DEVICE bool pair_turned(int n, int rotated) {
  return n < rotated && n % KF_HEAD_DIM < KF_ROTARY_DIM;
}
CUTLASS_DEVICE uint32_t pair_tables(const Element* cos, const Element* sin, int64_t ldcs, int m,
                                    int n) {
  const int64_t t = static_cast<int64_t>(m) * ldcs + (n % KF_HEAD_DIM) / 2;
  const uint32_t cos_bits = __ldg(reinterpret_cast<unsigned short const*>(cos + t));
  const uint32_t sin_bits = __ldg(reinterpret_cast<unsigned short const*>(sin + t));
  return cos_bits | (sin_bits << 16);
}
CUTLASS_DEVICE void turn_pair(float& a, float& v, uint32_t tables) {
  const auto cs = RegisterEpilogueBase::floats(tables);  // cos, sin
  const float turned = a * cs[0] - v * cs[1];
  v = v * cs[0] + a * cs[1];
  a = turned;
}

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
  // and 2, 3 of every 4; chunk k of a block is its columns 8k..8k+7), each row's cos/sin
  // loaded before any of its pairs is computed: one 2 x 2-byte word per rotated 8-column
  // chunk. Where a block holds whole heads (GPT-J's 256-column tile of one head), which of its
  // chunks are rotated is known at compile time (a head's first KF_ROTARY_DIM / 8), so only
  // theirs are loaded ahead: 8 registers for GPT-J, where loading all 32 chunks' would spill
  // and loading each pair's own stalled every rotated store on its load (the kernel ran 300 us
  // against a plain CUTLASS GEMM's 270 at GPT-J's q/k/v on an H100, qkv_rotary_points_h100_gptj
  // .json). Otherwise a block of at most 16 chunks loads all of its own ahead, and a wider
  // one each pair's as it goes.
  template <class Coords, class Accumulators>
  CUTLASS_DEVICE void rotate_adjacent_pairs(Coords const& coords, Accumulators const& acc,
                                            int m_size, int n_size) const {
    static_assert(KF_ROTARY_DIM % 2 == 0 && KF_ROTARY_DIM <= kHeadDim, "rotary dims");
    constexpr int kBlock = size<0>(Accumulators{}.layout());
    constexpr int kChunks = kBlock / 4;  // a row's 8-column chunks in one block
    constexpr int kHeadChunks = kHeadDim / 8;
    constexpr int kRotatedChunks = KF_ROTARY_DIM / 8;  // of a head's, from its first
    constexpr bool kByHead = kHeadDim % 8 == 0 && (8 * kChunks) % kHeadDim == 0 &&
                             KF_ROTARY_DIM % 8 == 0 &&
                             (kChunks / kHeadChunks) * kRotatedChunks <= 16;
    constexpr bool kTablesAhead = kByHead || kChunks <= 16;
    constexpr int kTables = kByHead ? (kChunks / kHeadChunks) * kRotatedChunks : kChunks;
    static_assert(kBlock % 4 == 0 && size(Accumulators{}.layout()) % kBlock == 0,
                  "unexpected accumulator layout");
    // Chunk k's slot in `tables`, or -1 where its columns are never rotated.
    constexpr auto slot = [](int chunk) {
      if constexpr (kByHead) {
        const int c = chunk % kHeadChunks;
        return c < kRotatedChunks ? (chunk / kHeadChunks) * kRotatedChunks + c : -1;
      } else {
        return chunk;
      }
    };
    CUTLASS_PRAGMA_UNROLL
    for (int b = 0; b < size(acc); b += kBlock) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 4; r += 2) {
        const int m = get<0>(coords(b + r));
        const int n0 = get<1>(coords(b + r));
        if (kByHead && n0 % kHeadDim >= 8) __trap();  // a block starts at a head
        uint32_t tables[kTablesAhead ? kTables : 1];
        if constexpr (kTablesAhead) {
          CUTLASS_PRAGMA_UNROLL
          for (int chunk = 0; chunk < kChunks; ++chunk) {
            if (slot(chunk) >= 0) {
              tables[slot(chunk)] = table_words(m, get<1>(coords(b + 4 * chunk + r)), m_size);
            }
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int chunk = 0; chunk < kChunks; ++chunk) {
          const int i = b + 4 * chunk + r;
          const int n = get<1>(coords(i));
          if (get<0>(coords(i)) != m || get<0>(coords(i + 1)) != m ||
              get<1>(coords(i + 1)) != n + 1 || (n & 1) || n != n0 + 8 * chunk) {
            __trap();  // a layout other than wgmma's would pair the wrong columns
          }
          if (m >= m_size || n >= n_size) continue;
          const uint32_t words = !kTablesAhead    ? table_words(m, n, m_size)
                                 : slot(chunk) >= 0 ? tables[slot(chunk)]
                                                    : 0;  // kByHead: a dim past the rotary
          float a = acc(i), v = acc(i + 1);
          if (pair_turned(n, params.rotated)) turn_pair(a, v, words);
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
    if (m >= m_size || !pair_turned(n, params.rotated)) return 0;
    return pair_tables(params.cos, params.sin, params.ldcs, m, n);
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

#if KF_EPILOGUE == 1
// KF_EPILOGUE 1: GPT-J's rotary as a leaf of an epilogue visitor tree (EVT) in CUTLASS's own
// collective epilogue, which stages each subtile through shared memory and stores it with
// TMA, as CUTLASS's plain GEMMs do, where RotaryEpilogue stores 4 bytes a thread straight from
// registers (the kernel ran 299.8 us where CUTLASS's plain GEMM ran 270.5 at GPT-J's q/k/v on
// an H100). The leaf returns the accumulators with the pairs of q's and k's first
// KF_ROTARY_DIM dims turned, in float; the tree's root rounds them to the output type.
struct RotatePairsNode : PlainHostSide {
  struct SharedStorage {};
  struct Arguments {
    const Element* cos = nullptr;  // (M, KF_ROTARY_DIM / 2)
    const Element* sin = nullptr;
    int64_t ldcs = 0;  // elements between rows of cos and of sin
    int rotated = 0;   // columns of q's and k's heads: (H + HKV) D
  };
  using Params = Arguments;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto const n = get<1>(problem_shape);
    return args.cos != nullptr && args.sin != nullptr && n % KF_HEAD_DIM == 0 &&
           args.rotated % KF_HEAD_DIM == 0 && args.rotated <= n;
  }
  CUTLASS_HOST_DEVICE RotatePairsNode() {}
  CUTLASS_HOST_DEVICE RotatePairsNode(Params const& params, SharedStorage const&)
      : params(params) {}

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(
      cutlass::epilogue::fusion::detail::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::detail::EmptyProducerLoadCallbacks{};
  }

  // coords: this thread's (row, column) of each value it holds, relative to its first
  // (R2S, R2S_M, R2S_N, EPI_M, EPI_N); first_m/n: that first value's, in the problem.
  // tile_n: the CTA tile's first column; kSubtileN: an epilogue subtile's columns, where its
  // columns are contiguous (an epilogue tile given as a plain shape, as CUTLASS's builder
  // makes for sm90); 0 where not (a strided tile): then no subtile is skipped.
  template <class Coords, class Residue, int kSubtileN>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::detail::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(Coords coords, Residue residue, int first_m,
                                          int first_n, int tile_n, Params const& params)
        : coords(coords),
          residue(residue),
          first_m(first_m),
          first_n(first_n),
          tile_n(tile_n),
          params(params) {}

    Coords coords;
    Residue residue;  // the problem's corner relative to the first value: past it, no load
    int first_m, first_n, tile_n;
    Params const& params;

    // Whether the subtiles of column epi_n surely hold no turned pair: where their width
    // divides both the head and the rotary dims, a subtile is turned whole or not at all, so
    // one test of its first column answers for all its values. Most subtiles (GPT-J: 5 in 6,
    // v's heads and each q/k head's dims past 64) then skip the per-value coordinates, layout
    // checks and residue tests, which cost ~20 us on an H100 at GPT-J's q/k/v
    // (qkv_rotary_cutlass_probe_h100_v2.json): the cooperative kernel's epilogue does not
    // overlap its mainloop, so every instruction there is on the critical path.
    CUTLASS_DEVICE bool subtile_plain(int epi_n) const {
      if constexpr (kSubtileN > 0) {
        if constexpr (KF_HEAD_DIM % kSubtileN == 0 && KF_ROTARY_DIM % kSubtileN == 0) {
          return !pair_turned(tile_n + epi_n * kSubtileN, params.rotated);
        }
      }
      return false;
    }

    // A fragment is one subtile's values of this thread; values 2i, 2i + 1 are one row's
    // columns (c, c + 1), c even (stmatrix's pairs, as wgmma's): checked, never assumed. Every
    // rotated pair's cos/sin is loaded before any pair is computed (one memory latency a
    // subtile), one 2 x 2-byte word a pair.
    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(
        cutlass::Array<ElementAccumulator, FragmentSize> const& acc, int epi_v, int epi_m,
        int epi_n) {
      static_assert(FragmentSize % 2 == 0, "a fragment of whole pairs expected");
      cutlass::Array<float, FragmentSize> out;
      if (subtile_plain(epi_n)) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < FragmentSize; ++i) out[i] = acc[i];
        return out;
      }
      constexpr int kPairs = FragmentSize / 2;
      Tensor at = coords(_, _, _, epi_m, epi_n);
      uint32_t tables[kPairs];
      bool turn[kPairs];
      CUTLASS_PRAGMA_UNROLL
      for (int p = 0; p < kPairs; ++p) {
        const auto first = at(epi_v * FragmentSize + 2 * p);
        const auto second = at(epi_v * FragmentSize + 2 * p + 1);
        const int m = first_m + get<0>(first);
        const int n = first_n + get<1>(first);
        if (get<0>(second) != get<0>(first) || get<1>(second) != get<1>(first) + 1 || (n & 1)) {
          __trap();  // a layout other than wgmma's would pair the wrong columns
        }
        turn[p] = elem_less(first, residue) && pair_turned(n, params.rotated);
        tables[p] = turn[p] ? pair_tables(params.cos, params.sin, params.ldcs, m, n) : 0;
      }
      CUTLASS_PRAGMA_UNROLL
      for (int p = 0; p < kPairs; ++p) {
        float a = acc[2 * p], v = acc[2 * p + 1];
        if (turn[p]) turn_pair(a, v, tables[p]);
        out[2 * p] = a;
        out[2 * p + 1] = v;
      }
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(
      cutlass::epilogue::fusion::detail::ConsumerStoreArgs<Args...> const& args) {
    auto [m_size, n_size, k_size, l_size] = args.problem_shape_mnkl;
    const int first_m = static_cast<int>(m_size) - static_cast<int>(get<0>(args.residue_tCcD));
    const int first_n = static_cast<int>(n_size) - static_cast<int>(get<1>(args.residue_tCcD));
    const int tile_n =
        static_cast<int>(get<1>(args.tile_coord_mnkl)) * size<1>(args.tile_shape_mnk);
    using SubtileN = cute::remove_cvref_t<decltype(get<1>(args.epi_tile))>;
    constexpr int kSubtileN = [] {
      if constexpr (cute::is_integral<SubtileN>::value && cute::is_static<SubtileN>::value) {
        return static_cast<int>(SubtileN::value);
      } else {
        return 0;
      }
    }();
    return ConsumerStoreCallbacks<decltype(args.tCcD), decltype(args.residue_tCcD), kSubtileN>(
        args.tCcD, args.residue_tCcD, first_m, first_n, tile_n, params);
  }

  Params params;
};

using RotaryCallbacks = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, Element, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    RotatePairsNode>;
using RotaryTmaEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void,
    cutlass::layout::RowMajor, kAlignment, Element, cutlass::layout::RowMajor, kAlignment,
    TmaEpilogueSchedule, RotaryCallbacks>::CollectiveOp;
using RotaryGemm = GemmOf<RotaryTmaEpilogue>;
#else
using RotaryGemm = EpilogueGemm<RotaryEpilogue>;
#endif

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
#if KF_EPILOGUE == 1
  if (bias != nullptr || row_scale != nullptr || head_dim != KF_HEAD_DIM) {
    return kf::fail(1, "the TMA epilogue takes GPT-J's rotary alone: no bias, no row scale");
  }
#endif
  int device = 0;
  cudaGetDevice(&device);
  const kf::RotaryKey key{x, w, bias, cos, sin, row_scale, out, m, n, k, head_dim, rotated,
                          device, swizzle, raster, ldx, ldw, ldcs, ldo};
  const auto arguments = [&] {
#if KF_EPILOGUE == 1
    typename kf::RotaryTmaEpilogue::Arguments epilogue{};
    epilogue.thread = {{static_cast<const Element*>(cos), static_cast<const Element*>(sin), ldcs,
                        rotated},
                       {}};  // the leaf's arguments, then the root's (none)
    epilogue.ptr_D = static_cast<Element*>(out);
    epilogue.dD = cute::make_stride(ldo, cute::Int<1>{}, ldo * m);
    return kf::RotaryGemm::arguments(x, w, m, n, k, ldx, ldw, epilogue, {swizzle, raster});
#else
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
#endif
  };
  return kf::RotaryGemm::run(key, arguments, workspace, workspace_bytes, stream);
}

}  // extern "C"
