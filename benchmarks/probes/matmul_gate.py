"""GPU correctness of the matmul families' points at odd shapes and layouts (bf16 and fp16).

    python -m benchmarks.probes.matmul_gate

The CPU interpreter computes bf16 wrong, so bf16 is checked here, on the GPU: each family's
default (and SPLIT_K=3) on odd, decode and deep-K shapes, two layouts, two seeds (the split-K
fixup counters must re-arm between calls). Names families as arguments (default: the newest).
"""

from __future__ import annotations

import sys

from kernels import get_op
from kernels.checking import check_source
from kernels.problem import Problem

SHAPES = [(3, 5, 7), (127, 96, 200), (1, 4096, 4096), (1024, 1024, 8192)]
LAYOUTS = ["NN", "TN+bias+gelu"]


def main(argv: list[str] | None = None) -> int:
    wanted = set((argv if argv is not None else sys.argv[1:]) or ["matmul_splitk_tma"])
    op = get_op("matmul")
    failed = 0
    for family in op.families():
        if family.backend != "triton" or family.name not in wanted:
            continue
        for shape in SHAPES:
            for layout in LAYOUTS:
                for dtype in ("bf16",):
                    problem = Problem("matmul", shape, dtype, layout)
                    points = [family.default(problem)]
                    if "SPLIT_K" in points[0]:
                        points.append({**points[0], "SPLIT_K": 3})
                        points.append({**points[0], "SPLIT_K": 2, "DESCRIPTORS": "host"})
                        points.append(
                            {
                                **points[0],
                                "SPLIT_K": 2,
                                "DESCRIPTORS": "host",
                                "WARP_SPECIALIZE": True,
                            }
                        )
                    for params in points:
                        if family.check(problem, params) is not None:
                            continue
                        source = family.render(problem, params)
                        fails = check_source(op, problem, source, device="cuda")
                        fails += check_source(op, problem, source, device="cuda", seed=1)
                        failed += bool(fails)
                        if fails:
                            print(f"FAIL {family.name} {problem.key} {params}: {fails[:2]}")
        print(f"# {family.name}: done, {failed} failures so far", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
