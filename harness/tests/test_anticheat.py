"""Each planted exploit (harness/tests/exploits/) is caught or made harmless; honest
candidates pass.

An untrusted candidate's run() only ever runs in its sandbox, recorded as a plan; the judge
checks and times the plan with its own code. So the tricks that lived in the candidate's own
process (patching timers or the baseline, a background thread, a lazy tensor, a cache keyed
by address, writing into the result pipe) either change nothing the judge sees or leave a
plan that cannot pass. These run on the CPU under Triton's interpreter; test_gpu.py repeats
the ones that need a GPU.
"""

from __future__ import annotations

from harness import Verdict
from harness.tests.conftest import checks, failed_stages, run_fixture, tiled_render


def test_it_passes_an_honest_triton_kernel_on_every_stage():
    ev = run_fixture("honest_triton_matmul")
    assert ev.verdict is Verdict.PASSED, ev.error
    names = {s.name for s in ev.stages}
    for stage in (
        "smoke",
        "shape_sweep",
        "adversarial",
        "exact_01",
        "determinism",
        "output_poison",
        "guard_bands",
        "baseline_deviation",
    ):
        assert stage in names
    assert all(s.passed for s in ev.stages)
    assert not [f for f in ev.findings if f.severity == "reject"]
    assert ev.checks["trusted_render"] is False  # an LLM-style source: recorded, replayed
    assert ev.kernels == ["_matmul"]


def test_a_background_thread_leaves_a_plan_that_does_nothing():
    # The thread does its work after run() returned: nothing was recorded in the call.
    ev = run_fixture("exploit_thread")
    assert ev.verdict is Verdict.CHEAT, ev.error
    assert "static:thread" in checks(ev)
    assert "launched nothing the judge can replay" in ev.error


def test_a_lazy_tensor_returned_instead_of_filling_out_is_refused():
    ev = run_fixture("exploit_lazy_subclass")
    assert ev.verdict is Verdict.CHEAT, ev.error
    assert "static:lazy_output" in checks(ev)
    # ... and past the static scan, the recording refuses it anyway (on a GPU already for the
    # CPU tensor it makes; on the CPU for what it returns).
    assert "cannot be judged as written" in ev.error
    assert ("returned a LazyMatmul" in ev.error) or ("on cpu" in ev.error), ev.error


# The timer patch of exploit_monkeypatch_timer, spelled so the static scan does not see it.
HIDDEN_TIMER_PATCH = """
import time
import torch

_set = setattr
_set(getattr(torch.cuda, "Ev" + "ent"), "elapsed_" + "time", lambda self, end: 0.001)
_set(time, "perf_" + "counter", lambda: 0.0)


def run(a, b, *, out):
    torch.matmul(a, b, out=out)
"""


def test_a_result_cached_by_input_address_cannot_be_replayed():
    # The plan is fixed per shape: the judge runs its GEMM on every call's own inputs, so a
    # cache keyed by address has nothing to serve, and the timed outputs are right.
    ev = run_fixture("exploit_cached_result", time_candidate=True)
    assert ev.verdict is Verdict.PASSED, ev.error
    recheck = next(s for s in ev.stages if s.name == "recheck_after_timing")
    assert recheck.passed and recheck.cases >= 2
    assert "aten::mm" in ev.kernels


def test_it_gives_a_reference_reader_nothing_to_read():
    ev = run_fixture("exploit_read_reference")
    assert ev.verdict is not Verdict.PASSED
    assert ev.verdict in (Verdict.INCORRECT, Verdict.COMPILE_ERROR), ev.error


def test_patching_timers_at_import_changes_nothing_the_judge_measures():
    assert run_fixture("exploit_monkeypatch_timer").verdict is Verdict.CHEAT  # static scan
    ev = run_fixture("x", source_text=HIDDEN_TIMER_PATCH, time_candidate=True)
    assert ev.verdict is Verdict.PASSED, ev.error
    # The candidate's process patched its own time.perf_counter and elapsed_time; the judge's
    # clock is in another process: the candidate's time is its GEMM's (on the CPU through the
    # executor, round trip included), never the 0 the patch returns. Read on the fastest
    # samples, as below: a 2-core box stalls some of the judge's few samples by milliseconds.
    baseline, candidate = ev.timings.baselines["torch"], ev.timings.candidate
    assert candidate.min_us > 1.0
    assert baseline.min_us / candidate.min_us < 1.5


def test_patching_torch_matmul_cannot_slow_the_baseline():
    ev = run_fixture("exploit_slow_baseline", time_candidate=True)
    assert ev.verdict is Verdict.PASSED, ev.error
    # The patch would add 20 ms to every baseline call in the candidate's process: the
    # baseline here runs in the judge's, untouched, so the candidate is no faster than it.
    # Read on the fastest samples: a patched call never takes under 20 ms, while a 2-core
    # CPU box stalls the judge's few samples by milliseconds (a median of 3.2 ms beside a
    # 60-us minimum at ede2d33; all 7 samples at 1.2 ms or more in a fresh-clone CI run
    # beside other load, 2026-11-30, when the patch added 1 ms), which no patch explains.
    baseline, candidate = ev.timings.baselines["torch"], ev.timings.candidate
    assert baseline.min_us < 10_000.0
    assert baseline.min_us / candidate.min_us < 4.0  # a patched baseline: 20 ms / ~0.1 ms


def test_it_rejects_lowered_precision():
    ev = run_fixture("exploit_precision")
    assert ev.verdict is Verdict.INCORRECT
    assert failed_stages(ev) & {"baseline_deviation", "smoke", "adversarial"}


def test_it_rejects_the_vendor_library_when_the_problem_forbids_it():
    ev = run_fixture("honest_torch_matmul", forbid_vendor_library=True)
    assert ev.verdict is Verdict.CHEAT
    assert "vendor_library" in checks(ev)
    allowed = run_fixture("honest_torch_matmul")
    assert allowed.verdict is Verdict.PASSED, allowed.error


def test_our_render_is_audited_for_the_vendor_library_only_where_the_problem_forbids_it():
    # The audit is one call under the profiler (seconds on a GPU: 4-5 s of a full
    # verification on an H200, 2026-11-28); a render of our own family needs it only to keep
    # the vendor-library rule.
    from harness import EvalConfig, evaluate

    render, problem = tiled_render()
    plain = evaluate(render, problem, config=EvalConfig(quick=True))
    audited = evaluate(render, problem, config=EvalConfig(quick=True, forbid_vendor_library=True))
    assert plain.checks["trusted_render"] and audited.checks["trusted_render"]
    assert plain.verdict is audited.verdict is Verdict.PASSED, (plain.error, audited.error)
    assert plain.kernels == [] and audited.kernels  # what its one audited call ran


def test_it_rejects_input_mutation():
    ev = run_fixture("exploit_input_mutation")
    assert ev.verdict is Verdict.CHEAT
    assert "input_mutation" in checks(ev)


def test_it_catches_unwritten_output_elements():
    ev = run_fixture("exploit_unwritten")
    assert ev.verdict is Verdict.INCORRECT
    assert "output_poison" in failed_stages(ev)


def test_it_catches_writes_into_the_guard_bands():
    ev = run_fixture("exploit_oob_write")
    assert ev.verdict is Verdict.INCORRECT
    assert "guard_bands" in failed_stages(ev)


def test_a_message_written_into_the_result_pipe_is_only_bad_data():
    # The recording child has no key to sign with and its result is data the parent checks:
    # a fake "ok" can only make the recording unusable, never a verdict.
    ev = run_fixture("exploit_forge_result")
    assert ev.verdict in (Verdict.CRASH, Verdict.COMPILE_ERROR), ev.error
    assert ev.timings is None and not ev.stages
