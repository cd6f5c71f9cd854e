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
           args.head_dim > 0 && args.head_dim % 16 == 0 &&
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
    const int d = params.head_dim;
    const int half = d / 2;
    for_each_pair(
        thread_coords, accumulators, m_size, n_size,
        [&](int m, int n, float a1, float b1, float a2, float b2) {  // halves: j, j+1; second
          if (params.bias != nullptr) {  // n even: each half's pair is one 4-byte word
            const auto first = unpacked(params.bias + n), second = unpacked(params.bias + n + 8);
            a1 += first[0];
            b1 += first[1];
            a2 += second[0];
            b2 += second[1];
          }
          const int head = n / d;
          const int c = n - head * d;
          const int j = (c / 16) * 8 + (c & 7);  // this pair's first output within the half
          Element* row = params.ptr_out + static_cast<int64_t>(m) * params.ldo + head * d + j;
          if (n < params.rotated) {
            const int64_t at = static_cast<int64_t>(m) * params.ldcs + j;  // j even: aligned
            const auto cs = unpacked(params.cos + at), sn = unpacked(params.sin + at);
            *reinterpret_cast<uint32_t*>(row) =
                packed(a1 * cs[0] - a2 * sn[0], b1 * cs[1] - b2 * sn[1]);
            *reinterpret_cast<uint32_t*>(row + half) =
                packed(a2 * cs[0] + a1 * sn[0], b2 * cs[1] + b1 * sn[1]);
          } else {
            *reinterpret_cast<uint32_t*>(row) = packed(a1, b1);
            *reinterpret_cast<uint32_t*>(row + half) = packed(a2, b2);
          }
        });
  }

 private:
  Params params;
};

using RotaryGemm = EpilogueGemm<RotaryEpilogue>;

// What a call's params depend on (EpilogueGemm::run reuses them for the same key).
struct RotaryKey {
  const void *x, *w, *bias, *cos, *sin, *out;
  int m, n, k, head_dim, rotated, device;
  int64_t ldx, ldw, ldcs, ldo;
};
static_assert(std::has_unique_object_representations_v<RotaryKey>, "keys compare as bytes");

}  // namespace kf

extern "C" {

// Bumped when the signatures below change; the candidate checks it after loading.
int kf_abi_version() { return 1; }

const char* kf_last_error() { return kf::g_error; }

const char* kf_describe() {
  static char text[192];
  kf::RotaryGemm::describe(text, sizeof(text));
  return text;
}

int64_t kf_workspace_size(int m, int n, int k) { return kf::RotaryGemm::workspace_size(m, n, k); }

// out (M, N) = [rotary(q) | rotary(k) | v] of x @ w^T (+ bias) on `stream` (a cudaStream_t);
// bias may be null. 0, or an error code with kf_last_error() (kf::EpilogueGemm::run).
int kf_qkv_rotary(const void* x, const void* w, const void* bias, const void* cos,
                  const void* sin, void* out, int m, int n, int k, int head_dim, int rotated,
                  int64_t ldx, int64_t ldw, int64_t ldcs, int64_t ldo, void* workspace,
                  int64_t workspace_bytes, void* stream) {
  int device = 0;
  cudaGetDevice(&device);
  const kf::RotaryKey key{x, w, bias, cos, sin, out, m, n, k, head_dim, rotated, device,
                          ldx, ldw, ldcs, ldo};
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
    return kf::RotaryGemm::arguments(x, w, m, n, k, ldx, ldw, epilogue);
  };
  return kf::RotaryGemm::run(key, arguments, workspace, workspace_bytes, stream);
}

}  // extern "C"
