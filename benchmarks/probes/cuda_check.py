"""Build and check the CUDA C++ WMMA matmul starter on the GPU (CI cannot: no nvcc there).

python -m benchmarks.probes.cuda_check
"""

from __future__ import annotations

import sys
import time

from kernels import get_op
from kernels.checking import check_source
from kernels.problem import Problem

CASES = [
    ((3, 5, 7), "NN"),
    ((127, 96, 200), "NT+bias+gelu"),
    ((512, 512, 512), "NN"),
    ((1000, 1000, 1000), "TN+bias+relu"),
]


def main() -> int:
    op = get_op("matmul")
    family = next(f for f in op.families() if f.backend == "cuda")
    failed = 0
    for shape, layout in CASES:
        for dtype in ("bf16", "fp16"):
            problem = Problem("matmul", shape, dtype, layout)
            t0 = time.time()
            failures = check_source(
                op, problem, family.render(problem, family.default(problem)), device="cuda"
            )
            failed += bool(failures)
            print(
                f"cuda_wmma {problem.key}: {'ok' if not failures else failures[:2]} "
                f"({time.time() - t0:.1f}s)",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
