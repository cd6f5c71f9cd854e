"""layernorm: normalization over rows with weight and bias; see op.py."""

from kernels.ops.layernorm.op import LayernormOp

OP = LayernormOp()
