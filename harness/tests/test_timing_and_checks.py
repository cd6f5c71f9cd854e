"""Units of the timing statistics, closeness checks and static screening (no sandbox)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from harness import timing
from harness.compare import closeness, exact_mismatches
from harness.cuda_ext import parse_res_usage
from harness.judge import static_scan
from harness.results import Regime
from kernels.problem import Tolerance

TOL = Tolerance(rtol=1e-2, atol=1e-3)


def test_it_summarizes_samples_with_median_iqr_and_stderr():
    st = timing.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert st.median_us == 3.0 and st.min_us == 1.0 and st.samples == 5
    assert st.iqr_us > 0 and st.rel_stderr > 0
    assert timing.summarize([10.0] * 50 + [1e6]).rel_stderr == 0.0  # an outlier does not stall it


def test_it_gives_a_speedup_interval_around_one_for_the_same_distribution():
    xs = [100.0 + (i % 7) for i in range(200)]
    lo, hi = timing.speedup_ci(xs, list(reversed(xs)))
    assert lo <= 1.0 <= hi


def test_it_stops_sampling_once_the_relative_error_is_small():
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        sum(range(2000))

    out = timing.time_interleaved(
        {"a": fn, "b": fn},
        regime=Regime.INTERPRETER,
        min_samples=10,
        max_samples=10_000,
        target_rel_err=0.05,
    )
    assert 10 <= len(out["a"].host_us) < 10_000
    assert len(out["a"].host_us) == len(out["b"].host_us)
    # No events off the GPU: both views fall back to the host clock (the benchmark's search
    # ranks by plain_stats, evaluations report stats).
    assert out["a"].plain_stats() == out["a"].stats() == timing.summarize(out["a"].host_us)


def test_it_picks_the_shortest_pre_roll_after_which_plain_events_stop_falling():
    assert timing._preroll_ladder(40.0) == [40.0, 80.0, 160.0, 320.0]
    assert timing._preroll_ladder(1500.0) == [1500.0, 2000.0]
    # A launch the first estimate does not hide: 58 us, then 3 us from 80 us of spin on.
    assert timing.pick_preroll([(40.0, 58.0), (80.0, 3.1), (160.0, 3.0), (320.0, 3.05)]) == 80.0
    # Nothing changes (kernel-bound, or a side stream): keep the host estimate.
    assert timing.pick_preroll([(40.0, 180.0), (80.0, 179.0), (160.0, 181.0)]) == 40.0


def test_a_sample_whose_call_outlasted_its_pre_roll_counts_as_starved():
    # H200, 2026-11-22: calibrated at 67 us of spin, the loop's launches took longer.
    assert timing.starved(enqueue_us=75.0, spin_us=67.0)
    assert not timing.starved(enqueue_us=45.0, spin_us=67.0)
    # At the cap the spin stays: a call that waits on the GPU overruns any spin.
    assert not timing.starved(enqueue_us=5000.0, spin_us=timing.MAX_PREROLL_US)


def test_it_fails_all_zero_output_against_a_nonzero_reference():
    # On top of kernels.checking.compare (the one closeness rule and its NaN/Inf cases, tested
    # in kernels/tests/test_closeness.py): atol alone would pass zeros against a tiny reference.
    c = closeness(torch.zeros(4), torch.full((4,), 1e-4), TOL)
    assert not c.passed and c.worst_error == math.inf and "all zeros" in c.detail
    far = closeness(torch.zeros(4), torch.full((4,), 5.0), TOL)  # failing anyway: still inf,
    assert far.worst_error == math.inf  # so an all-zero vendor output cannot raise the limit
    assert closeness(torch.zeros(4), torch.zeros(4), TOL).passed


def test_it_counts_unwritten_poison_and_refuses_a_nan_reference():
    c = closeness(torch.tensor([1.0, float("nan"), float("nan")]), torch.ones(3), TOL)
    assert not c.passed and c.unwritten == 2
    ref = torch.tensor([1.0, float("nan")])
    assert not closeness(ref.clone(), ref, TOL).passed


def test_the_oracle_refuses_an_infinite_reference_even_where_the_output_matches_it():
    ref = torch.tensor([1.0, float("inf")])
    c = closeness(ref.clone(), ref, TOL)
    assert not c.passed and "not finite" in c.detail


def test_it_checks_exact_01_products_only_where_representable():
    ref = torch.tensor([3.0, 5000.0])
    assert exact_mismatches(torch.tensor([3.0, 4999.0]), ref, 2048.0) == (0, 1)
    assert exact_mismatches(torch.tensor([2.0, 5000.0]), ref, 2048.0) == (1, 1)


@pytest.mark.parametrize(
    ("source", "check"),
    [
        ("import threading\n", "static:thread"),
        ("torch.Tensor._make_subclass(cls, x)\n", "static:lazy_output"),
        ("torch.cuda.Event.elapsed_time = f\n", "static:timer_patch"),
        ("with torch.cuda.stream(s):\n", "static:side_stream"),
        ("for o in gc.get_objects(): pass\n", "static:introspection"),
    ],
)
def test_it_screens_source_statically(source, check):
    assert check in {f.check for f in static_scan.scan(source)}


def test_it_does_not_flag_ordinary_names():
    assert static_scan.scan("start_time = 0\nelapsed = end - start\n") == []


EXPLOITS = Path(__file__).parent / "exploits"


@pytest.mark.parametrize("name", ["exploit_cached_result.py", "exploit_read_reference.py"])
def test_it_flags_a_candidate_that_keys_on_or_compares_tensor_addresses(name):
    found = [
        f for f in static_scan.scan((EXPLOITS / name).read_text()) if f.check == "static:caching"
    ]
    assert len(found) == 1 and "tensor address" in found[0].detail, found


@pytest.mark.parametrize(
    "source",
    [
        "seen = {}\ndef run(a, *, out):\n    seen[a.data_ptr()] = 1\n",
        "last = [0]\ndef run(a, *, out):\n    if a.data_ptr() == last[0]: return\n",
        'CPP = "static void* last; if (a.data_ptr() == last) return;"\n',
        'CPP = "cache.find(a.data_ptr<float>());"\n',
        "key = a.data_ptr() % 2**40\n",  # a modulus that is no alignment keeps the address
    ],
)
def test_it_flags_addresses_kept_or_compared_in_python_and_cpp(source):
    assert "static:caching" in {f.check for f in static_scan.scan(source)}


def test_it_does_not_flag_the_products_own_rendered_families():
    """Host code of our families reads addresses only to launch kernels or test alignment
    (FAST_LAUNCH, the TMA descriptors, the CUDA C++ family's pointer casts)."""
    import kernels

    problems = [
        kernels.parse_problem("matmul", "256x256x256", "fp16", "NN"),
        kernels.parse_problem("matmul", "256x512x128", "bf16", "NT+bias"),
        kernels.parse_problem("rmsnorm", "64x1024", "fp32"),
    ]
    rendered = 0
    for problem in problems:
        for family in kernels.get_op(problem.op).families():
            source = family.render(problem, family.default(problem))
            assert "data_ptr()" in source  # the rule has something to judge
            assert static_scan.scan(source) == [], (family.name, static_scan.scan(source))
            rendered += 1
    assert rendered >= 8
    # Honest sources the harness tests evaluate are clean too.
    for name in ("honest_cuda_matmul.py", "honest_triton_matmul.py"):
        assert static_scan.scan((EXPLOITS / name).read_text()) == []


def test_it_parses_cuobjdump_resource_usage():
    text = (
        "Resource usage:\n Function _Z3addPfS_:\n  REG:18 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:368\n"
        " Function _Z4gemmPfS_:\n  REG:96 STACK:16 SHARED:16384 LOCAL:24 CONSTANT[0]:380\n"
    )
    assert parse_res_usage(text) == {
        "registers": 96,
        "spills": 24,
        "shared_mem_bytes": 16384,
        "stack_bytes": 16,
    }


def test_it_flags_times_below_the_measured_roof_as_implausible():
    import kernels
    from harness.judge.evaluation import _roofline
    from harness.results import CompileResult, DeviceInfo, Evaluation, Timings, TimingStats, Verdict

    problem = kernels.parse_problem("matmul", "4096x4096x4096", "bf16", "NN")
    op = kernels.get_op("matmul")
    device = DeviceInfo("NVIDIA H100", "cuda", peak_tflops=800.0, peak_gbps=3000.0)

    def ev_at(us: float) -> Evaluation:
        st = TimingStats(us, 1.0, us, us, 100, 0.001)
        ev = Evaluation("c", problem.key, Verdict.PASSED, CompileResult(True), device=device)
        ev.timings = Timings(Regime.OFFLINE, "kf-timing-v1", st, {"torch": st}, {"torch": 1.0})
        _roofline(ev, op, problem)
        return ev

    honest = ev_at(200.0)  # 687 TFLOP/s: 86 % of the roof
    assert not honest.implausible and 80 < honest.pct_of_roof < 90
    fake = ev_at(38.0)  # the side-stream number: 3.6 PFLOP/s
    assert fake.implausible and fake.pct_of_roof > 400
    assert not fake.ok


def test_reported_times_charge_a_candidate_tail_beyond_the_sync_round_trip_only():
    # The baseline's sync round trip jitters (20-60 us); the honest candidate's tail jitters
    # the same way; a side-stream candidate's work goes on 80 us after it returns.
    jitter = [20.0, 60.0, 35.0, 45.0, 40.0]
    synced = {
        "torch": [100.0 + j for j in jitter],
        "honest": [3.0 + j for j in reversed(jitter)],
        "side": [1.0 + 80.0 + j for j in jitter],
    }
    plain = {"torch": [100.0] * 5, "honest": [3.0] * 5, "side": [1.0] * 5}
    out, tails = timing.reported_us(synced, plain, ["torch"])
    assert tails["sync_round_trip_us"] == 40.0
    assert out["honest"] == [3.0] * 5  # no jitter added to a 3 us kernel
    assert out["torch"] == [100.0] * 5
    assert out["side"] == [81.0] * 5  # its 80 us tail is charged


def test_the_re_checked_rounds_cover_an_in_place_refill_and_fresh_buffers():
    from harness.judge.session import spot_rounds as _spot_rounds

    for _ in range(200):
        rounds = _spot_rounds(20, 3)
        assert len(rounds) == 3 and all(0 <= r < 20 for r in rounds)
        assert {r % 2 for r in rounds} == {0, 1}
    assert _spot_rounds(1, 3) == {0}
    assert _spot_rounds(10, 0) == set()
