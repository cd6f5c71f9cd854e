"""swiglu_gate: silu(x @ w_gate^T) * (x @ w_up^T), the gate and up projections of a SwiGLU MLP
in one GEMM with the silu-times epilogue; see op.py."""

from kernels.ops.swiglu_gate.op import SwigluGateOp

OP = SwigluGateOp()
