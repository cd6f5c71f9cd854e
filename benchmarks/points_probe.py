"""Which points of one family are fastest at one problem, every one compiled and screened (no
search, no budget cut): to compare a family's schedules at a model's shape on the GPU.

    python -m benchmarks.points_probe qkv_rotary 2048x28x4x128x3584 \\
        --layout i8+bias+kv_heads=4 --family qkv_rotary_cutlass_sm90 \\
        --changes '[{}, {"SCHEDULER": "streamk"}]' --out F.json

Each change is applied to the family's default point ("starting" adds the op's starting points
of the family). The points go through the harness's screen (harness/screen.py): rendered from the
registry, compiled in parallel, checked against the op's reference at the shape and a tail
shape, timed interleaved with the eager baseline by CUDA events (OFFLINE: L2 flushed). A screen
ranks; it is not a verdict (harness/judge is).
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks import results_record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op")
    parser.add_argument("shape", help="the op's dims joined by x, e.g. 2048x4096x4096")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--layout", default="")
    parser.add_argument("--family", required=True)
    parser.add_argument("--changes", default="[{}]", help="a JSON list of changes to the default")
    parser.add_argument("--starting", action="store_true", help="add the family's starting points")
    parser.add_argument("--deadline", type=float, default=480.0, help="seconds for everything")
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    from harness.ops import resolve_op
    from harness.screen import ScreenPoint, screen
    from kernels.problem import Problem

    problem = Problem(
        args.op, tuple(int(d) for d in args.shape.split("x")), args.dtype, args.layout
    )
    op = resolve_op(problem.op)
    op.validate(problem)
    family = next(f for f in op.families() if f.name == args.family)
    default = family.default(problem)
    params = [{**default, **change} for change in json.loads(args.changes)]
    if args.starting:  # the op's starting points of this family (partial, as a search takes them)
        params += [
            {**default, **p} for name, p in op.starting_points(problem) if name == family.name
        ]
    unique = list({json.dumps(p, sort_keys=True): p for p in params}.values())
    refused = {
        json.dumps(p, sort_keys=True): why for p in unique if (why := family.check(problem, p))
    }
    points = [
        ScreenPoint(family.name, p) for p in unique if json.dumps(p, sort_keys=True) not in refused
    ]
    result = screen(problem, points, deadline_s=args.deadline)
    for entry in sorted(result.entries, key=lambda e: e.median_us or float("inf")):
        print(
            f"{entry.verdict.value:9} {entry.median_us or 0:9.1f} us  {entry.speedup or 0:6.3f}x "
            f"{result.baseline}  {json.dumps({k: v for k, v in entry.params.items() if default.get(k) != v})}"
            + (f"  ({entry.detail})" if entry.detail else "")
        )
    record = results_record.stamp("benchmarks.points_probe", argv) | {
        "problem": problem.key,
        "family": family.name,
        "default": default,
        "refused": refused,
        "screen": result.to_dict(),
    }
    results_record.write(record, args.out)
    return 0 if result.ranked() else 1


if __name__ == "__main__":
    sys.exit(main())
