"""The hand-off from the screen to tier two (agents/tiers.py): which screened renders are worth
a full verification during the search."""

from agents import Budget, OptimizeConfig, optimize
from agents.state import Screened
from agents.tests.fakes import FakeEvaluator, ListReporter, block_m_score
from agents.tiers import by_family, could_win, finalists, screen_why, still_a_finalist
from harness.results import Regime, Verdict
from harness.screen import ScreenEntry, ScreenPoint
from kernels import parse_problem

CONFIG = OptimizeConfig(budget=Budget(wall_s=60), finalists=2)


def entry(name: str, speedup: float, noise: float = 0.005) -> ScreenEntry:
    return ScreenEntry(
        "matmul_tiled", {"P": name}, name, Verdict.PASSED, speedup=speedup, noise=noise
    )


def test_a_render_screened_well_below_the_baseline_could_not_win():
    assert could_win(1.2, 0.0) and could_win(0.98, 0.0)  # within the screen's slack
    assert could_win(0.93, 0.08)  # ... or within its own noise
    assert not could_win(0.88, 0.01) and not could_win(None, 0.0)


def test_gpu_timed_renders_far_below_the_baseline_wait_for_the_finish():
    slow = [entry("a", 0.88), entry("b", 0.80)]
    assert finalists({}, slow, CONFIG, slots=4, gpu_timed=True) == []
    close = [entry("c", 0.99), entry("a", 0.88)]
    assert [e.candidate_id for e in finalists({}, close, CONFIG, slots=4, gpu_timed=True)] == ["c"]


def test_interpreter_timings_say_nothing_about_winning_so_the_first_round_still_sends_one():
    slow = [entry("a", 0.05), entry("b", 0.04)]
    chosen = finalists({}, slow, CONFIG, slots=4, gpu_timed=False)
    assert [e.candidate_id for e in chosen] == ["a", "b"]  # no best yet: each beats "none"


def test_a_search_whose_renders_all_lose_spends_its_gpu_time_screening():
    """Every render screens at 0.8x on the GPU: none is verified during the search, the
    finish verifies the fastest (the challenger) and the run ends on the baseline."""
    problem = parse_problem("matmul", "256x256x256", "fp16", "NN")

    def slow(source):
        score = block_m_score(source)
        return score if isinstance(score, Verdict) else 0.8 * score / 1.75

    evaluator = FakeEvaluator(slow, screen_regime=Regime.OFFLINE)
    config = OptimizeConfig(
        evaluator=evaluator,
        budget=Budget(wall_s=120, gpu_s=0.12),
        plateau=None,
        screen_batch=16,
        profile=False,
    )
    result = optimize(problem, config, ListReporter())
    assert len(evaluator.verified) == 1  # the finish's challenger, nothing before it
    assert len(evaluator.screened) > 32  # the time went to the screen
    assert result.verified is True and result.outcome == "baseline"


def test_the_search_event_says_what_the_screen_saw_of_each_family():
    problem = parse_problem("matmul", "256x256x256", "fp16", "NN")
    evaluator, reporter = FakeEvaluator(block_m_score), ListReporter()
    config = OptimizeConfig(
        evaluator=evaluator, budget=Budget(wall_s=60, gpu_s=0.05), plateau=None, profile=False
    )
    optimize(problem, config, reporter)
    families = reporter.searches[-1].to_dict()["families"]
    screened = len(evaluator.points) - len(evaluator.waiting)  # the rest were still queued
    assert families and sum(f["screened"] for f in families.values()) == screened
    for name, seen in families.items():
        assert 0 <= seen["passed"] <= seen["screened"], name
        assert (seen["best_speedup"] is None) == (seen["passed"] == 0), name
    assert max(f["best_speedup"] or 0 for f in families.values()) == 1.75  # BLOCK_M=256


def _screened(family: str, entry: ScreenEntry) -> Screened:
    return Screened(
        family=family, params=dict(entry.params), candidate_id=entry.candidate_id,
        verdict=entry.verdict.value, speedup=entry.speedup, noise=entry.noise,
        rounds=entry.rounds, verified=None, why=screen_why(entry),
    )  # fmt: skip


def test_each_family_says_why_its_renders_did_not_pass_the_screen():
    """Issue 24: the agent's summary read "matmul_cutlass_sm90 0/8" and nothing more."""
    traceback = "Traceback (most recent call last):\n  File x\nRuntimeError: nvcc exited 1\n"
    entries = {
        "ok": ("matmul_tiled", entry("ok", 1.1)),
        "t1": ("cutlass", ScreenEntry("cutlass", {"P": 1}, "t1", Verdict.TIMEOUT,
                                      "compile did not finish in time")),
        "t2": ("cutlass", ScreenEntry("cutlass", {"P": 2}, "t2", Verdict.TIMEOUT,
                                      "compile did not finish in time")),
        "ce": ("cutlass", ScreenEntry("cutlass", {"P": 3}, "ce", Verdict.COMPILE_ERROR,
                                      traceback)),
    }  # fmt: skip
    screened = {k: _screened(f, e) for k, (f, e) in entries.items()}
    assert screened["ok"]["why"] == ""
    assert screened["ce"]["why"] == "compile_error: RuntimeError: nvcc exited 1"
    families = by_family(screened)
    assert families["matmul_tiled"] == {"screened": 1, "passed": 1, "best_speedup": 1.1}
    cutlass = families["cutlass"]
    assert (cutlass["screened"], cutlass["passed"]) == (3, 0)
    assert cutlass["why_not"] == (
        "2x timeout: compile did not finish in time; 1x compile_error: RuntimeError: nvcc exited 1"
    )


def test_a_state_saved_before_reasons_were_kept_still_counts_its_failures():
    old = _screened("cutlass", ScreenEntry("cutlass", {}, "x", Verdict.CRASH, "boom"))
    del old["why"]  # type: ignore[misc]
    assert by_family({"x": old})["cutlass"]["why_not"] == "1x crash"


def pending(speedup: float, **kw) -> dict:
    return {
        "source": "",
        "family": "matmul_tiled",
        "params": {"P": str(speedup)},
        "hypothesis": "",
        "parent": None,
        "origin": "family:matmul_tiled",
        "tier": "verify",
        "screen_speedup": speedup,
        "llm_tokens": 0,
        "llm_cost_usd": 0.0,
        "error": "",
        **kw,
    }


def test_a_finalist_the_new_best_outruns_waits_for_the_finish():
    """Both finalists of the first round go to tier two before either is verified; once the
    first is kept (screened 1.014x), verifying the second (0.98x) buys a report number only.
    On an H100 a 3-minute run stopped at 79 s because that verification would not fit."""
    state = {"best": {"speedup": 1.034, "screen_speedup": 1.014, "noise": 0.005}}
    assert not still_a_finalist(pending(0.98), state, CONFIG)
    assert still_a_finalist(pending(1.05), state, CONFIG)  # would beat the best: verify it
    assert still_a_finalist(pending(0.98), {}, CONFIG)  # no best yet
    on_the_cpu = {"best": {**state["best"], "evaluation": {"timings": {"regime": "interpreter"}}}}
    assert still_a_finalist(pending(0.98), on_the_cpu, CONFIG)  # says nothing about winning
    # An LLM's code, or a finalist that carries a plan's LLM spend, stays in line.
    assert still_a_finalist(pending(0.5, tier="check"), state, CONFIG)
    assert still_a_finalist(pending(0.98, llm_tokens=120), state, CONFIG)
    # The screen's own noise for that render counts, as when it was chosen.
    noisy = pending(1.03)
    key = ScreenPoint(noisy["family"], noisy["params"]).key
    screened = {key: {"noise": 0.05}}
    assert still_a_finalist(noisy, state, CONFIG)
    assert not still_a_finalist(noisy, {**state, "screened": screened}, CONFIG)


def test_the_finish_verifies_a_near_tie_of_the_best_that_could_win_in_the_time_kept_for_it():
    from agents.tiers import challenger

    def screened(name: str, speedup: float) -> dict:
        return {name: _screened("matmul_tiled", entry(name, speedup))}

    best = {"speedup": 1.05, "screen_speedup": 1.06, "noise": 0.01, "index": 0, "speedups": {}}
    state = {"best": best, "seen": {}}
    ahead = challenger({**state, "screened": screened("a", 1.12)}, CONFIG)
    assert ahead is not None and ahead["candidate_id"] == "a"
    tie = challenger({**state, "screened": screened("t", 1.04)}, CONFIG)
    assert tie is not None and tie["candidate_id"] == "t"  # 1.04 x 1.03 >= 1.06
    assert challenger({**state, "screened": screened("s", 1.02)}, CONFIG) is None  # behind
    losing = {**state, "best": {**best, "speedup": 0.90, "screen_speedup": 0.91}}
    assert challenger({**losing, "screened": screened("l", 0.90)}, CONFIG) is None  # cannot win


def test_the_finish_verifies_a_late_batchs_faster_render_over_one_that_ran_more_rounds():
    """A CUTLASS point whose compile came last was screened in a batch of its own (1 round) at
    1.184x; a Triton point of an earlier batch survived 3 halving rounds at 1.112x. The finish
    verifies the faster one; a noisy 1-round number is discounted by its noise."""
    from agents.tiers import challenger

    best = {"speedup": 1.115, "screen_speedup": 1.115, "noise": 0.01, "index": 0, "speedups": {}}
    triton = _screened("matmul_tiled", entry("triton", 1.112))
    triton["rounds"] = 3
    cutlass = _screened("matmul_cutlass_sm90", entry("cutlass", 1.184))
    cutlass["rounds"] = 1
    state = {"best": best, "seen": {}, "screened": {"a": triton, "b": cutlass}}
    assert challenger(state, CONFIG)["candidate_id"] == "cutlass"
    noisy = {**cutlass, "noise": 0.2}  # 1.184 / 1.2 < 1.112 / 1.005
    state = {"best": best, "seen": {}, "screened": {"a": triton, "b": noisy}}
    assert challenger(state, CONFIG)["candidate_id"] == "triton"


def test_once_a_full_verification_timed_a_faster_baseline_the_screen_is_read_against_it():
    """GPT-2's lm_head on an H200: torch.compile ran 3.7x faster than torch.matmul, the screen's
    baseline, so a render screened at 1.6x torch could not win and waits for the finish."""
    from agents.tiers import against_fastest, challenger

    best = {"speedup": 1.54, "screen_speedup": 1.54, "noise": 0.01, "index": 0}
    behind_compile = {**best, "speedups": {"torch": 1.54, "cublaslt": 1.54, "compile": 0.415}}
    ahead = {**best, "speedups": {"torch": 1.54, "cublaslt": 1.50, "compile": 1.80}}
    assert round(against_fastest(behind_compile, CONFIG), 3) == 0.269
    assert round(against_fastest(ahead, CONFIG), 3) == 0.974  # cuBLASLt, 1.50 against 1.54
    assert against_fastest(None, CONFIG) == 1.0
    ranked = [entry("f", 1.7)]
    chosen = finalists({"best": ahead}, ranked, CONFIG, slots=2, gpu_timed=True)
    assert [e.candidate_id for e in chosen] == ["f"]
    assert finalists({"best": behind_compile}, ranked, CONFIG, slots=2, gpu_timed=True) == []
    tie = {"t": _screened("matmul_tiled", entry("t", 1.52))}
    assert challenger({"best": ahead, "seen": {}, "screened": tie}, CONFIG) is not None
    assert challenger({"best": behind_compile, "seen": {}, "screened": tie}, CONFIG) is None


def test_the_built_in_search_stops_once_every_render_is_far_behind_the_fastest_baseline():
    """Every render screens at up to 1.75x torch.matmul on the GPU, but the full verification
    finds torch.compile 4x faster than torch.matmul: nothing within reach, the run stops early
    with the budget unspent. With compile slower than ours the same run goes on to its budget."""
    problem = parse_problem("matmul", "256x256x256", "fp16", "NN")

    def run(compile_ratio):
        evaluator = FakeEvaluator(
            block_m_score,
            screen_regime=Regime.OFFLINE,
            verify_regime=Regime.OFFLINE,
            other_baselines={"compile": compile_ratio},
            screen_s=0.02,
        )
        config = OptimizeConfig(
            evaluator=evaluator,
            budget=Budget(wall_s=30, gpu_s=3.0),
            plateau=None,
            screen_batch=8,
            profile=False,
        )
        return optimize(problem, config, ListReporter())

    far = run(compile_ratio=0.25)
    assert far.stop_reason == "out_of_reach" and far.outcome == "baseline"
    assert far.verified is True and "compile" in far.outcome_reason
    near = run(compile_ratio=1.1)
    assert near.stop_reason in ("gpu_time", "wall_time", "exhausted")
    assert near.search.screen.candidates > far.search.screen.candidates
