"""The old call shape of the benchmark's timer, kept for benchmarks/probes/ only until they call
harness.timing themselves: no timing of its own. Timer.offline and Timer.server run the
harness's protocol (harness.timing.time_interleaved, kf-timing-v1: interleaved, flushed, in the
OFFLINE or SERVER regime) and report its plain end events (GPU time without the device sync's
round trip, as this timer always did). benchmarks/ itself uses harness.timing directly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.results import Regime, TimingStats
from harness.timing import time_interleaved

Stats = TimingStats  # median_us, iqr_us, samples, to_dict() as before


class Timer:
    def offline(
        self,
        fns: dict[str, Callable[[], None]],
        budget_ms: float = 300.0,
        min_reps: int = 10,
        max_reps: int = 200,
    ) -> dict[str, TimingStats]:
        """Interleaved, flushed, back-to-back timing of every fn; median per fn."""
        samples = time_interleaved(
            fns,
            regime=Regime.OFFLINE,
            min_samples=min_reps,
            max_samples=max_reps,
            target_rel_err=0.01,
            max_seconds=budget_ms / 1000.0,
        )
        return {name: s.plain_stats() for name, s in samples.items()}

    def server(
        self, fns: dict[str, Callable[[], None]], reps: int = 30, mean_gap_s: float = 2e-4
    ) -> dict[str, TimingStats]:
        """Idle GPU before each call (sync + random gap): launch latency and cold L2 count."""
        samples = time_interleaved(
            fns,
            regime=Regime.SERVER,
            min_samples=reps,
            max_samples=reps,
            target_rel_err=0.0,
            server_gap_ms=mean_gap_s * 1000.0,
        )
        return {name: s.plain_stats() for name, s in samples.items()}


def copy_bandwidth_gbps(timer: Timer | None = None, nbytes: int = 2 * 2**30) -> float:
    """Measured device-to-device copy rate, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    stats = (timer or Timer()).offline({"copy": copy}, budget_ms=200)
    return 2 * nbytes / (stats["copy"].median_us * 1e-6) / 1e9
