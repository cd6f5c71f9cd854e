"""attention: scaled dot-product attention forward; see op.py."""

from kernels.ops.attention.op import AttentionOp

OP = AttentionOp()
