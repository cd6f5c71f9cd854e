"""Read Nsight Compute reports with `ncu_report` (PyPI ncu-report) through one metric table.

Names differ across architectures and ncu versions, so each short name lists the metric names
to try in order, and a missing metric is None, never an error (R6.3). Works without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.results import Bottleneck

SECTIONS = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "Occupancy",
    "WarpStateStats",
    "LaunchStats",
    "SchedulerStats",
    "ComputeWorkloadAnalysis",
)
EXTRA_METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
)

METRICS: dict[str, tuple[str, ...]] = {
    "duration_ns": ("gpu__time_duration.sum",),
    "sm_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "memory_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_pct": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "dram_read_bytes": ("dram__bytes_read.sum",),
    "dram_write_bytes": ("dram__bytes_write.sum",),
    "dram_bytes_per_s": ("dram__bytes.sum.per_second",),
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct",),
    "l1_hit_pct": ("l1tex__t_sector_hit_rate.pct",),
    "l2_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
    "l1_pct": ("l1tex__throughput.avg.pct_of_peak_sustained_active",),
    "tensor_pipe_pct": (
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    ),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "occupancy_limit_registers": ("launch__occupancy_limit_registers",),
    "occupancy_limit_shared_mem": ("launch__occupancy_limit_shared_mem",),
    "occupancy_limit_warps": ("launch__occupancy_limit_warps",),
    "occupancy_limit_blocks": ("launch__occupancy_limit_blocks",),
    "occupancy_limit_barriers": ("launch__occupancy_limit_barriers",),
    "registers_per_thread": ("launch__registers_per_thread",),
    "block_size": ("launch__block_size",),
    "grid_size": ("launch__grid_size",),
    "shared_mem_dynamic_bytes": ("launch__shared_mem_per_block_dynamic",),
    "shared_mem_static_bytes": ("launch__shared_mem_per_block_static",),
    "waves_per_sm": ("launch__waves_per_multiprocessor",),
    "issue_active_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_active",),
    "eligible_warps_per_cycle": ("smsp__warps_eligible.avg.per_cycle_active",),
    "sm_clock_hz": ("gpc__cycles_elapsed.avg.per_second",),
    "dram_clock_hz": ("dram__cycles_elapsed.avg.per_second",),
    "spill_requests": ("derived__local_spilling_requests",),
}
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
LIMITERS = ("registers", "shared_mem", "warps", "blocks", "barriers")


@dataclass
class KernelMetrics:
    name: str
    metrics: dict[str, float | None]
    stalls: list[tuple[str, float]] = field(default_factory=list)  # all reasons, largest first
    rules: list[dict[str, Any]] = field(default_factory=list)


def _value(action, names: tuple[str, ...]) -> float | None:
    for name in names:
        metric = action.metric_by_name(name)
        if metric is None:
            continue
        try:
            value = metric.value()
        except Exception:  # noqa: BLE001  (some metrics have no scalar value)
            continue
        if isinstance(value, int | float):
            return float(value)
    return None


def read_action(action) -> KernelMetrics:
    metrics = {short: _value(action, names) for short, names in METRICS.items()}
    stalls = []
    for name in action.metric_names():
        if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX):
            reason = name[len(STALL_PREFIX) : -len(STALL_SUFFIX)]
            if reason.endswith("_not_issued"):
                continue
            value = _value(action, (name,))
            if value is not None:
                stalls.append((reason, value))
    stalls.sort(key=lambda kv: kv[1], reverse=True)
    rules = []
    for rule in action.rule_results_as_dicts():
        message = rule.get("rule_message") or {}
        speedup = rule.get("speedup_estimation") or {}
        rules.append(
            {
                "rule": rule.get("rule_identifier"),
                "section": rule.get("section_identifier"),
                "title": message.get("title", ""),
                "message": message.get("message", ""),
                "est_speedup_pct": speedup.get("speedup"),
            }
        )
    return KernelMetrics(action.name(), metrics, stalls, rules)


def read_report(path: str, nvtx: str | None = None) -> list[KernelMetrics]:
    """Every kernel in the report, or only those inside the NVTX range `nvtx` (e.g. "kf/")."""
    import ncu_report

    ctx = ncu_report.load_report(path)
    kernels = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        indices = rng.actions_by_nvtx([nvtx], []) if nvtx else range(rng.num_actions())
        kernels += [read_action(rng.action_by_idx(i)) for i in indices]
    return kernels


def limiter(metrics: dict[str, float | None]) -> str | None:
    """The occupancy limiter: the resource allowing the fewest blocks per SM."""
    values = {k: metrics.get(f"occupancy_limit_{k}") for k in LIMITERS}
    known = {k: v for k, v in values.items() if v is not None}
    return min(known, key=lambda k: known[k]) if known else None


def classify(metrics: dict[str, float | None]) -> Bottleneck:
    """Speed-of-light first; if neither unit is busy, occupancy or latency explains it."""
    sm = metrics.get("sm_pct")
    mem = metrics.get("memory_pct")
    if sm is None and mem is None:
        return Bottleneck.UNKNOWN
    sm, mem = sm or 0.0, mem or 0.0
    if max(sm, mem) >= 60.0:
        return Bottleneck.COMPUTE if sm >= mem else Bottleneck.MEMORY
    achieved = metrics.get("achieved_occupancy_pct")
    theoretical = metrics.get("theoretical_occupancy_pct")
    if theoretical is not None and theoretical < 50.0 and achieved is not None and achieved < 40.0:
        return Bottleneck.OCCUPANCY
    return Bottleneck.LATENCY


def combine(kernels: list[KernelMetrics]) -> dict[str, float | None]:
    """One digest for a candidate that launches several kernels: the longest one's metrics,
    with the total duration across kernels."""
    if not kernels:
        return dict.fromkeys(METRICS)
    main = max(kernels, key=lambda k: k.metrics.get("duration_ns") or 0.0)
    merged = dict(main.metrics)
    durations = [k.metrics.get("duration_ns") for k in kernels]
    merged["duration_ns"] = sum(d for d in durations if d is not None) or None
    merged["kernel_count"] = float(len(kernels))
    return merged
