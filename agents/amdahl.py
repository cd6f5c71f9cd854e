"""The Amdahl plan of a profiled model: which problems to optimize, in what order, and with
how much of the job's budget. Pure arithmetic; model_classify gives the shares.

If a problem takes a share p of the model's time and its kernel gets s times faster, the
model gets 1 / ((1 - p) + p / s) times faster; several problems at once add their p / s terms.
Problems are ranked, and the budget split, by the gain the plan expects of each: its time at
the speedup its distance from the device's roof allows (between 1.05x and 2x; 2x where the roof
is unknown), plus the elementwise passes a fusion removes. A GEMM cuBLAS already runs at the
roof expects little (a GPT-J block's q/k/v GEMM took a 300 s budget for a 0.996x at 796 TFLOPS,
while its bias+GELU GEMM, whose fused epilogue removes a 64 MB pass, went unfunded: H200,
2026-11-29, benchmarks/results/model_gptj_block_h200.json). Where our kernels of the op were
measured on such a device (Op.measured_best), the plan expects at most that, and nothing where
it was no win: prefill attention on an H200, about a fifth of llama_block's time, where cuDNN's
kernel beat ours at every measured shape (results/sdpa_backends_h200.json). Only problems
whose needs fit the budget together (agents/fit.py: a full screen round and one verification
each) are funded, each slice at least its need; the others are listed with why they were left
out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

SPEEDUPS = (1.5, 2.0, 3.0)  # the kernel speedups each plan row predicts the model's gain at
EXPECTED_SPEEDUP = 2.0  # what the plan expects of a kernel far from the roof, or of unknown
# At the measured roof (cuBLAS's own rate on its best shape): the few percent searches still
# find around cuBLAS (1.00-1.03x torch on the H200's unseen GEMMs, both_ways_h200_*.json).
MIN_EXPECTED_SPEEDUP = 1.05


def end_to_end(shares_and_speedups: Iterable[tuple[float, float]]) -> float:
    """Model speedup when each (share, kernel speedup) pair applies; shares sum to <= 1."""
    pairs = list(shares_and_speedups)
    total = sum(p for p, _ in pairs)
    if total > 1.0 + 1e-9:
        raise ValueError(f"shares add up to {total:.3f} > 1")
    for p, s in pairs:
        if p < 0 or s <= 0:
            raise ValueError(f"share {p} and speedup {s}: need share >= 0 and speedup > 0")
    return 1.0 / ((1.0 - total) + sum(p / s for p, s in pairs))


def gain(share: float, speedup: float = EXPECTED_SPEEDUP) -> float:
    """Fraction of the model's time saved: 1 - 1 / end_to_end."""
    return 1.0 - 1.0 / end_to_end([(share, speedup)])


def expected_speedup(time_us: float, floor_us: float) -> float:
    """What the plan expects a kernel to reach on a problem taking time_us whose roofline
    floor is floor_us (0: unknown)."""
    if floor_us <= 0:
        return EXPECTED_SPEEDUP
    return min(EXPECTED_SPEEDUP, max(MIN_EXPECTED_SPEEDUP, time_us / floor_us))


def expected_gain(group: Mapping) -> float:
    """The fraction of the model's time a plan group's kernel is expected to save: its own
    time at the expected speedup, and the elementwise passes a fusion removes besides. Where our
    kernels of its op were measured on this device (`measured_best`, which already counts the
    passes they remove), at most that: nothing where they measured no win."""
    share, time_us = group["share"], group["time_us"]
    measured = group.get("measured_best")  # against the same baseline, fused passes and all
    if time_us <= 0 or (measured is not None and measured <= 1.0):
        return 0.0
    speedup = expected_speedup(time_us, group.get("floor_us", 0.0))
    if measured is not None:
        return gain(share, min(speedup, measured))
    return gain(share, speedup) + share * group.get("unfused_us", 0.0) / time_us


def ceiling(share: float) -> float:
    """Model speedup if this problem took no time at all (an infinitely fast kernel)."""
    return float("inf") if share >= 1.0 else 1.0 / (1.0 - share)


class Need(Protocol):
    """What one problem needs at least (agents.fit.Least)."""

    @property
    def total_s(self) -> float: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class MinimumSlice:
    """A fixed least slice for every problem (benchmarks, tests)."""

    total_s: float

    def describe(self) -> str:
        return f"the smallest slice worth running ({self.total_s:.0f} s)"


@dataclass(frozen=True)
class PlanItem:
    rank: int  # 1 = optimize first
    key: str  # kernels.Problem.key
    problem: dict  # kernels.Problem.to_dict()
    share: float  # of the model's profiled time
    time_us: float  # per forward step
    calls: float  # kernel launches per forward step
    predicted: dict[str, float]  # "1.5x" -> model speedup if this kernel gets 1.5x faster
    ceiling: float
    budget_s: float  # this problem's slice of the job's budget (0: not optimized)
    expected_gain: float = 0.0  # of the model's time, what the plan expects this kernel to save
    least_s: float = 0.0  # what it needs at least (Need.total_s)
    left_out: str = ""  # not funded: why, in words; "" when funded

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "key": self.key,
            "problem": self.problem,
            "share": self.share,
            "time_us": self.time_us,
            "calls": self.calls,
            "predicted": self.predicted,
            "ceiling": self.ceiling if self.ceiling != float("inf") else None,
            "budget_s": self.budget_s,
            "expected_gain": self.expected_gain,
            "least_s": self.least_s,
            "left_out": self.left_out,
        }


@dataclass(frozen=True)
class Plan:
    items: list[PlanItem]  # every optimizable problem, the largest expected gain first
    budget_s: float
    not_optimizable_share: float  # time in ops kernels/ does not know, or cannot run
    predicted_all: dict[str, float] = field(default_factory=dict)  # every funded item at once

    @property
    def funded(self) -> list[PlanItem]:
        return [i for i in self.items if i.budget_s > 0]

    def to_dict(self) -> dict:
        return {
            "items": [i.to_dict() for i in self.items],
            "budget_s": self.budget_s,
            "not_optimizable_share": self.not_optimizable_share,
            "predicted_all": self.predicted_all,
        }


def make_plan(
    groups: Iterable[Mapping],
    *,
    budget_s: float,
    least: Callable[[Mapping], Need] | float = 60.0,
    max_problems: int | None = None,
) -> Plan:
    """groups: ProblemGroup.to_dict()s (op, label, problem or None, share, time_us, calls; and
    floor_us, unfused_us where the device's roof is known: harness.model.classify.plan_groups).

    Optimizable groups are ranked by expected gain; at most `max_problems` are candidates. In
    that order, each joins the funded problems while their needs (`least`: per problem dict, or
    one number for all) still add up to at most the budget; else it is left out with the
    reason. So the problem of most expected gain that fits goes first: a cheaper one of less
    gain never takes its place (Llama's block at a 200 s budget: swiglu_gate, needing 198 s,
    lost its slice to qkv_rotary, needing 123 s, under an older rule). The budget is then split
    by expected gain, each slice raised to its problem's need where the split falls short
    (`_split`). Funding by gain-proportional slices alone left Qwen2's qkv_rotary out at a 600 s
    budget (144 s of the 198 s it needs) while swiglu_gate got 456 s, more than twice its need;
    the qkv_rotary search alone verified 1.14x torch.compile in 113 s (H200, 2026-11-29,
    results/qkv_rotary_agent_h200.json). When none fits, none is funded (a slice that cannot
    finish one screen and one verification cannot ship a verified kernel).
    """
    if budget_s <= 0:
        raise ValueError("the budget must be positive")
    groups = list(groups)
    ranked = sorted((g for g in groups if g.get("problem")), key=lambda g: -expected_gain(g))
    rest = sum(g["share"] for g in groups if not g.get("problem"))
    gains = [expected_gain(g) for g in ranked]
    needs = [least(g["problem"]) if callable(least) else MinimumSlice(float(least)) for g in ranked]
    limit = len(ranked) if max_problems is None else min(max_problems, len(ranked))
    left_out = dict.fromkeys(range(limit, len(ranked)), f"beyond the job's first {limit} problems")

    funded: list[int] = []
    for index in range(limit):
        needed = sum(needs[i].total_s for i in funded)
        if gains[index] <= 0:
            left_out[index] = _no_gain(ranked[index])
            continue
        if needed + needs[index].total_s <= budget_s:
            funded.append(index)
            continue
        why = f"needs at least {needs[index].total_s:.0f} s ({needs[index].describe()}); "
        if funded:
            who = "the problem" if len(funded) == 1 else f"the {len(funded)} problems"
            why += (
                f"{who} of more expected gain need {needed:.0f} s of the {budget_s:.0f} s "
                f"budget, which leaves {budget_s - needed:.0f} s"
            )
        else:
            why += f"more than all of the {budget_s:.0f} s budget"
        left_out[index] = why
    slices = _split(budget_s, {i: gains[i] for i in funded}, {i: needs[i].total_s for i in funded})
    items = []
    for index, (g, gn) in enumerate(zip(ranked, gains, strict=True)):
        slice_s = slices.get(index, 0.0)
        items.append(
            PlanItem(
                rank=index + 1,
                key=g["label"],
                problem=dict(g["problem"]),
                share=g["share"],
                time_us=g["time_us"],
                calls=g["calls"],
                predicted={f"{s:g}x": end_to_end([(g["share"], s)]) for s in SPEEDUPS},
                ceiling=ceiling(g["share"]),
                budget_s=round(slice_s, 1),
                expected_gain=gn,
                least_s=round(needs[index].total_s, 1),
                left_out=left_out.get(index, ""),
            )
        )
    funded_items = [i for i in items if i.budget_s > 0]
    predicted_all = {f"{s:g}x": end_to_end([(i.share, s) for i in funded_items]) for s in SPEEDUPS}
    return Plan(items, budget_s, rest, predicted_all)


def _no_gain(group: Mapping) -> str:
    why = "the plan expects it to save no time"
    if "measured_best" in group:
        why = (
            f"our kernels measured {group['measured_best']:.2f}x its baseline on this device at "
            f"best ({group['measured_results']}): {why}"
        )
    if "baseline_saves" in group:  # a rewrite costs no search: the check times it anyway
        why += (
            "; the end-to-end check still tries PyTorch's own call there, with no budget "
            f"(it saves {group['baseline_saves']})"
        )
    return why


def _split(budget_s: float, gains: dict[int, float], needs: dict[int, float]) -> dict[int, float]:
    """The budget over the funded problems (their needs add up to at most the budget) in
    proportion to expected gain, each raised to what it needs at least where its share falls
    short, the others splitting what is left in the same proportion."""
    raised: set[int] = set()
    while True:
        free = [i for i in gains if i not in raised]
        rest = budget_s - sum(needs[i] for i in raised)
        total = sum(gains[i] for i in free)
        short = {i for i in free if total <= 0 or rest * gains[i] / total < needs[i]}
        if not short or not free:
            break
        raised |= short
    if not free:  # every share fell short: each gets its need, the spare goes by gain
        total = sum(gains.values()) or 1.0
        return {i: needs[i] + rest * gains[i] / total for i in gains}
    return {i: needs[i] for i in raised} | {i: rest * gains[i] / total for i in free}


def predicted_from_measured(plan: Plan, kernel_speedups: Mapping[str, float]) -> float:
    """The model speedup Amdahl predicts from the kernel speedups actually measured (key ->
    speedup; a problem without a winner counts as 1x)."""
    return end_to_end([(i.share, kernel_speedups.get(i.key, 1.0)) for i in plan.items])
