"""qkv_rotary: the q, k and v projections in one GEMM with rotary embedding applied to q and k
in its epilogue; see op.py."""

from kernels.ops.qkv_rotary.op import QkvRotaryOp

OP = QkvRotaryOp()
