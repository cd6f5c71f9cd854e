"""Device ceilings, measured once per device and cached: copy bandwidth and dense matmul rates.

Runs in a trusted child (phase "ceilings"). Every evaluation reports % of these measured
roofs, and a time below the roof's floor is physically implausible (R1.8).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from pathlib import Path

import torch


def device_key(name: str, driver: str) -> str:
    safe = "".join(c if c.isalnum() else "_" for c in f"{name}_{driver}_{torch.__version__}")
    return safe


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        return out.splitlines()[0] if out else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _median_ms(fn, reps: int = 10) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


METHOD = (
    "memory: the faster of copy_ 1 GiB (read+write bytes) and torch.sum of it as fp32 (read "
    "bytes); torch.matmul 8192^3 bf16/fp16, 4096^3 fp32 (TF32 off); median of 10 event-timed "
    "calls after 3 warm-ups"
)


def measure(job: dict) -> dict:
    import triton

    name = torch.cuda.get_device_name()
    driver = _driver()
    cache = Path(job["cache_dir"]) / f"ceilings-{device_key(name, driver)}.json"
    if cache.exists() and not job.get("refresh"):
        data = json.loads(cache.read_text())
        if data.get("method") == METHOD:  # else measured another way: measure again
            data["cached"] = True
            return data
    nbytes = 2**30
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    copy_ms = _median_ms(lambda s=src, d=dst: d.copy_(s))
    copy_gbps = 2 * nbytes / (copy_ms / 1000) / 1e9  # read + write
    # A read-only stream goes faster than a copy: torch.matmul read a 1 GB weight at 4.3 TB/s
    # where the copy made 4.1 (H200, 2026-11-29, results/l2_flush_h200.json), so a roof at the
    # copy's rate is no floor for a decode GEMM; the faster stream is.
    # As fp32: an int32 sum accumulates in int64 and ran at 743 GB/s (H200, 2026-11-29,
    # kf-timing-v2's first GPU run), a sixth of the stream; what the bits mean does not matter.
    words, sink = src.view(torch.float32), torch.empty((), dtype=torch.float32, device="cuda")
    read_ms = _median_ms(lambda w=words, o=sink: torch.sum(w, dim=0, out=o))
    read_gbps = nbytes / (read_ms / 1000) / 1e9
    del src, dst, words
    rates = {}
    for dtype_name, dtype, n in (
        ("bf16", torch.bfloat16, 8192),
        ("fp16", torch.float16, 8192),
        ("fp32", torch.float32, 4096),
    ):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        ms = _median_ms(lambda a=a, b=b: torch.matmul(a, b))
        rates[dtype_name] = 2 * n**3 / (ms / 1000) / 1e12
        del a, b
    props = torch.cuda.get_device_properties(0)
    data = {
        "name": name,
        "kind": "cuda",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "driver": driver,
        "cuda": str(torch.version.cuda),
        "peak_tflops": rates["bf16"],
        "peak_gbps": max(copy_gbps, read_gbps),
        "copy_gbps": copy_gbps,
        "read_gbps": read_gbps,
        "peak_tflops_by_dtype": rates,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "sm_count": props.multi_processor_count,
        "method": METHOD,
    }
    os.makedirs(cache.parent, exist_ok=True)
    cache.write_text(json.dumps(data, indent=2))
    data["cached"] = False
    return data
