"""matmul: C = epilogue(A @ B); see op.py for the layouts and epilogues."""

from kernels.ops.matmul.op import MatmulOp

OP = MatmulOp()
