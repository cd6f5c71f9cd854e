"""Triton source shared by the matmul templates, pasted into each rendered module.

Each candidate must be one self-contained module, so shared pieces are text, not imports.
"""

# fp32 operands as cuBLAS feeds them to TF32 tensor cores: rounded to nearest (ties away), where
# the tensor cores alone would truncate (kernels/ops/matmul/op.py, to_tf32). Other dtypes pass.
TF32_FN = """
@triton.jit
def tf32_operand(x):
    if x.dtype == tl.float32:
        bits = x.to(tl.uint32, bitcast=True)
        x = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return x
""".strip()

# The fused epilogue: bias then activation, in fp32, before the cast to the output dtype.
EPILOGUE_FN = """
@triton.jit
def apply_epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc + bias.to(tl.float32)[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
    elif ACTIVATION == "gelu":  # tanh form; tanh(x) = 2 * sigmoid(2x) - 1
        inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (2.0 * tl.sigmoid(2.0 * inner))
    elif ACTIVATION == "gelu_erf":  # exact: x * Phi(x)
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    return acc
""".strip()

# Which output tile a linear tile index names. Tiles are visited in groups of GROUP tiles along
# one dimension so that consecutive programs share operand tiles while they are in L2.
TILE_COORDS_FN = """
@triton.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP: tl.constexpr, M_MAJOR: tl.constexpr):
    if M_MAJOR:  # GROUP row-tiles sweep across N together
        per_group = GROUP * num_pid_n
        first_m = (tile_id // per_group) * GROUP
        rows = min(num_pid_m - first_m, GROUP)
        pid_m = first_m + (tile_id % per_group) % rows
        pid_n = (tile_id % per_group) // rows
    else:  # GROUP column-tiles sweep down M together
        per_group = GROUP * num_pid_m
        first_n = (tile_id // per_group) * GROUP
        cols = min(num_pid_n - first_n, GROUP)
        pid_n = first_n + (tile_id % per_group) % cols
        pid_m = (tile_id % per_group) // cols
    return pid_m, pid_n
""".strip()

# One program per output tile, plain pointer loads: correct for any shape, stride and layout.
# Rows and columns past the edge are redirected to row/column 0 instead of masked, so only K
# needs masks; those rows are computed and then dropped by the store mask. A "+res" layout's
# residual (M, N) is read under the store's mask and added last (the families that launch
# this kernel for other work leave it out: HAS_RESIDUAL defaults to False).
TILED_KERNEL = """
@triton.jit
def matmul_tiled_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP: tl.constexpr, M_MAJOR: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    res_ptr=None, stride_rm=0, stride_rn=0, HAS_RESIDUAL: tl.constexpr = False,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP, M_MAJOR)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Wrap instead of mask; the hints keep B's and A's contiguous loads vectorized.
    rows = tl.max_contiguous(tl.multiple_of(tl.where(offs_m < M, offs_m, 0), BLOCK_M), BLOCK_M)
    cols = tl.max_contiguous(tl.multiple_of(tl.where(offs_n < N, offs_n, 0), BLOCK_N), BLOCK_N)
    rows = rows.to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(tf32_operand(a), tf32_operand(b), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    acc = apply_epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_RESIDUAL:
        r_ptrs = res_ptr + offs_m[:, None].to(tl.int64) * stride_rm + offs_n[None, :] * stride_rn
        acc = acc + tl.load(r_ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
""".strip()

# run()'s first lines: the logical (M, K) x (K, N) views whatever the storage layout.
OPERAND_VIEWS = """
    a_view = a.T if A_TRANS else a  # logical (M, K)
    b_view = b.T if B_TRANS else b  # logical (K, N)
    bias = rest[0] if HAS_BIAS else out  # any pointer when there is no bias; never read
    M, K = a_view.shape
    N = b_view.shape[1]
""".strip("\n")


# Host-side TMA descriptors that launch() can key its compiled-kernel cache on. Triton's
# TensorDescriptor is unhashable, which sent every call through the JIT's slow per-call path
# (~40-80 us of host time); this one hashes by everything the kernel can depend on (dtype,
# alignment, shape, strides, block), which is finer than Triton's own specialization.
HOST_DESCRIPTOR = """
class HostDescriptor(TensorDescriptor):
    @classmethod
    def over(cls, t, block_shape):
        return cls(t, list(t.shape), list(t.stride()), list(block_shape))

    def _key(self):
        base = self.base
        return (base.dtype, base.data_ptr() % 16 == 0, tuple(self.shape), tuple(self.strides),
                tuple(self.block_shape), self.padding)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, HostDescriptor) and self._key() == other._key()
""".strip()
