"""The timing protocol (kf-timing-v2): interleaved, flushed, synced, with a stopping rule.

Usable in-process for trusted code too (`benchmark`), e.g. by the kernels engineer's own
benchmarks. Timer functions are captured at import, before any candidate is imported, so a
candidate that reassigns `torch.cuda.Event.elapsed_time` or `time.perf_counter` changes nothing
here (and runtime.PatchWatch reports it).

Per sample: refill inputs (outside the timed region), L2 flush (a read of >= 2x L2; L2Flush
says why not a write), then in the OFFLINE regime a GPU spin (pre-roll) long enough for the
host to enqueue the call behind it, or in the SERVER regime an exponential idle gap; then
start event -> fn() -> plain end event -> device-wide synchronize -> synced end event. The
synced time is the reported one (robust to side streams, R1.6); plain vs synced and the host
timer are kept for cross-checks.

Why the pre-roll: OFFLINE means back-to-back launches, where a kernel's host launch cost
overlaps the previous kernel. Without it, a Python-launched Triton kernel (20-40 us of host
work) was charged its launch while cuBLAS (5 us) was not, which is the server regime's
question, not this one's. Its length starts from the measured host launch time (1.5x + 10 us)
and is then checked on the GPU: a few flushed calls at 1x, 2x, 4x, 8x that length (capped at
2 ms), keeping the shortest after which the plain event time stops falling (`pick_preroll`).
Only host work that does not wait on the GPU can hide behind it (launch bookkeeping); anything
that reads the inputs must wait for the spin and is counted. The chosen length and the table
are returned (Samples.preroll_*) and end up in Evaluation.checks["preroll"].

The calibration is not enough on its own: on the H200 VM (2026-11-22) the same 2.5 us kernel
was calibrated at 4.5 us behind a 67 us spin, then read 86 us in the sample loop because the
host's launch path ran slower there. So every OFFLINE sample is also checked on the host: if
enqueueing fn() took longer than ~90 % of the spin (`starved`), the GPU may have run dry before
the call arrived; the sample is dropped and that function's spin doubled (Samples.regrown).
Only harness code reads the host clock here; a candidate that slows its own launch only gets
a longer spin, which no event pair counts.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.results import Regime, TimingStats

_perf_counter = time.perf_counter
_sleep = time.sleep
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_ev_sync = torch.cuda.Event.synchronize
_device_sync = torch.cuda.synchronize
_gpu_spin = torch.cuda._sleep  # busy-waits N cycles on the current stream
_sum = torch.sum  # the L2 flush's read
_sysrand = random.SystemRandom()


@dataclass
class Samples:
    synced_us: list[float] = field(default_factory=list)  # reported: device sync before end
    plain_us: list[float] = field(default_factory=list)  # end event right after fn()
    host_us: list[float] = field(default_factory=list)  # perf_counter around fn()+sync
    # OFFLINE pre-roll: the GPU spin chosen (us), the host launch time it was sized from, and
    # the calibration table [(spin us, median plain-event us)] it was chosen from.
    preroll_us: float = 0.0
    launch_us: float = 0.0
    preroll_table: list[tuple[float, float]] = field(default_factory=list)
    regrown: list[tuple[float, float]] = field(default_factory=list)  # (host us, new spin us)

    def stats(self) -> TimingStats:
        return summarize(self.synced_us or self.host_us)

    def plain_stats(self) -> TimingStats:
        """The end event right after fn(): GPU time of back-to-back calls without the device
        sync's round trip, for ranking many trusted points quickly (the benchmark's search).
        The reported time of an evaluation is `stats()` corrected by `reported_us`."""
        return summarize(self.plain_us or self.host_us)


def summarize(values: list[float]) -> TimingStats:
    xs = sorted(values)
    n = len(xs)
    q = statistics.quantiles(xs, n=4) if n >= 2 else [xs[0]] * 3
    median = statistics.median(xs)
    iqr = q[2] - q[0]
    # Standard error of the median from the IQR (normal approximation): robust to the rare
    # 100x outlier (a preempted host thread) that would keep a mean-based rule from stopping.
    stderr = 1.2533 * (iqr / 1.349) / math.sqrt(n)
    return TimingStats(
        median_us=median,
        iqr_us=iqr,
        mean_us=statistics.fmean(xs),
        min_us=xs[0],
        samples=n,
        rel_stderr=stderr / median if median > 0 else 0.0,
    )


class L2Flush:
    """Evicts what the last call left in L2 by reading a buffer of 2x its size (R2.2).

    A read, not a write: kf-timing-v1 zeroed the buffer (as triton.testing.do_bench does),
    which leaves L2 full of dirty lines whose write-backs the timed call then pays as it reads.
    That added 4.2 us to torch.matmul 1x6144x4096 bf16 (22.7 against 18.5 us after a read) and
    8.0 us to 64x4096x14336 (H200, 2026-11-29: benchmarks/results/l2_flush_h200.json), the
    same for every function timed, which pulled decode GEMMs' ratios toward 1 and favoured
    weight-streaming points that win only over dirty lines (register prefetch, in matmul's
    starting_points).
    Before a weight-streaming GEMM a model's previous layer leaves its small output in L2, not
    60 MB of dirty lines. The read also writes back what the inputs' refill left dirty."""

    def __init__(self, device: int | None = None) -> None:
        props = torch.cuda.get_device_properties(
            torch.cuda.current_device() if device is None else device
        )
        l2 = getattr(props, "L2_cache_size", 0) or 50 * 2**20
        # fp32: an int32 sum accumulates in int64 at a sixth of the read rate (H200).
        self.buffer = torch.zeros(max(2 * l2, 64 * 2**20) // 4, dtype=torch.float32, device="cuda")
        self._sink = torch.empty((), dtype=torch.float32, device="cuda")

    def __call__(self) -> None:
        _sum(self.buffer, dim=0, out=self._sink)  # reads every line, writes 4 bytes


def time_interleaved(
    fns: dict[str, Callable[[], None]],
    *,
    regime: Regime,
    min_samples: int,
    max_samples: int,
    target_rel_err: float,
    before: Callable[[str, int], None] | None = None,
    after: Callable[[str, int], None] | None = None,
    warmup_calls: int = 10,
    warmup_s: float = 0.025,
    max_seconds: float = 120.0,
    server_gap_ms: float = 2.0,
) -> dict[str, Samples]:
    """Time every fn in the same process, in a fresh random order each round (R2.4)."""
    names = list(fns)
    samples = {name: Samples() for name in names}
    gpu = regime is not Regime.INTERPRETER
    flush = L2Flush() if gpu else None
    # Warm-up on every function (compiles, autotunes, ramps clocks); at least 10 calls or 25 ms.
    launch_us: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        t0 = _perf_counter()
        calls = 0
        while calls < (warmup_calls if gpu else 1) or (gpu and _perf_counter() - t0 < warmup_s):
            if before:
                before(name, -1)
            h0 = _perf_counter()
            fns[name]()
            launch_us[name].append((_perf_counter() - h0) * 1e6)
            if gpu:
                _device_sync()
            calls += 1
    preroll_cycles: dict[str, int] = {}
    preroll_us: dict[str, float] = {}
    per_us = 0.0
    if flush is not None and regime is Regime.OFFLINE:  # (flush exists exactly on a GPU)
        per_us = _spin_cycles_per_us()
        for name in names:
            # The last warm-up launches are past compilation; 1.5x plus a margin covers jitter.
            host = statistics.median(launch_us[name][-5:])
            base = min(max(30.0, 1.5 * host + 10.0), MAX_PREROLL_US)
            # Then check it on the GPU: on the H200 VM (2026-11-22) a 2.5 us Triton kernel
            # still read 58 us with this estimate (the host's own launch time does not bound
            # when the command reaches the GPU). Longer spins until plain events stop falling.
            table = []
            for spin_us in _preroll_ladder(base):
                plains = []
                for _ in range(PREROLL_PROBES):
                    if before:
                        before(name, -1)
                    plains.append(_probe_plain_us(fns[name], flush, int(spin_us * per_us)))
                table.append((spin_us, statistics.median(plains)))
            preroll_us[name] = pick_preroll(table)
            samples[name].launch_us = host
            samples[name].preroll_table = table
        # One spin for every function: the device sync that ends each sample waits out the
        # spin, and a longer wait wakes the host later, which the tail rule (reported_us)
        # would charge to the function with the slower launch. torch.matmul replayed by the
        # judge against itself read 2-6 % slow that way (H200, 2026-11-27: 2.0-4.3 us of tail
        # behind a 1.2-1.5 ms spin against 0.4-0.7 ms for the baseline).
        longest = max(preroll_us.values())
        for name in names:
            preroll_us[name] = longest
            preroll_cycles[name] = int(longest * per_us)
            samples[name].preroll_us = longest
    start_time = _perf_counter()
    for rnd in range(max_samples):
        order = names[:]
        _sysrand.shuffle(order)
        for name in order:
            if before:
                before(name, rnd)
            samples[name].host_us.append(0.0)  # placeholder, set below
            if flush is not None:  # on a GPU
                for _attempt in range(REGROW_TRIES + 1):
                    flush()
                    if regime is Regime.SERVER:
                        _device_sync()
                        _sleep(_sysrand.expovariate(1.0 / max(server_gap_ms, 1e-3)) / 1000.0)
                    hs = _perf_counter()
                    if name in preroll_cycles:
                        _gpu_spin(preroll_cycles[name])
                    start, plain_end, synced_end = _Event(True), _Event(True), _Event(True)
                    _record(start)
                    h0 = _perf_counter()
                    fns[name]()
                    _record(plain_end)
                    enqueue_us = (_perf_counter() - hs) * 1e6
                    _device_sync()
                    _record(synced_end)
                    h1 = _perf_counter()
                    _ev_sync(synced_end)
                    if name not in preroll_cycles or not starved(enqueue_us, preroll_us[name]):
                        break
                    # The spin may have ended before the call was enqueued: drop the sample,
                    # double the spin, and take it again (refilled inputs: a fresh call).
                    preroll_us[name] = min(2 * preroll_us[name], MAX_PREROLL_US)
                    preroll_cycles[name] = int(preroll_us[name] * per_us)
                    samples[name].preroll_us = preroll_us[name]
                    samples[name].regrown.append((round(enqueue_us, 1), preroll_us[name]))
                    if before:
                        before(name, rnd)
                samples[name].synced_us.append(_elapsed(start, synced_end) * 1000.0)
                samples[name].plain_us.append(_elapsed(start, plain_end) * 1000.0)
            else:
                h0 = _perf_counter()
                fns[name]()
                h1 = _perf_counter()
            # The host waited out the pre-roll too; it is not the function's time.
            samples[name].host_us[-1] = max(0.0, (h1 - h0) * 1e6 - preroll_us.get(name, 0.0))
            if after:
                after(name, rnd)
        done = rnd + 1
        settled = all(samples[n].stats().rel_stderr <= target_rel_err for n in names)
        if done >= min_samples and done % 5 == 0 and settled:
            break
        if _perf_counter() - start_time > max_seconds and done >= min(min_samples, 3):
            break
    return samples


MAX_PREROLL_US = 2000.0
PREROLL_PROBES = 5
REGROW_TRIES = 3  # per sample; a function that always overruns keeps the longest spin
STARVED_FRACTION = 0.9  # of the spin: margin for when the spin itself starts on the GPU


def starved(enqueue_us: float, spin_us: float) -> bool:
    """Whether enqueueing the call (host clock, from the spin's launch to the end event's)
    outlasted the spin, so the GPU may have idled inside the timed region. A spin at the cap
    is kept: a function that waits on the GPU itself overruns any spin, and is slower anyway."""
    return spin_us < MAX_PREROLL_US and enqueue_us > STARVED_FRACTION * spin_us


def _preroll_ladder(base: float) -> list[float]:
    """base, 2x, 4x, 8x, capped; the first is the host-launch estimate."""
    return sorted({min(base * k, MAX_PREROLL_US) for k in (1, 2, 4, 8)})


def pick_preroll(table: list[tuple[float, float]]) -> float:
    """The shortest spin whose median plain-event time is within 5 % (+0.5 us) of the best:
    longer spins change nothing once the launch is hidden, they only idle the GPU."""
    best = min(plain for _, plain in table)
    return min(spin for spin, plain in table if plain <= 1.05 * best + 0.5)


def _probe_plain_us(fn: Callable[[], None], flush: L2Flush, cycles: int) -> float:
    """One flushed, pre-rolled call; start event to the end event right after fn()."""
    flush()
    _gpu_spin(cycles)
    start, end = _Event(True), _Event(True)
    _record(start)
    fn()
    _record(end)
    _device_sync()
    return _elapsed(start, end) * 1000.0


def reported_us(
    synced: dict[str, list[float]], plain: dict[str, list[float]], trusted: list[str]
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """The reported samples: plain event times plus each function's median *tail*, the time
    its work went on after fn() returned (median synced - plain), beyond the sync round trip
    measured on the trusted functions. Returns (samples by name, tail charged by name).

    Why medians and not a per-sample subtraction: the device-wide sync's round trip jitters
    by tens of microseconds on a VM (IQR ~20 us on the H200, 2026-11-22), which buried a
    2.5 us kernel (9.4 us median, IQR 20 us). A side stream's work is still charged in full
    on the median, and a large tail is rejected outright by the side-stream check.
    """

    def tail(name: str) -> float:
        return statistics.median([s - p for s, p in zip(synced[name], plain[name], strict=True)])

    refs = [tail(n) for n in trusted if synced.get(n)]
    ref = max(0.0, min(refs)) if refs else 0.0
    charged = {n: max(0.0, tail(n) - ref) for n in synced if synced[n]}
    out = {n: [p + charged[n] for p in plain[n]] for n in charged}
    return out, {"sync_round_trip_us": ref, **charged}


def _spin_cycles_per_us() -> float:
    """Calibrate torch.cuda._sleep: cycles per microsecond at the current clock."""
    cycles = 2_000_000
    _gpu_spin(cycles // 10)  # ramp clocks
    start, end = _Event(True), _Event(True)
    _record(start)
    _gpu_spin(cycles)
    _record(end)
    _ev_sync(end)
    return cycles / max(_elapsed(start, end) * 1000.0, 1e-3)


def speedup_ci(
    baseline_us: list[float], candidate_us: list[float], *, draws: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Bootstrap 95 % interval of median(baseline)/median(candidate)."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        b = statistics.median(rng.choices(baseline_us, k=len(baseline_us)))
        c = statistics.median(rng.choices(candidate_us, k=len(candidate_us)))
        ratios.append(b / c if c > 0 else float("inf"))
    ratios.sort()
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def benchmark(
    fn: Callable[[], None],
    *,
    regime: Regime = Regime.OFFLINE,
    min_samples: int = 50,
    max_samples: int = 500,
    target_rel_err: float = 0.01,
    before: Callable[[], None] | None = None,
) -> TimingStats:
    """Trusted in-process timing of one function with the harness protocol."""
    samples = time_interleaved(
        {"fn": fn},
        regime=regime,
        min_samples=min_samples,
        max_samples=max_samples,
        target_rel_err=target_rel_err,
        before=(lambda _n, _i: before()) if before else None,
    )
    return samples["fn"].stats()
