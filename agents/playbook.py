"""The optimization playbook: what the profile says, and which way to move the knobs.

From AutoKernel's tiers (block sizes; memory access; compute; advanced: split-K, persistence,
warp specialization; architecture: TMA) and the Hopper ladder in seeds 000/001 (tiles, stages,
warps, persistence and TMA, warp specialization, split-K, swizzle, epilogue), driven by the
bottleneck: memory-bound -> fewer bytes and wider accesses, occupancy-limited -> fewer
registers or smaller tiles, latency-bound -> more work per program, compute-bound -> keep
the tensor cores fed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.results import Bottleneck

# Parameter roles, recognised by name (families name their knobs after Triton's conventions).
ROLES: dict[str, re.Pattern[str]] = {
    "tile": re.compile(r"^(BLOCK|TILE)(_SIZE)?(_[MNK])?$", re.I),
    "warps": re.compile(r"num_warps|WARPS", re.I),
    "stages": re.compile(r"num_stages|STAGES", re.I),
    "swizzle": re.compile(r"GROUP|SWIZZLE", re.I),
    "split": re.compile(r"SPLIT", re.I),
    "work": re.compile(r"ROWS|PER_PROGRAM|WORK", re.I),
    "persistence": re.compile(r"PERSIST|NUM_SMS|NUM_PROGRAMS|PER_SM", re.I),
}

# Direction per role for each bottleneck: +1 larger / more, -1 smaller / fewer.
MOVES: dict[Bottleneck, dict[str, int]] = {
    Bottleneck.MEMORY: {"tile": +1, "stages": +1, "swizzle": +1, "work": +1},
    Bottleneck.OCCUPANCY: {"tile": -1, "stages": -1, "warps": +1, "work": -1},
    Bottleneck.LATENCY: {"tile": +1, "stages": +1, "work": +1, "warps": +1},
    Bottleneck.COMPUTE: {"tile": +1, "warps": +1, "stages": +1, "swizzle": +1, "persistence": +1},
    Bottleneck.UNKNOWN: {},
}

ADVICE: dict[Bottleneck, str] = {
    Bottleneck.MEMORY: "move fewer bytes: wider tiles and loads, deeper pipelining, better L2 reuse",
    Bottleneck.OCCUPANCY: "raise occupancy: smaller tiles or fewer stages to free registers and shared memory",
    Bottleneck.LATENCY: "hide latency: more work per program and more loads in flight",
    Bottleneck.COMPUTE: "keep the tensor cores fed: larger MMA tiles, more warps, swizzled and persistent scheduling",
    Bottleneck.UNKNOWN: "explore the family's space where the surrogate is least sure",
}

# Family tiers (lower first): plain tiling, then memory-access, then advanced schedules.
TIER_HINTS: list[tuple[re.Pattern[str], int]] = [
    (re.compile(r"tma|wgmma|hopper", re.I), 5),
    (re.compile(r"persist|warp_?spec|ws\b|split", re.I), 4),
    (re.compile(r"fused|epilogue|welford|online", re.I), 3),
    (re.compile(r"swizzle|group|vector", re.I), 2),
]


@dataclass(frozen=True)
class Diagnosis:
    bottleneck: Bottleneck
    evidence: str  # the numbers that led to it, in words
    advice: str


def role_of(param: str) -> str | None:
    for role, pattern in ROLES.items():
        if pattern.search(param):
            return role
    return None


def preferences(bottleneck: Bottleneck, params: list[str]) -> dict[str, int]:
    """Per-parameter preferred direction for the search (+1 up the value list, -1 down)."""
    moves = MOVES[bottleneck]
    prefs = {}
    for name in params:
        role = role_of(name)
        if role is not None and role in moves:
            prefs[name] = moves[role]
    return prefs


def family_tier(name: str) -> int:
    for pattern, tier in TIER_HINTS:
        if pattern.search(name):
            return tier
    return 1


def diagnose(profile: Mapping[str, Any] | None, evaluation: Mapping[str, Any] | None) -> Diagnosis:
    """The bottleneck from the latest profile, else from the evaluation's roofline numbers."""
    if profile and profile.get("bottleneck") not in (None, "", Bottleneck.UNKNOWN.value):
        bottleneck = Bottleneck(profile["bottleneck"])
        metrics = profile.get("metrics") or {}
        shown = ", ".join(
            f"{k}={v:.3g}" for k, v in list(metrics.items())[:4] if isinstance(v, int | float)
        )
        return Diagnosis(
            bottleneck, f"profiler says {bottleneck.value}-bound ({shown})", ADVICE[bottleneck]
        )
    return _from_roofline(evaluation or {})


def _from_roofline(evaluation: Mapping[str, Any]) -> Diagnosis:
    device = evaluation.get("device") or {}
    tflops, gbps = evaluation.get("tflops"), evaluation.get("gbps")
    peak_t, peak_g = device.get("peak_tflops"), device.get("peak_gbps")
    compute = 100.0 * tflops / peak_t if tflops and peak_t else None
    memory = 100.0 * gbps / peak_g if gbps and peak_g else None
    if compute is None and memory is None:
        return Diagnosis(
            Bottleneck.UNKNOWN, "no profile and no roofline numbers", ADVICE[Bottleneck.UNKNOWN]
        )
    c, m = compute or 0.0, memory or 0.0
    evidence = f"{c:.0f}% of the compute roof, {m:.0f}% of the memory roof"
    if max(c, m) < 40.0:
        bottleneck = Bottleneck.LATENCY  # far from both roofs: too little work in flight
    elif c >= m:
        bottleneck = Bottleneck.COMPUTE
    else:
        bottleneck = Bottleneck.MEMORY
    return Diagnosis(bottleneck, evidence, ADVICE[bottleneck])
