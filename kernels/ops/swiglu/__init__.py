"""swiglu: the Llama MLP block, down(silu(gate(x)) * up(x)); see op.py."""

from kernels.ops.swiglu.op import SwigluOp

OP = SwigluOp()
