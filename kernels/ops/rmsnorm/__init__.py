"""rmsnorm: RMS normalization over rows; see op.py."""

from kernels.ops.rmsnorm.op import RmsnormOp

OP = RmsnormOp()
