"""Stream-K (matmul_streamk_tma) against the persistent TMA leader and torch.matmul, bf16 NN.

    python -m benchmarks.probes.streamk_probe             # on the H200: ~2-3 min, compiles included
    python -m benchmarks.probes.streamk_probe --dry-run   # anywhere: check, render, import, splits
    python -m benchmarks.probes.streamk_probe --interpret # anywhere: the whole path, interpreter

Why these shapes: in 128x256 tiles on 132 SMs a persistent grid runs xlarge (4096^3) in 3.88
waves, llm_qkv in 3.88 waves of only 8 K-steps, tall in 1.94, large (2048^3) in 0.97 and
llm_mlp in 10.42; a persistent kernel's busiest SM does whole extra tiles that stream-K shares.

Compiles every point first in parallel worker processes (Triton's on-disk cache then serves
this process; the stream-K kernel does not specialize on its split, so one compile serves all
shapes), then per shape checks each point against torch.matmul twice (the second call needs
re-armed counters) and times the correct ones interleaved with the leader and torch.matmul by
the harness protocol (harness.timing: L2 flush, pre-roll, fresh random order per round). The
reported time is what harness.evaluation reports: plain event time plus the function's tail
beyond the device-sync round trip measured on torch.matmul.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from kernels.problem import Problem

SHAPES = [  # (name in kernels.shapes.MATMUL, shape), most important first
    ("xlarge", (4096, 4096, 4096)),
    ("llm_mlp", (4096, 11008, 4096)),
    ("tall", (8192, 1024, 1024)),
    ("large", (2048, 2048, 2048)),
    ("llm_qkv", (4096, 4096, 512)),
]
H200_SMS = 132  # the dry run's split table; the GPU run uses the device's own count
DEFAULT_OUT = "benchmarks/results/streamk_probe_h200.json"


def _sk(
    bm=128,
    bn=256,
    bk=64,
    w=8,
    s=3,
    sub=True,
    ws=False,
    flat=False,
    group=8,
    desc="host",
    waves=1,
    first=True,
    peek=True,
) -> tuple[str, dict[str, Any]]:
    return (
        "matmul_streamk_tma",
        {
            "BLOCK_M": bm,
            "BLOCK_N": bn,
            "BLOCK_K": bk,
            "NUM_WARPS": w,
            "NUM_STAGES": s,
            "EPILOGUE_SUBTILE": sub,
            "WARP_SPECIALIZE": ws,
            "FLATTEN": flat,
            "GROUP": group,
            "TILE_ORDER": "m_major",
            "DESCRIPTORS": desc,
            "SK_WAVES": waves,
            "SK_FIRST": first,
            "SK_PEEK": peek,
        },
    )


STREAMK_POINTS = [
    _sk(),  # the family's default for large shapes
    _sk(ws=True, flat=True),  # the leader's warp-specialized data-parallel loop
    _sk(desc="device"),
    _sk(ws=True, flat=True, desc="device"),  # the leader's own settings, plus stream-K
    _sk(waves=2),  # partial wave plus one whole wave shared
    _sk(first=False),  # data-parallel tiles first, stream-K share (and fixups) last
    _sk(peek=False),  # every partial through memory, even the last contributor's
    _sk(s=4),
    _sk(group=16),
    _sk(ws=True, flat=True, waves=2),
    _sk(bn=128, s=4, sub=False, ws=True, flat=True, group=16),  # the 128x128 leader's tiles
]


def leader_point(problem: Problem) -> tuple[str, dict[str, Any]]:
    """The first persistent TMA point of the problem's starting points (the measured leader;
    every shape here is in the "large" class, so it is one point for all of them)."""
    from kernels import get_op

    points = get_op("matmul").starting_points(problem)
    return next(p for p in points if p[0] == "matmul_persistent_tma")


def label(family: str, params: dict[str, Any]) -> str:
    p = params
    text = f"{p['BLOCK_M']}x{p['BLOCK_N']}x{p['BLOCK_K']} w{p['NUM_WARPS']} s{p['NUM_STAGES']}"
    text += f" g{p['GROUP']} {p['DESCRIPTORS']}"
    text += " sub" if p["EPILOGUE_SUBTILE"] else ""
    text += " ws" if p["WARP_SPECIALIZE"] else ""
    text += " flat" if p["FLATTEN"] else ""
    if family == "matmul_streamk_tma":
        first = "skfirst" if p["SK_FIRST"] else "sklast"
        peek = " peek" if p["SK_PEEK"] else ""
        return f"streamk {text} W{p['SK_WAVES']} {first}{peek}"
    return f"persistent {text} (leader)"


def problem_of(shape) -> Problem:
    return Problem("matmul", tuple(shape), "bf16", "NN")


def full_params(family_name: str, params: dict[str, Any], problem: Problem):
    """(family, complete params, why invalid or None)."""
    from kernels import get_op

    family = next(f for f in get_op("matmul").families() if f.name == family_name)
    full = {**family.default(problem), **params}
    return family, full, family.check(problem, full)


def split_summary(module, shape, sms: int) -> dict[str, Any]:
    """The stream-K split on `sms` SMs and the busiest SM's K-steps against a persistent grid."""
    m, n, k = shape
    split = module.stream_k_split(m, n, k, sms)
    busiest = -(-split.dp_tiles // sms) * split.k_tiles + split.sk_base + (split.sk_extra > 0)
    return {
        **split._asdict(),
        "busiest_sm_iters": busiest,
        "persistent_busiest_sm_iters": -(-split.tiles // sms) * split.k_tiles,
    }


def _compile_one(task):
    """Worker: render, import and run each shape once (fills Triton's on-disk cache)."""
    index, family_name, params, shapes = task
    from kernels.candidate import load_module

    errors = {}
    for name, shape in shapes:
        problem = problem_of(shape)
        family, full, why = full_params(family_name, params, problem)
        if why is not None:
            errors[name] = f"invalid: {why}"
            continue
        try:
            module = load_module(family.render(problem, full))
            a = torch.randn(shape[0], shape[2], device="cuda", dtype=torch.bfloat16)
            b = torch.randn(shape[2], shape[1], device="cuda", dtype=torch.bfloat16)
            out = torch.empty(shape[0], shape[1], device="cuda", dtype=torch.bfloat16)
            module.run(a, b, out=out)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - reported per point, the probe goes on
            errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return index, errors


def dry_run() -> int:
    """CPU-safe: every point checks, renders and imports; print the splits on an H200."""
    from kernels.candidate import load_module

    failures = 0
    for name, shape in SHAPES:
        problem = problem_of(shape)
        print(f"## {name} {shape}", flush=True)
        for family_name, params in [leader_point(problem), *STREAMK_POINTS]:
            family, full, why = full_params(family_name, params, problem)
            if why is not None:
                print(f"   INVALID {label(family_name, full)}: {why}")
                failures += 1
                continue
            module = load_module(family.render(problem, full))
            line = f"   {label(family_name, full):64s}"
            if family_name == "matmul_streamk_tma":
                s = split_summary(module, shape, H200_SMS)
                line += (
                    f" dp {s['dp_tiles']:4d} sk {s['sk_tiles']:3d} tiles,"
                    f" busiest SM {s['busiest_sm_iters']} vs {s['persistent_busiest_sm_iters']}"
                    " K-steps"
                )
            print(line.rstrip(), flush=True)
    return 1 if failures else 0


def measure_shape(name, shape, points, compile_errors, *, interpret, sms, seconds) -> dict:
    """Check every point on one shape against torch.matmul, then time the correct ones
    interleaved with torch.matmul. `interpret`: the CPU interpreter in fp16 (its bf16 is
    wrong), host timings, so that this path can be tried without a GPU."""
    from harness.results import Regime
    from harness.timing import reported_us, summarize, time_interleaved
    from kernels import get_op
    from kernels.candidate import load_module
    from kernels.checking import compare

    device = "cpu" if interpret else "cuda"
    dtype = torch.float16 if interpret else torch.bfloat16
    problem = Problem("matmul", tuple(shape), "fp16" if interpret else "bf16", "NN")
    m, n, k = shape
    a = torch.randn(m, k, device=device).mul_(k**-0.25).to(dtype)
    b = torch.randn(k, n, device=device).mul_(k**-0.25).to(dtype)
    ref = torch.matmul(a, b)
    tol = get_op("matmul").tolerance(problem)
    out = torch.empty_like(ref)
    ref_out = torch.empty_like(ref)
    rows, fns = [], {"torch": lambda: torch.matmul(a, b, out=ref_out)}
    for i, (fam, params) in enumerate(points):
        family, full, _ = full_params(fam, params, problem)
        row: dict[str, Any] = {"label": label(fam, full), "family": fam, "params": full}
        rows.append(row)
        if name in compile_errors.get(i, {}):
            row["error"] = compile_errors[i][name]
            continue
        try:
            module = load_module(family.render(problem, full))
            if fam == "matmul_streamk_tma":
                row["split"] = split_summary(module, shape, sms)
            for _ in range(2):  # the second call runs on re-armed counters
                out.fill_(float("nan"))
                module.run(a, b, out=out)
                result = compare(out, ref, tol)
                if not result.passed:
                    raise AssertionError(f"incorrect: {result.worst_error:.3g} {result.detail}")
        except Exception as exc:  # noqa: BLE001 - reported per point, the probe goes on
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            continue
        fns[str(i)] = lambda module=module: module.run(a, b, out=out)
    samples = time_interleaved(
        fns,
        regime=Regime.INTERPRETER if interpret else Regime.OFFLINE,
        min_samples=2 if interpret else 30,
        max_samples=2 if interpret else 300,
        target_rel_err=0.004,
        max_seconds=seconds,
    )
    if interpret:  # no events: host time, never to be compared with GPU numbers
        reported = {key: s.host_us for key, s in samples.items()}
        round_trip = 0.0
    else:
        synced = {key: s.synced_us for key, s in samples.items()}
        plain = {key: s.plain_us for key, s in samples.items()}
        reported, tails = reported_us(synced, plain, ["torch"])
        round_trip = tails["sync_round_trip_us"]
    stats = {key: summarize(values) for key, values in reported.items()}
    torch_us = stats["torch"].median_us
    leader_us = stats["0"].median_us if "0" in stats else None
    for i, row in enumerate(rows):
        if str(i) in stats:
            st = stats[str(i)]
            row.update(us=st.median_us, iqr_us=st.iqr_us, samples=st.samples)
            row["vs_torch"] = torch_us / st.median_us
            if leader_us:
                row["vs_leader"] = leader_us / st.median_us
    print(f"## {name} {tuple(shape)}: torch.matmul {torch_us:.1f} us", flush=True)
    for row in sorted(rows, key=lambda r: r.get("us", float("inf"))):
        if "us" in row:
            print(
                f"   {row['us']:8.1f} us  iqr {row['iqr_us']:5.1f}  {row['vs_torch']:.3f}x torch"
                f"  {row.get('vs_leader', float('nan')):.3f}x leader  {row['label']}",
                flush=True,
            )
        else:
            print(f"   FAIL {row['label']}: {row['error'][:160]}", flush=True)
    return {
        "name": name,
        "shape": list(shape),
        "torch_us": torch_us,
        "sync_round_trip_us": round_trip,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="no GPU: check and render only")
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="no GPU: the whole probe in the Triton interpreter at shapes / 16, fp16, no JSON",
    )
    parser.add_argument("--names", default="", help="comma-separated shape names (default all)")
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--seconds-per-shape", type=float, default=20.0)
    parser.add_argument("--budget-s", type=float, default=200.0, help="time no shape after this")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # read when the candidates' kernels are defined
    elif not torch.cuda.is_available():
        print("no GPU: use --dry-run or --interpret", file=sys.stderr)
        return 2

    t0 = time.time()
    names = [n for n in args.names.split(",") if n]
    shapes = [(n, s) for n, s in SHAPES if not names or n in names]
    points = [leader_point(problem_of(SHAPES[0][1])), *STREAMK_POINTS]
    compile_errors: dict[int, dict[str, str]] = {}
    if not args.interpret:  # compile in parallel; the on-disk cache then serves this process
        tasks = [(i, fam, params, shapes) for i, (fam, params) in enumerate(points)]
        with mp.get_context("spawn").Pool(min(args.workers, len(tasks))) as pool:
            for index, errors in pool.imap_unordered(_compile_one, tasks):
                compile_errors[index] = errors
        failed = sum(bool(e) for e in compile_errors.values())
        print(f"# compiled {len(tasks)} points in {time.time() - t0:.0f}s, {failed} with errors")

    from benchmarks.__main__ import device_info

    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.probes.streamk_probe " + " ".join(sys.argv[1:]),
        "device": {} if args.interpret else device_info(),
        "note": (
            "us: harness.timing offline protocol (L2 flush, pre-roll, interleaved), plain event"
            " median plus the tail beyond torch.matmul's sync round trip; vs_*: their us / ours"
        ),
        "points": [{"family": f, "params": p, "label": label(f, p)} for f, p in points],
        "shapes": [],
    }
    sms = 4 if args.interpret else torch.cuda.get_device_properties(0).multi_processor_count
    for name, shape in shapes:
        if args.interpret:
            shape = tuple(max(32, s // 16) for s in shape)
        if time.time() - t0 > args.budget_s:
            report["shapes"].append({"name": name, "shape": list(shape), "skipped": "budget"})
            print(f"## {name} {shape}: skipped, over the {args.budget_s:.0f} s budget", flush=True)
            continue
        report["shapes"].append(
            measure_shape(
                name,
                shape,
                points,
                compile_errors,
                interpret=args.interpret,
                sms=sms,
                seconds=args.seconds_per_shape,
            )
        )
        if args.out and not args.interpret:  # after every shape: a cut-short run keeps its rows
            Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"# done in {time.time() - t0:.0f}s" + ("" if args.interpret else f", wrote {args.out}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
