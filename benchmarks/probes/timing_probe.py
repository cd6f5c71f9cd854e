"""Why candidate and torch differ under each timing protocol: GPU time vs host launch cost.

    python -m benchmarks.probes.timing_probe

For a few matmul points it measures (1) pure GPU time by CUDA-graph replay, (2) flushed
back-to-back events (host work overlaps the flush), (3) the harness's kf-timing-v1 protocol,
and (4) host time per call, with and without the cached-launch path.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

from benchmarks.run import host_overhead_us
from benchmarks.timing import Timer
from kernels import get_op
from kernels.candidate import load_module
from kernels.problem import Problem

POINTS = [
    (
        "xlarge",
        (4096, 4096, 4096),
        "matmul_persistent_tma",
        {
            "BLOCK_M": 128,
            "BLOCK_N": 256,
            "BLOCK_K": 64,
            "NUM_WARPS": 8,
            "NUM_STAGES": 4,
            "EPILOGUE_SUBTILE": True,
            "GROUP": 8,
            "DESCRIPTORS": "device",
        },
    ),
    (
        "xlarge_host",
        (4096, 4096, 4096),
        "matmul_persistent_tma",
        {
            "BLOCK_M": 128,
            "BLOCK_N": 256,
            "BLOCK_K": 64,
            "NUM_WARPS": 8,
            "NUM_STAGES": 4,
            "EPILOGUE_SUBTILE": True,
            "GROUP": 8,
            "DESCRIPTORS": "host",
        },
    ),
    (
        "xlarge_tiled",
        (4096, 4096, 4096),
        "matmul_tiled",
        {
            "BLOCK_M": 128,
            "BLOCK_N": 256,
            "BLOCK_K": 64,
            "NUM_WARPS": 8,
            "NUM_STAGES": 3,
            "GROUP": 8,
        },
    ),
    (
        "tiny",
        (128, 128, 128),
        "matmul_tiled",
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "NUM_WARPS": 4, "NUM_STAGES": 1, "GROUP": 1},
    ),
    (
        "decode_m1_4096",
        (1, 4096, 4096),
        "matmul_splitk",
        {
            "BLOCK_M": 16,
            "BLOCK_N": 64,
            "BLOCK_K": 256,
            "NUM_WARPS": 4,
            "NUM_STAGES": 4,
            "SPLIT_K": 1,
            "GROUP": 1,
        },
    ),
    (
        "deep_k",
        (1024, 1024, 8192),
        "matmul_splitk",
        {
            "BLOCK_M": 128,
            "BLOCK_N": 128,
            "BLOCK_K": 64,
            "NUM_WARPS": 4,
            "NUM_STAGES": 4,
            "SPLIT_K": 2,
            "GROUP": 8,
        },
    ),
]


def graph_us(fn, reps: int = 20) -> float:
    """Pure device time: replay a graph of `reps` calls (no flush: warm L2)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(5):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / (5 * reps)


def main() -> int:
    from harness.results import Regime
    from harness.timing import time_interleaved

    op = get_op("matmul")
    timer = Timer()
    rows = []
    for label, shape, family_name, partial in POINTS:
        problem = Problem("matmul", shape, "bf16", "NN")
        family = next(f for f in op.families() if f.name == family_name)
        params = {**family.default(problem), **partial}
        module = load_module(family.render(problem, params))
        a, b = op.make_inputs(problem, seed=0, device="cuda")
        out = torch.empty(shape[0], shape[1], dtype=torch.bfloat16, device="cuda")
        out2 = torch.empty_like(out)
        fns = {
            "candidate": lambda m=module, a=a, b=b, out=out: m.run(a, b, out=out),
            "torch": lambda a=a, b=b, out2=out2: torch.matmul(a, b, out=out2),
        }
        row = {"label": label, "family": family_name, "params": params}
        for who, fn in fns.items():
            fn()
            row[f"{who}_graph_us"] = graph_us(fn)
            row[f"{who}_host_us"] = host_overhead_us(fn, calls=200)
        flushed = timer.offline(fns, budget_ms=400)
        samples = time_interleaved(
            fns,
            regime=Regime.OFFLINE,
            min_samples=50,
            max_samples=200,
            target_rel_err=0.005,
            max_seconds=5,
        )
        for who in fns:
            row[f"{who}_flushed_us"] = flushed[who].median_us
            s = samples[who]
            row[f"{who}_harness_synced_us"] = s.stats().median_us
            row[f"{who}_harness_plain_us"] = sorted(s.plain_us)[len(s.plain_us) // 2]
        # The JIT path alone, for the host cost of the cached-launch shortcut.
        module._COMPILED.clear()
        kernel_names = [n for n in dir(module) if n.endswith("_kernel")]
        t0 = time.perf_counter()
        for _ in range(100):
            module._COMPILED.clear()
            module.run(a, b, out=out)
        row["candidate_host_jit_path_us"] = (time.perf_counter() - t0) / 100 * 1e6
        row["kernels"] = kernel_names
        torch.cuda.synchronize()
        rows.append(row)
        print(
            json.dumps(
                {
                    k: (round(v, 1) if isinstance(v, float) else v)
                    for k, v in row.items()
                    if k not in ("params", "kernels")
                }
            ),
            flush=True,
        )
    out_dir = os.environ.get("OUT", ".")
    with open(os.path.join(out_dir, "timing_probe.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
