"""sum: row sums in fp32; see op.py."""

from kernels.ops.sum.op import SumOp

OP = SumOp()
