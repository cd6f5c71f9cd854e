"""How the timing protocol's L2 flush weighs on memory-bound GEMMs (issue 24, decode shapes).

kf-timing-v1 flushed L2 by writing a 2x-L2 buffer (`flush.zero_()`, as triton.testing.do_bench
does), which leaves L2 full of dirty lines: the timed kernel's first reads evict them, and each
eviction is a write-back to HBM. A decode GEMM (M <= 64) only streams its weights, so that
traffic may be a large share of its time: on an H200 both torch.matmul and our best kernel read
1x6144x4096's 50 MB of B at ~2.4 TB/s, 58 % of the copy roof (results/both_ways_h200_3shapes_c).
After this probe's H200 run (results/l2_flush_h200.json), kf-timing-v2 reads the buffer instead
(harness.timing.L2Flush).
This times, interleaved, torch.matmul and a plain read of B (`B.sum()`) after three L2 states:
  zero : the protocol's flush (a write: dirty lines)
  read : a read of the same buffer (clean lines; what a model's previous layer leaves)
  warm : no flush (whatever the last call left)

    python -m benchmarks.l2_flush_probe --shapes 1x6144x4096,64x4096x14336 --out F.json
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from benchmarks import results_record
from harness.timing import L2Flush

STATES = ("zero", "read", "warm")
SPIN_CYCLES = 200_000  # ~100 us at 2 GHz: the host enqueues the call while the GPU spins


def time_states(fn, flush: torch.Tensor, samples: int) -> dict[str, float]:
    """Median event time (us) of fn() after each L2 state, the states interleaved."""
    times: dict[str, list[float]] = {s: [] for s in STATES}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        for state in STATES:
            if state == "zero":
                flush.zero_()
            elif state == "read":
                flush.sum()
            torch.cuda._sleep(SPIN_CYCLES)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times[state].append(start.elapsed_time(end) * 1e3)
    return {s: round(statistics.median(v), 2) for s, v in times.items()}


def probe(shape: tuple[int, int, int], samples: int) -> dict:
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    flush = L2Flush().buffer
    b_bytes = b.numel() * b.element_size()
    row = {"shape": "x".join(map(str, shape)), "b_mb": round(b_bytes / 2**20, 1)}
    for name, fn in (
        ("torch_matmul", lambda: torch.matmul(a, b, out=out)),
        ("read_b", lambda: b.sum()),
    ):
        fn()
        us = time_states(fn, flush, samples)
        row[name] = {
            "median_us": us,
            "b_tbps": {s: round(b_bytes / (t * 1e-6) / 1e12, 2) for s, t in us.items()},
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1x6144x4096,64x4096x14336,1x128256x4096")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    record = results_record.stamp("benchmarks.l2_flush_probe", sys.argv[1:])
    record["l2_bytes"] = torch.cuda.get_device_properties(0).L2_cache_size
    record["rows"] = []
    for text in args.shapes.split(","):
        shape = tuple(int(x) for x in text.split("x"))
        record["rows"].append(probe(shape, args.samples))  # type: ignore[arg-type]
        print(record["rows"][-1], flush=True)
    results_record.write(record, args.out)


if __name__ == "__main__":
    main()
