"""rotary: rotary position embedding (rotate-half form); see op.py."""

from kernels.ops.rotary.op import RotaryOp

OP = RotaryOp()
