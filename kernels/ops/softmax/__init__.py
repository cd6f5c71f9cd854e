"""softmax: over the last dim of rows; see op.py."""

from kernels.ops.softmax.op import SoftmaxOp

OP = SoftmaxOp()
