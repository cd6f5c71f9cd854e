"""Each planted exploit (harness/tests/exploits/) is caught; honest candidates pass.

These run on the CPU under Triton's interpreter; harness/tests/test_gpu.py repeats the ones
that need a GPU (side streams, illegal addresses, timed replay on real buffers).
"""

from __future__ import annotations

from harness import Verdict
from harness.tests.conftest import checks, failed_stages, run_fixture


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


def test_it_rejects_a_background_thread():
    ev = run_fixture("exploit_thread")
    assert ev.verdict is Verdict.CHEAT
    assert "thread" in checks(ev)  # runtime check, not only the static one
    assert "static:thread" in checks(ev)


def test_it_rejects_a_lazy_tensor_subclass():
    ev = run_fixture("exploit_lazy_subclass")
    assert ev.verdict is Verdict.CHEAT
    assert "lazy_output" in checks(ev)
    assert "output_poison" in failed_stages(ev)  # and `out` was never written


def test_it_catches_a_result_replayed_from_an_address_keyed_cache():
    ev = run_fixture("exploit_cached_result", time_candidate=True)
    assert ev.verdict is Verdict.INCORRECT
    failed = failed_stages(ev)
    # Usually the re-check after timing catches it. When the allocator hands a correctness
    # case an address the cache has seen (it varies run to run), an earlier stage gets the
    # replayed result first and the candidate never reaches timing: caught either way.
    assert failed, ev.stages
    if "recheck_after_timing" in failed:
        recheck = next(s for s in ev.stages if s.name == "recheck_after_timing")
        assert recheck.cases >= 2


def test_it_gives_a_reference_reader_nothing_to_read():
    ev = run_fixture("exploit_read_reference")
    assert ev.verdict is Verdict.INCORRECT
    assert "smoke" in failed_stages(ev)


def test_it_rejects_timer_monkeypatching_at_import():
    ev = run_fixture("exploit_monkeypatch_timer")
    assert ev.verdict is Verdict.CHEAT
    detail = " ".join(f.detail for f in ev.findings if f.check == "monkeypatch")
    assert "elapsed_time" in detail and "perf_counter" in detail


def test_it_rejects_slowing_the_baseline_by_patching_torch():
    ev = run_fixture("exploit_slow_baseline")
    assert ev.verdict is Verdict.CHEAT
    assert any("torch.matmul" in f.detail for f in ev.findings if f.check == "monkeypatch")


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


def test_it_rejects_a_forged_result_message():
    ev = run_fixture("exploit_forge_result")
    assert ev.verdict is Verdict.CHEAT
    assert "result_forged" in checks(ev)
