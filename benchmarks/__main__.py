"""python -m benchmarks: search the families on the public shape set, gate, time, report.

    python -m benchmarks --ops matmul --baselines torch,cublaslt --regimes offline,server
    python -m benchmarks --ops rmsnorm,softmax --baselines torch,compile --out results/x.json
    python -m benchmarks --tuned benchmarks/results/matmul_h100.json   # reuse found winners
    python -m benchmarks --ops matmul --precompile 14   # compile the pools in 14 processes first

Prints a table (TFLOP/s or GB/s, % of measured roof, speedup per baseline, geomeans) and
writes JSON (device, versions, date, command, per-problem results) to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

import torch


def device_info() -> dict:
    import triton

    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = ""
    return {
        "name": torch.cuda.get_device_name(),
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "driver": driver,
        "python": platform.python_version(),
    }


def print_table(outcomes, regimes, baselines) -> dict:
    from benchmarks.run import geomean

    cols = [f"{b}/{r}" for r in regimes for b in baselines]
    print(
        f"\n{'problem':28} {'family':24} {'us':>9} {'TFLOP/s':>8} {'GB/s':>7} {'%roof':>6} "
        + " ".join(f"{c:>16}" for c in cols)
        + "  gate"
    )
    per_col: dict[str, list[float]] = {c: [] for c in cols}
    for o in outcomes:
        if o.error or not o.timings:
            print(f"{o.name:28} ERROR {o.error.splitlines()[-1] if o.error else ''}")
            continue
        cand = o.timings[regimes[0]]["candidate"]
        cells = []
        for r in regimes:
            for b in baselines:
                s = o.speedups.get(r, {}).get(b)
                x = s["synced"] if s else None
                if x:
                    per_col[f"{b}/{r}"].append(x)
                cells.append(f"{x:16.3f}" if x else f"{'-':>16}")
        tf = f"{o.tflops:8.1f}" if o.tflops else f"{'':>8}"
        host = "/".join(f"{o.host_overhead_us.get(k, 0):.0f}" for k in ("candidate", "torch"))
        print(
            f"{o.name:28} {o.family:24} {cand['median_us']:9.1f} {tf} {o.gbps:7.0f} "
            f"{o.pct_of_roof:6.1f} "
            + " ".join(cells)
            + ("  ok" if not o.gate else "  FAIL")
            + f"  host {host}"
        )
    means = {c: geomean(v) for c, v in per_col.items()}
    print(
        f"{'geomean speedup (synced)':62} "
        + " ".join(f"{means[c]:16.3f}" if means[c] else f"{'-':>16}" for c in cols)
    )
    return means


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--ops", default="matmul", help="comma-separated ops, or 'all'")
    parser.add_argument("--names", default="", help="comma-separated substrings of problem names")
    parser.add_argument("--baselines", default="torch,cublaslt,compile")
    parser.add_argument("--regimes", default="offline,server")
    parser.add_argument("--tuned", default="", help="a results JSON whose winners are reused")
    parser.add_argument(
        "--precompile", type=int, default=0, help="worker processes that compile pools first"
    )
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    from benchmarks import run as bench
    from benchmarks.timing import Timer, copy_bandwidth_gbps, matmul_peak_tflops
    from kernels.shapes import public_problems

    if not torch.cuda.is_available():
        print("benchmarks need a CUDA GPU", file=sys.stderr)
        return 2
    ops = None if args.ops == "all" else set(args.ops.split(","))
    names = [n for n in args.names.split(",") if n]
    entries = [
        e
        for e in public_problems()
        if (ops is None or e.problem.op in ops) and (not names or any(n in e.name for n in names))
    ]
    baselines = [b for b in args.baselines.split(",") if b]
    regimes = [r for r in args.regimes.split(",") if r]
    tuned = {}
    if args.tuned:
        with open(args.tuned) as f:
            previous = json.load(f)["results"]
        for o in previous:
            if o.get("family"):
                tuned[o["name"]] = {"family": o["family"], "params": o["params"]}

    if "cublaslt" in baselines:
        try:
            from harness import cublaslt

            build_dir = os.path.join(tempfile.gettempdir(), "kf_cublaslt")
            cublaslt.build(build_dir)
            bench._BASELINE_CACHE["cublaslt_dir"] = build_dir
        except Exception as exc:  # noqa: BLE001
            print(f"# cublaslt baseline unavailable: {exc}", flush=True)

    if args.precompile and not tuned:
        bench.precompile(entries, args.precompile)
    timer = Timer()
    roofs = {"copy_gbps": copy_bandwidth_gbps(timer), "peak_tflops": matmul_peak_tflops(timer)}
    print(
        f"# roofs: copy {roofs['copy_gbps']:.0f} GB/s, bf16 matmul {roofs['peak_tflops']:.0f} TFLOP/s",
        flush=True,
    )
    outcomes = []
    for e in entries:
        outcomes.append(
            bench.safe_bench(e, timer, baselines, regimes, roofs, fixed=tuned.get(e.name))
        )
        write_report(args, argv, roofs, {}, outcomes)  # partial results survive a time-out
    means = print_table(outcomes, regimes, baselines)
    write_report(args, argv, roofs, means, outcomes)
    return 0


def write_report(args, argv, roofs, means, outcomes) -> None:
    report = {
        "date": datetime.date.today().isoformat(),
        "generated_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "command": "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": device_info(),
        "roofs": roofs,
        "timing_protocol": "harness kf-timing-v1 (synced end event after device sync, minus the "
        "sync round trip measured on the baselines, as harness/evaluation.py does); "
        "raw_synced_median_us = before that subtraction; "
        "plain_median_us = end event right after the call",
        "geomean_speedup_synced": means,
        "results": [dataclasses.asdict(o) for o in outcomes],
    }
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    raise SystemExit(main())
