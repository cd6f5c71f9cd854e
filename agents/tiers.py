"""The two tiers of a search and the hand-off between them: the rules, in one place.

Tier one ranks. Renders of our own families (trusted code) go to the screen, in batches
(harness/screen.py: compile ahead, one warm child, a quick check, GPU time interleaved with
the baseline). Anything an LLM wrote (untrusted) gets the sandboxed quick protocol instead.

Tier two decides: the harness's full protocol (every correctness stage, anti-cheat, timing,
every baseline). Only an attempt that passed it can become the best, and so be ranked or
exported; a screened-only candidate never is.

The hand-off is successive halving carried across the tiers: inside a screen round the faster
half goes on with more samples each time; of a round's survivors, the fastest `finalists`
that could still win (screened on the GPU within SCREEN_SLACK of the baseline, or faster, once
scaled to the fastest baseline the best's full verification timed: `against_fastest`) and
whose screened speedup beats the best's by more than the noise go to tier two (the first such
one always, so a run has a verified best early), as many as the time beyond the reserve can
verify. A render screened well below the baseline cannot be shipped: verifying it during the
search would buy only a report number, which the finish buys anyway (the challenger), so that
time goes to screening more. An untrusted candidate goes to tier two when its check says it
would be the best. When the search stops, the fastest screened render not yet verified that
would beat the best, or ties it within the screen's slack and could win (the challenger), is
verified within the reserve.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agents.config import OptimizeConfig
from agents.state import Best, OptimizeState, Pending, Screened, Tier
from harness.judge import wins
from harness.judge.wins import BaselineCall
from harness.results import Regime, Verdict
from harness.screen import ScreenEntry, ScreenPoint


def beats(
    speedup: float | None, noise: float, best_speedup: float | None, config: OptimizeConfig
) -> bool:
    """A ranking number that beats the best's by more than the noise (no best: any number)."""
    if speedup is None:
        return False
    if best_speedup is None:
        return True
    return speedup / best_speedup - 1.0 > max(noise, config.min_gain)


# The screen times GPU time against the baseline with fewer samples than tier two; the two
# have differed by a few percent. A render screened further below the baseline than this (or
# its noise) cannot become a win.
SCREEN_SLACK = 0.03


def could_win(speedup: float | None, noise: float) -> bool:
    """A screened speedup close enough to the baseline's 1.0 that tier two could find it ahead."""
    return speedup is not None and speedup * (1.0 + max(noise, SCREEN_SLACK)) >= 1.0


def against_fastest(best: Best | None, config: OptimizeConfig) -> float:
    """What a screened speedup (against the screen's baseline) is worth against the fastest
    baseline the best's full verification timed: a factor of at most 1.0 (1.0 before any).
    On GPT-2's lm_head (1024x50257x768, H200) torch.compile ran 3.7x faster than torch.matmul,
    so a render screened at 1.54x was 0.42x the fastest (both_ways_h200_2shapes_b.json)."""
    speedups = (best.get("speedups") if best is not None else None) or {}
    primary = speedups.get(config.baseline)
    if not primary or not speedups:
        return 1.0
    return min(1.0, min(speedups.values()) / primary)


def best_screen_speedup(best: Best | None) -> float | None:
    """The number a screened render must beat: the best's own screen number when it has one."""
    if best is None:
        return None
    return best.get("screen_speedup") or best["speedup"]


DISTRUST_AFTER = 2  # a family whose finalists failed tier two this often, and never passed


def distrusted(state: OptimizeState) -> set[str]:
    """Families whose screen numbers tier two keeps contradicting: every one of their last
    finalists (at least DISTRUST_AFTER) failed the full protocol. They send no more finalists;
    their renders still feed the search's surrogate."""
    failed: dict[str, int] = {}
    passed: set[str] = set()
    for r in state.get("history", []):
        if r["tier"] != "verify" or not r["family"]:
            continue
        if r["verdict"] in ("kept", "reverted"):
            passed.add(r["family"])
        elif r["verdict"] != "error":
            failed[r["family"]] = failed.get(r["family"], 0) + 1
    return {f for f, n in failed.items() if n >= DISTRUST_AFTER and f not in passed}


def finalists(
    state: OptimizeState,
    ranked: list[ScreenEntry],
    config: OptimizeConfig,
    *,
    slots: int,
    gpu_timed: bool,
) -> list[ScreenEntry]:
    """Which of a round's ranked entries go to tier two now (at most `slots` of them).
    `gpu_timed`: the screen's speedups are GPU times (not the interpreter's wall times, which
    say nothing about winning), so a render far below the baseline can wait."""
    best = state.get("best")
    judged = set(state.get("seen", {}))
    first = best is None and not any(r["tier"] == "verify" for r in state.get("history", []))
    skip = distrusted(state)
    factor = against_fastest(best, config)
    ranked = [e for e in ranked if e.family not in skip]
    chosen: list[ScreenEntry] = []
    for entry in ranked[: config.finalists]:
        if len(chosen) >= slots or entry.candidate_id in judged:
            continue
        if gpu_timed and not could_win(_worth(entry.speedup, factor), entry.noise):
            continue  # verified at the finish if it is still the challenger then
        if (first and not chosen) or beats(
            entry.speedup, entry.noise, best_screen_speedup(best), config
        ):
            chosen.append(entry)
    return chosen


def still_a_finalist(item: Pending, state: OptimizeState, config: OptimizeConfig) -> bool:
    """Whether a screen finalist waiting for tier two still beats the best's screen number
    (the best may have changed since it was chosen). Anything else waiting (an LLM's code, a
    finalist that carries a plan's LLM spend, anything ranked by interpreter timings) stays."""
    if item["tier"] != Tier.VERIFY.value or item["screen_speedup"] is None or not item["family"]:
        return True
    if item["llm_tokens"] or item["llm_cost_usd"]:
        return True
    best = state.get("best")
    timings = ((best.get("evaluation") or {}).get("timings") or {}) if best is not None else {}
    if timings.get("regime") == Regime.INTERPRETER.value:
        return True  # interpreter timings say nothing about winning: verified as chosen
    screened = state.get("screened", {}).get(ScreenPoint(item["family"], item["params"]).key)
    noise = screened["noise"] if screened else 0.0
    return beats(item["screen_speedup"], noise, best_screen_speedup(best), config)


def challenger(state: OptimizeState, config: OptimizeConfig) -> Screened | None:
    """What the finish verifies in the time kept back for it: the fastest screened render not
    verified yet, if it would beat the best, or if it is a near tie of the best's screen number
    that could still win. The two tiers' numbers differ by a few percent, so the full protocol
    may rank a near tie first; without one the kept time went unused (H200 agent runs ended
    with 27-64 s of their 4 minutes left and one verification each, 2026-11-29)."""
    best = state.get("best")
    judged = set(state.get("seen", {}))
    skip = distrusted(state)
    passed = [
        s
        for s in state.get("screened", {}).values()
        if s["verdict"] == Verdict.PASSED.value
        and s["family"] not in skip
        and s["speedup"]
        and s["verified"] is None
        and s["candidate_id"] not in judged
    ]
    # Fastest first, each speedup discounted by its own noise. Not by halving rounds first:
    # rounds rank renders within one screen batch, and a late batch's best (a CUTLASS point
    # whose compile came last) has fewer of them. GPT-J's fc_in on an H200 verified a 3-round
    # 1.112x Triton point at the finish over a 1-round CUTLASS 1.184x
    # (model_gptj_block_h200_v2.json).
    passed.sort(
        key=lambda s: ((s["speedup"] or 0.0) / (1.0 + s["noise"]), s["rounds"]), reverse=True
    )
    for s in passed[:1]:
        if beats(s["speedup"], s["noise"], best_screen_speedup(best), config):
            return s
        if near_tie(s, best, config):
            return s
    return None


def near_tie(screened: Screened, best: Best | None, config: OptimizeConfig) -> bool:
    """A screened render within the screen's slack (or its noise) of the best's screen number
    that could still beat the fastest baseline."""
    bar = best_screen_speedup(best)
    speedup, noise = screened["speedup"], screened["noise"]
    if bar is None or speedup is None:
        return False
    if not could_win(_worth(speedup, against_fastest(best, config)), noise):
        return False
    return speedup * (1.0 + max(noise, SCREEN_SLACK)) >= bar


def _worth(speedup: float | None, factor: float) -> float | None:
    return None if speedup is None else speedup * factor


@dataclass
class Outcome:
    """How a run ends: a verified best that beats every baseline, or the baseline and why."""

    kind: str  # "verified" or "baseline"
    reason: str
    speedups: dict[str, float] = field(default_factory=dict)  # the best's, from tier two

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def outcome(state: OptimizeState, config: OptimizeConfig, why_none: str) -> Outcome:
    """Never ship a loss: the best ships only if it beats every baseline of its full-protocol
    evaluation beyond noise (harness.judge.wins, the one rule)."""
    best = state.get("best")
    if best is None:
        return Outcome("baseline", f"{why_none}: PyTorch is kept")
    call = best_call(best, config)
    speedups = dict(best["speedups"]) or {config.baseline: best["speedup"]}
    fastest = call.fastest
    name, speedup = (fastest.baseline, fastest.speedup) if fastest else (config.baseline, 0.0)
    who = f"#{best['index']} {best['family'] or 'llm'}"
    if call.beats:
        return Outcome(
            "verified",
            f"{who}: {speedup:.3f}x the fastest baseline ({name}), fully verified",
            speedups,
        )
    return Outcome(
        "baseline",
        f"the best verified candidate ({who}) {_short_of(call, name, speedup)}{_regime(best)}: "
        "nothing beat the fastest baseline, PyTorch is kept",
        speedups,
    )


def _short_of(call: BaselineCall, name: str, speedup: float) -> str:
    """Why a best that lost does not ship, in words that match its numbers: a slowdown is no
    tie ("0.180x torch, ... not beyond noise" read as one, issue 27), and the deciding
    baseline is named once."""
    if speedup < 1.0:
        return f"is slower than {name} ({speedup:.3f}x)"
    closest = call.closest
    if closest is None or closest.baseline == name:
        low = closest.low if closest is not None else float("nan")
        return f"reaches {speedup:.3f}x {name}, within noise (lower bound {low:.3f})"
    return (
        f"reaches {speedup:.3f}x {name} (the fastest baseline), but {closest.speedup:.3f}x "
        f"{closest.baseline} is within noise (lower bound {closest.low:.3f})"
    )


def _regime(best: Best) -> str:
    """Interpreter ratios time an emulation on the CPU: the sentence says so."""
    timings = (best.get("evaluation") or {}).get("timings") or {}
    return " (CPU interpreter timings)" if timings.get("regime") == "interpreter" else ""


def best_call(best: Best, config: OptimizeConfig) -> BaselineCall:
    """The rule on the best's full-protocol evaluation; a best stored without its timings
    (none in practice) is judged on its primary speedup and noise."""
    call = wins.of_timings((best.get("evaluation") or {}).get("timings"))
    if call.margins:
        return call
    primary = best["speedups"] or {config.baseline: best["speedup"]}
    return wins.beats_baselines(primary, None, best["noise"])


WHY_CHARS = 160  # one reason, as kept in the run's state and shown per family


def screen_why(entry: ScreenEntry) -> str:
    """Why a render did not pass the screen, in one line: its verdict and the detail's last
    line (a traceback ends with the exception); "" when it passed."""
    if entry.verdict is Verdict.PASSED and entry.speedup:
        return ""
    lines = [ln.strip() for ln in entry.detail.splitlines() if ln.strip()]
    last = lines[-1] if lines else ("not timed" if entry.verdict is Verdict.PASSED else "")
    return f"{entry.verdict.value}: {last}"[:WHY_CHARS].rstrip(": ")


def by_family(screened: dict[str, Screened]) -> dict[str, dict[str, Any]]:
    """Per family: renders screened, passed, the best screened speedup, and why the others
    did not pass (`why_not`: a count per reason, most frequent first), so a family the screen
    drops says why (issue 24: CUTLASS read "0/8" and nothing more)."""
    out: dict[str, dict[str, Any]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for s in screened.values():
        family = out.setdefault(s["family"], {"screened": 0, "passed": 0, "best_speedup": None})
        family["screened"] += 1
        if s["verdict"] == Verdict.PASSED.value and s["speedup"]:
            family["passed"] += 1
            family["best_speedup"] = max(family["best_speedup"] or 0.0, s["speedup"])
        else:
            why = s.get("why") or s["verdict"]
            counts = reasons.setdefault(s["family"], {})
            counts[why] = counts.get(why, 0) + 1
    for name, counts in reasons.items():
        top = sorted(counts.items(), key=lambda kv: -kv[1])
        out[name]["why_not"] = "; ".join(f"{n}x {why}" for why, n in top[:3])[: 2 * WHY_CHARS]
    return dict(sorted(out.items()))


def counted(
    stats_dict: dict[str, Any],
    tier: str,
    *,
    candidates: int = 0,
    passed: int = 0,
    gpu_s: float = 0.0,
    **times: float,
) -> dict[str, Any]:
    """The run's SearchStats (state["stats"]) with one more batch counted under `tier`
    ("screen", "verify", "check"; "" for none); `times` adds seconds to compile_s,
    compile_wait_s, profile_s, or sets pending_compile."""
    from agents.reporting import SearchStats

    stats = SearchStats.from_dict(stats_dict)
    if tier:
        t = getattr(stats, tier)
        t.candidates += candidates
        t.passed += passed
        t.gpu_s += gpu_s
    for name, value in times.items():
        if name == "pending_compile":
            stats.pending_compile = int(value)
        else:
            setattr(stats, name, getattr(stats, name) + value)
    return stats.to_dict()
