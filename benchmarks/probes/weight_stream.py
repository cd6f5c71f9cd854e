"""Weight streaming at M <= 64: the unseen set's small-M shapes, two load forms, two L2 states.

    python -m benchmarks.probes.weight_stream --out benchmarks/results/weight_stream_h100.json

Per shape (kernels.shapes.UNSEEN_MATMUL, M <= 64): each point of the shape class's
matmul_weight_stream starting points is checked on the GPU against the fp64 reference (bf16,
random and adversarial inputs), then the correct ones are timed interleaved with torch.matmul
and the cuBLASLt top-16 baseline, CUDA events, in two L2 states:

  dirty  the harness protocol (harness.timing.time_interleaved, OFFLINE): the L2 flush
         *writes* 2x L2, so every kernel starts with up to an L2 of dirty lines to write back
         while it streams (charged to it as DRAM traffic);
  clean  the same interleaving, but the flush *reads* 2x L2 (clean lines, nothing to write
         back) and a GPU spin hides the host launch: the weight stream alone.

GB/s counts op.bytes_moved (weights + activations + output); % is of the harness's measured
copy roof (harness.device_ceilings, read + write bytes of a 1 GiB copy).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import random
import statistics
import sys
import threading
import time

import torch

from benchmarks import run as bench
from benchmarks.__main__ import build_cublaslt, device_info
from harness import device_ceilings
from harness.results import Regime
from harness.timing import l2_flush_buffer, reported_us, time_interleaved
from kernels import get_op
from kernels.candidate import load_module
from kernels.checking import check_source
from kernels.problem import Problem
from kernels.shapes import UNSEEN_MATMUL

FAMILY = "matmul_weight_stream"


def points_for(problem: Problem) -> list[dict]:
    op = get_op("matmul")
    family = next(f for f in op.families() if f.name == FAMILY)
    pts = []
    for name, partial in op.starting_points(problem):
        params = {**family.default(problem), **partial}
        if name == FAMILY and family.check(problem, params) is None:
            pts.append(params)
    return pts


def clean_l2_times(fns: dict, reps: int = 30) -> dict[str, list[float]]:
    """Event times after a read-only flush (L2 left clean) and a spin that hides the launch."""
    flush = l2_flush_buffer()
    flush.fill_(1)
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:
        fns[n]()
    for _ in range(reps):
        random.shuffle(names)
        for n in names:
            flush.sum()  # reads 2x L2: evicts everything, leaves it clean
            torch.cuda._sleep(100_000)  # ~50 us at 1.98 GHz: the host enqueues fn behind it
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            start.record()
            fns[n]()
            end.record()
            end.synchronize()
            times[n].append(start.elapsed_time(end) * 1000)
    return times


def probe_shape(entry, ceilings) -> dict:
    problem = entry.problem
    op = get_op("matmul")
    family = next(f for f in op.families() if f.name == FAMILY)
    inputs = op.make_inputs(problem, seed=0, device="cuda")
    out = torch.empty(op.output_spec(problem).shape, dtype=problem.torch_dtype, device="cuda")
    fns, rows = {}, {}
    for i, params in enumerate(points_for(problem)):
        key = f"p{i}"
        source = family.render(problem, params)
        fails = check_source(op, problem, source, seed=0, device="cuda")
        module = load_module(source)
        module.run(*inputs, out=out)
        rows[key] = {"params": params, "gate": fails, "plan": list(module._PLANS.values())[0]}
        if not fails:
            fns[key] = lambda m=module: m.run(*inputs, out=out)
    built, errors = bench.baselines_for(problem, op, ["torch", "cublaslt"])
    outs = {name: torch.empty_like(out) for name in built}
    for name, fn in built.items():
        fns[name] = lambda fn=fn, o=outs[name]: fn(*inputs, out=o)
        rows[name] = {"baseline": True}
    samples = time_interleaved(
        fns,
        regime=Regime.OFFLINE,
        min_samples=20,
        max_samples=60,
        target_rel_err=0.01,
        max_seconds=2.5,
    )
    dirty, _ = reported_us(
        {k: s.synced_us for k, s in samples.items()},
        {k: s.plain_us for k, s in samples.items()},
        [k for k in samples if k in built],
    )
    clean = clean_l2_times(fns)
    nbytes = op.bytes_moved(problem)
    for key in fns:
        for state, times in (("dirty", dirty[key]), ("clean", clean[key])):
            us = statistics.median(times)
            rows[key][state] = {
                "median_us": us,
                "gbps": nbytes / us / 1e3,
                "pct_copy_roof": 100 * nbytes / us / 1e3 / ceilings["copy_gbps"],
            }
    for state in ("dirty", "clean"):
        for key in fns:
            for base in built:
                rows[key][state][f"vs_{base}"] = (
                    rows[base][state]["median_us"] / rows[key][state]["median_us"]
                )
    return {
        "name": entry.name,
        "shape": list(problem.shape),
        "weight_mib": problem.shape[1] * problem.shape[2] * 2 / 2**20,
        "bytes_moved": nbytes,
        "baseline_errors": errors,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probes.weight_stream")
    parser.add_argument("--out", required=True)
    parser.add_argument("--workers", type=int, default=14)
    args = parser.parse_args(argv)
    entries = [e for e in UNSEEN_MATMUL if e.problem.shape[0] <= 64]
    tasks = [(e.problem.to_dict(), FAMILY, p) for e in entries for p in points_for(e.problem)]
    t0 = time.time()
    builder = threading.Thread(target=build_cublaslt, args=(bench._BASELINE_CACHE,))
    builder.start()
    with mp.get_context("spawn").Pool(args.workers) as pool:
        failed = sum(bool(err) for err in pool.imap_unordered(bench._compile_task, tasks))
    builder.join()
    print(f"# compiled {len(tasks)} points ({failed} failed), cublaslt, {time.time() - t0:.0f}s")
    info = device_ceilings()
    ceilings = {"copy_gbps": info.peak_gbps, "peak_tflops": info.peak_tflops}
    results = []
    for e in entries:
        t = time.time()
        results.append(probe_shape(e, ceilings))
        r = results[-1]["rows"]
        best = min(
            (k for k in r if k.startswith("p") and "dirty" in r[k]),
            key=lambda k: r[k]["dirty"]["median_us"],
            default=None,
        )
        if best is None:
            print(f"{e.name:30} no correct point", flush=True)
            continue
        print(
            f"{e.name:30} best {r[best]['params']['LOADS']:9} "
            + " ".join(
                f"{st}: {r[best][st]['median_us']:.1f}us {r[best][st]['pct_copy_roof']:.0f}% "
                f"torch {r['torch'][st]['median_us']:.1f}us x{r[best][st]['vs_torch']:.3f}"
                for st in ("dirty", "clean")
            )
            + f"  ({time.time() - t:.0f}s)",
            flush=True,
        )
        report = {
            "date": datetime.date.today().isoformat(),
            "command": "python -m benchmarks.probes.weight_stream " + " ".join(sys.argv[1:]),
            "device": device_info(),
            "roofs": {**ceilings, "source": "harness.device_ceilings", "method": info.method},
            "protocol": __doc__,
            "results": results,
        }
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
