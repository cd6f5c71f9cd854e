"""How long this machine's evaluations take, kept across runs: a machine fact, like its ceilings.

A run keeps back time for its final full verification from the start (agents/stopping.py). Before
it has measured one, it used a constant, and an H100 overran it: full verifications took 46-56 s
against an estimate of 45 s, so a final verification was killed at 55 s with a 1.04x candidate
in hand (2026-11-28, benchmarks/results/side_stream_compile_load_h100.json). The machine's own
recent durations are the better first estimate. Kept per protocol ("full", "quick"), for GPU
evaluations only (the agents' evaluator records and reads them where a GPU is visible: under the
CPU interpreter a duration follows the shape more than the machine), in the harness cache: one
file for a host's workers, written under a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import statistics
from pathlib import Path

KEEP = 16  # the most recent durations per key; the median of these is the estimate


def _path() -> Path:
    from harness.device import cache_dir

    return cache_dir() / "evaluate-seconds.json"


def _read(path: Path) -> dict[str, list[float]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        k: [float(x) for x in v if isinstance(x, (int, float)) and x > 0]
        for k, v in data.items()
        if isinstance(v, list)
    }


def record(protocol: str, seconds: float) -> None:
    """Add one evaluation's wall time (a killed one's limit is a lower bound: still worth it)."""
    if not seconds > 0:
        return
    path = _path()
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _read(path)
        data[protocol] = [*data.get(protocol, []), round(float(seconds), 3)][-KEEP:]
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)


def typical(protocol: str) -> float | None:
    """The median of this machine's recent durations for that protocol, or None if none."""
    with contextlib.suppress(OSError):
        recent = _read(_path()).get(protocol, [])
        if recent:
            return statistics.median(recent)
    return None
