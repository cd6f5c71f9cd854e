"""A wide per-shape search over the matmul families, wider than the benchmark's pools.

    python -m benchmarks.probes.matmul_search --out benchmarks/results/matmul_search_h200.json

Compiles every point in parallel worker processes first (Triton's on-disk cache then serves
the main process), then, per public matmul shape, checks each point against the reference on
the GPU and ranks it by flushed back-to-back event time interleaved with torch.matmul (GPU
time; benchmarks/timing.py). Its top points seed the benchmark's pools (benchmarks/pools.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import sys
import time

import torch

from kernels.ops.matmul.starting_points import splitk_tma_point, tma_point
from kernels.ops.matmul.starting_points import tiled_point as _tiled  # the pools' point shape


def _tma(bm, bn, bk, w, s, sub, ws=False, group=8, flat=False, order="m_major"):
    return tma_point(bm, bn, bk, w, s, sub, ws, flat, group=group, order=order)


def _sk(bm, bn, bk, split, w, s, group=1, desc="device", order="m_major"):
    return splitk_tma_point(bm, bn, bk, split, w, s, group=group, desc=desc, order=order)


# The persistent TMA points that led round 1 (all shapes from 2048^3 up), and variants.
_TMA_BEST = [
    (128, 256, 64, 8, 3, True, True, True),
    (128, 256, 64, 8, 4, True, True, True),
    (128, 256, 64, 8, 3, False, True, True),
    (128, 256, 64, 8, 3, True, False, False),
    (128, 256, 64, 8, 4, True, False, False),
    (128, 128, 64, 8, 4, False, True, True),
    (128, 128, 64, 8, 5, True, True, True),
]


def points_for(m: int, n: int, k: int) -> list[tuple[str, dict]]:
    pts: list[tuple[str, dict]] = []
    if m <= 16:  # decode: weight streaming
        for bn in (32, 64, 128):
            for bk in (128, 256):
                for split in (1, 2, 4, 8):
                    for s in (3, 4, 6):
                        if (16 + bn) * bk * 2 * s > 200_000:
                            continue
                        pts.append(_sk(16, bn, bk, split, 4, s))
                        if s == 4 or bn == 128:
                            pts.append(_sk(16, bn, bk, split, 4, s, desc="host"))
        return pts
    if m * n <= 256 * 256:  # tiny
        for bm, bn, bk, w, s in [
            (64, 64, 64, 4, 2),
            (64, 32, 128, 4, 2),
            (64, 32, 128, 4, 1),
            (64, 32, 128, 2, 2),
            (32, 64, 64, 4, 3),
            (32, 64, 128, 4, 2),
            (32, 32, 128, 4, 2),
            (64, 64, 128, 4, 1),
        ]:
            pts.append(_tiled(bm, bn, bk, w, s))
        return pts
    if m * n <= 512 * 512:  # small
        for bm, bn, bk, w, s in [
            (64, 64, 128, 4, 3),
            (64, 64, 128, 4, 2),
            (64, 64, 128, 4, 4),
            (64, 32, 128, 4, 3),
            (32, 64, 128, 4, 3),
            (64, 64, 256, 4, 2),
            (64, 64, 128, 8, 3),
            (32, 64, 256, 4, 2),
            (64, 128, 128, 4, 3),
            (128, 64, 128, 4, 3),
        ]:
            pts.append(_tiled(bm, bn, bk, w, s, group=8))
        for split in (1, 2):
            pts.append(_sk(64, 64, 128, split, 4, 3, group=8, desc="host"))
            pts.append(_sk(64, 64, 128, split, 4, 3, group=8))
        return pts
    if k >= 4 * max(m, n):  # deep K: split K, big tiles (less L2 traffic per FLOP)
        for bm, bn, bk, w, s in [
            (128, 128, 64, 8, 4),
            (128, 128, 128, 8, 3),
            (256, 128, 64, 8, 3),
            (256, 128, 64, 8, 4),
            (128, 256, 64, 8, 3),
            (128, 256, 64, 8, 4),
        ]:
            for split in (2, 4, 8):
                if (m // bm) * (n // bn) * split > 264:
                    continue
                pts.append(_sk(bm, bn, bk, split, w, s, group=8))
                pts.append(_sk(bm, bn, bk, split, w, s, group=8, order="n_major"))
        for t in _TMA_BEST[:3]:
            pts.append(_tma(*t[:6], ws=t[6], flat=t[7]))
        return pts
    for bm, bn, bk, w, s, sub, ws, flat in _TMA_BEST:
        for group in (8, 16) if m * n >= 4096 * 4096 else (8, 4):
            pts.append(_tma(bm, bn, bk, w, s, sub, ws=ws, group=group, flat=flat))
    for order in ("n_major",):
        pts.append(_tma(128, 256, 64, 8, 3, True, ws=True, flat=True, order=order))
        pts.append(_tma(128, 256, 64, 8, 3, False, ws=True, flat=True, order=order))
    # Two programs per SM: one's epilogue overlaps the other's main loop.
    for bm, bn, bk, w, s, sub in [
        (128, 128, 64, 8, 3, True),
        (128, 128, 64, 4, 3, True),
        (128, 128, 64, 8, 2, False),
        (128, 64, 64, 4, 4, False),
    ]:
        point = _tma(bm, bn, bk, w, s, sub)
        point[1]["PROGRAMS_PER_SM"] = 2
        pts.append(point)
    # One program per tile (no persistence): TMA loads, and plain pointer loads.
    for bm, bn, bk, w, s in [
        (128, 256, 64, 8, 3),
        (128, 256, 64, 8, 4),
        (128, 128, 64, 8, 4),
        (128, 128, 64, 4, 4),
        (256, 128, 64, 8, 3),
    ]:
        pts.append(_sk(bm, bn, bk, 1, w, s, group=8))
        pts.append(_tiled(bm, bn, bk, w, s, group=8))
    if m * n <= 2048 * 2048 or k <= 1024:  # one or two waves: a little split-K fills the SMs
        for bm, bn, bk, w, s in [(128, 128, 64, 8, 4), (128, 256, 64, 8, 3)]:
            pts.append(_sk(bm, bn, bk, 2, w, s, group=8))
    return pts


def _compile_one(task):
    """Worker: render, import and run once (compiles into the shared on-disk cache)."""
    shape, family_name, params = task
    from kernels import get_op
    from kernels.candidate import load_module
    from kernels.problem import Problem

    problem = Problem("matmul", tuple(shape), "bf16", "NN")
    op = get_op("matmul")
    family = next(f for f in op.families() if f.name == family_name)
    full = {**family.default(problem), **params}
    if (why := family.check(problem, full)) is not None:
        return task, f"invalid: {why}"
    try:
        module = load_module(family.render(problem, full))
        inputs = op.make_inputs(problem, seed=0, device="cuda")
        out = torch.empty(problem.shape[0], problem.shape[1], dtype=torch.bfloat16, device="cuda")
        module.run(*inputs, out=out)
        torch.cuda.synchronize()
        return task, ""
    except Exception as exc:  # noqa: BLE001
        return task, f"{type(exc).__name__}: {str(exc)[:300]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--names", default="", help="comma-separated substrings of shape names")
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    from benchmarks.__main__ import device_info
    from benchmarks.timing import Timer
    from kernels import get_op
    from kernels.candidate import load_module
    from kernels.checking import compare
    from kernels.shapes import MATMUL

    names = [n for n in args.names.split(",") if n]
    entries = [e for e in MATMUL if not names or any(n in e.name for n in names)]
    tasks, compiled_as = [], {}
    for e in entries:
        for fam, params in points_for(*e.problem.shape):
            # Triton specializes integer arguments only on ==1 and %16: one compile serves
            # every shape of the set with the same M==1 flag (all else is a multiple of 16).
            spec = json.dumps((e.problem.shape[0] == 1, fam, params), sort_keys=True)
            if spec not in compiled_as:
                compiled_as[spec] = (list(e.problem.shape), fam, params)
                tasks.append(compiled_as[spec])
    t0 = time.time()
    errors: dict[str, str] = {}
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for task, err in pool.imap_unordered(_compile_one, tasks):
            if err:
                errors[json.dumps(task, sort_keys=True)] = err
    print(
        f"# compiled {len(tasks)} points in {time.time() - t0:.0f}s, {len(errors)} failed",
        flush=True,
    )

    op = get_op("matmul")
    timer = Timer()
    report = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m benchmarks.probes.matmul_search " + " ".join(argv or sys.argv[1:]),
        "device": device_info(),
        "note": "us: flushed back-to-back event medians (GPU time), interleaved with torch.matmul",
        "shapes": [],
    }
    for e in entries:
        problem = e.problem
        family_of = {f.name: f for f in op.families()}
        inputs = op.make_inputs(problem, seed=0, device="cuda")
        ref = op.reference(problem, *inputs)
        tol = op.tolerance(problem)
        out = torch.empty(problem.shape[0], problem.shape[1], dtype=torch.bfloat16, device="cuda")
        ref_out = torch.empty_like(out)
        rows = []
        for fam, params in points_for(*problem.shape):
            spec = json.dumps((problem.shape[0] == 1, fam, params), sort_keys=True)
            key = json.dumps(compiled_as[spec], sort_keys=True)
            row = {"family": fam, "params": params}
            if key in errors:
                row["error"] = errors[key]
                rows.append(row)
                continue
            family = family_of[fam]
            full = {**family.default(problem), **params}
            try:
                module = load_module(family.render(problem, full))
                for _ in range(2):
                    out.fill_(float("nan"))
                    module.run(*inputs, out=out)
                torch.cuda.synchronize()
                result = compare(out, ref, tol)
                if not result.passed:
                    row["error"] = f"incorrect: {result.worst_error:.3g} {result.detail}"
                    rows.append(row)
                    continue
                stats = timer.offline(
                    {
                        "c": lambda m=module, x=inputs, o=out: m.run(*x, out=o),
                        "torch": lambda x=inputs, o=ref_out: torch.matmul(x[0], x[1], out=o),
                    },
                    budget_ms=80,
                    min_reps=15,
                    max_reps=100,
                )
                row["us"] = stats["c"].median_us
                row["torch_us"] = stats["torch"].median_us
                row["ratio"] = row["torch_us"] / row["us"]
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
        ok = sorted((r for r in rows if "us" in r), key=lambda r: -r["ratio"])
        report["shapes"].append(
            {
                "name": e.name,
                "shape": problem.shape,
                "ranked": ok,
                "failed": [r for r in rows if "us" not in r],
            }
        )
        print(
            f"## {e.name} {problem.shape}: {len(ok)} ok, {len(rows) - len(ok)} failed", flush=True
        )
        for r in ok[:6]:
            print(
                f"   {r['ratio']:.3f}x {r['us']:8.1f} us (torch {r['torch_us']:8.1f})"
                f" {r['family']} {r['params']}",
                flush=True,
            )
        for r in [r for r in rows if "us" not in r][:3]:
            print(f"   FAIL {r['family']} {r['params']}: {r['error'][:200]}", flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
