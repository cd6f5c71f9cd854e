"""One package per op; each defines OP (a kernels.problem.Op)."""
