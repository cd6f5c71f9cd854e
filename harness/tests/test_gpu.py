"""GPU-only: side streams, poisoned contexts, timing, baselines, ceilings, ncu, CUDA C++,
memory-bound timing vs CUDA-graph replay, compute-sanitizer, clocks.

Run on an H100/H200 with `bash harness/tests/gpu_run.sh`; set KF_RESULTS_DIR to keep the
numbers (JSON) and the recorded .ncu-rep.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import kernels
from harness import (
    Backend,
    Candidate,
    EvalConfig,
    Regime,
    Verdict,
    device_ceilings,
    evaluate,
    profile,
)
from harness.tests.conftest import checks, fresh, run_fixture, source

pytestmark = pytest.mark.gpu
BIG = ("matmul", "4096x4096x4096")
OOB_PROBLEM = ("rmsnorm", "1024x1000", "bf16")


def _record(name: str, data: dict) -> None:
    out = os.environ.get("KF_RESULTS_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(data, indent=2, default=str))


def _timing_summary(ev) -> dict:
    t = ev.timings
    return {
        "verdict": ev.verdict.value,
        "error": ev.error[-3000:],
        "stages": [st.__dict__ for st in ev.stages],
        "regime": t.regime.value if t else None,
        "protocol": t.protocol if t else None,
        "candidate_us": t.candidate.__dict__ if t else None,
        "baselines_us": {k: v.__dict__ for k, v in t.baselines.items()} if t else None,
        "speedups": t.speedups if t else None,
        "speedup_ci": t.speedup_ci if t else None,
        "noise": t.noise if t else None,
        "tflops": ev.tflops,
        "pct_of_roof": ev.pct_of_roof,
        "implausible": ev.implausible,
        "findings": [f.__dict__ for f in ev.findings],
        "checks": ev.checks,
        "isolation": ev.isolation,
        "kernels": ev.kernels,
        "device": ev.device.__dict__ if ev.device else None,
        "duration_s": ev.duration_s,
    }


def test_it_measures_device_ceilings_once_and_caches_them():
    info = device_ceilings()
    assert info.kind == "cuda" and "H" in info.name
    assert info.peak_tflops > 200 and info.peak_gbps > 1000
    # The memory roof is the faster stream; on an H200 a read beat the copy (4.3 vs 4.1 TB/s).
    assert info.copy_gbps and info.read_gbps
    assert info.peak_gbps == max(info.copy_gbps, info.read_gbps)
    # A read-only stream is no slower than a copy's (an int32 sum read at a sixth of it).
    assert info.read_gbps > 0.9 * info.copy_gbps, (info.read_gbps, info.copy_gbps)
    _record("device_ceilings", info.__dict__)


@pytest.mark.parametrize("shape", ["4096x4096x4096", "2048x2048x2560"])
def test_it_reads_torch_matmul_against_itself_as_one_within_noise(shape):
    """The timing protocol's fidelity through the trust boundary: torch.matmul as an untrusted
    candidate (recorded in its sandbox, its mm replayed by the judge) against torch.matmul.
    4096^3 bf16 (~180 us) and a ~30 us problem."""
    problem = kernels.parse_problem("matmul", shape, "bf16", "NN")
    ev = run_fixture(
        "honest_torch_matmul",
        problem,
        quick=False,
        baselines=("torch", "cublaslt"),
        max_samples=300,
    )
    _record(f"matmul_vs_itself_{shape}_bf16", _timing_summary(ev))
    assert ev.verdict is Verdict.PASSED, ev.error
    s, noise = ev.timings.speedups["torch"], ev.timings.noise
    assert abs(s - 1.0) <= max(noise, 0.01), (s, noise)
    assert ev.timings.candidate.samples >= 100
    assert "cublaslt" in ev.timings.baselines, ev.checks.get("baseline_errors")
    assert 20 < ev.pct_of_roof < 110 and not ev.implausible


def test_a_render_and_its_untrusted_copy_time_the_same():
    """Our render runs in the judge's process; the same source, unclaimed, is recorded in its
    sandbox and its cubin launched by the judge: the two must read the same."""
    problem = kernels.parse_problem(*BIG, "bf16", "NN")
    family = next(
        f for f in kernels.get_op("matmul").families() if f.name == "matmul_persistent_tma"
    )
    params = family.default(problem)
    src = family.render(problem, params)
    cfg = EvalConfig(quick=True, max_samples=300, target_rel_err=0.005)
    trusted = evaluate(
        Candidate.of_render(src, Backend.TRITON, family.name, params), problem, config=cfg
    )
    untrusted = evaluate(Candidate(src + "\n# unclaimed copy\n"), problem, config=cfg)
    _record(
        "render_vs_replay_4096_bf16",
        {"trusted": _timing_summary(trusted), "replayed": _timing_summary(untrusted)},
    )
    assert trusted.verdict is Verdict.PASSED and untrusted.verdict is Verdict.PASSED
    assert trusted.checks["trusted_render"] and not untrusted.checks["trusted_render"]
    a, b = trusted.timings.speedups["torch"], untrusted.timings.speedups["torch"]
    assert abs(a / b - 1.0) <= 0.03, (a, b)


def test_it_times_a_side_stream_candidate_honestly():
    # Its launch is replayed on the judge's timed stream: nothing hides on a side stream.
    problem = kernels.parse_problem(*BIG, "bf16", "NN")
    ev = run_fixture("exploit_side_stream", problem)
    _record("exploit_side_stream_4096_bf16", _timing_summary(ev))
    assert ev.verdict is Verdict.PASSED, ev.error
    assert ev.timings.speedups["torch"] <= 1.05, ev.timings.speedups


def test_a_result_cached_on_reused_gpu_buffers_is_recomputed_by_the_plan():
    problem = kernels.parse_problem("matmul", "2048x2048x2048", "fp16", "NN")
    ev = run_fixture("exploit_cached_result", problem)
    _record("exploit_cached_result_2048_fp16", _timing_summary(ev))
    assert ev.verdict is Verdict.PASSED, ev.error
    assert any(s.name == "recheck_after_timing" and s.passed for s in ev.stages)
    assert ev.timings.speedups["torch"] <= 1.05, ev.timings.speedups


def _graph_us(fn, flush=None, reps: int = 20) -> float:
    """Device time per call by CUDA-graph replay (no host launch cost); with `flush`, each call
    is preceded by the L2 flush and the flush alone is subtracted: the cold-L2 kernel time,
    the quantity the OFFLINE regime should report."""
    import torch

    def body() -> None:
        for _ in range(reps):
            if flush is not None:
                flush()
            if fn is not None:
                fn()

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        body()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            body()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / reps)
    times.sort()
    return times[len(times) // 2]


def test_the_l2_flush_evicts_what_the_last_call_read():
    """L2Flush reads rather than writes (kf-timing-v2); it must still evict: a 16 MiB read that
    L2 holds when warm runs from HBM after the flush (the flush's own time subtracted)."""
    import torch

    from harness.timing import L2Flush

    flush = L2Flush()
    x = torch.ones(4 * 2**20, dtype=torch.float32, device="cuda")
    sink = torch.empty((), dtype=torch.float32, device="cuda")
    read = lambda: torch.sum(x, dim=0, out=sink)  # noqa: E731
    warm_us = _graph_us(read)
    cold_us = _graph_us(read, flush) - _graph_us(None, flush)
    _record("l2_flush_evicts", {"warm_us": warm_us, "cold_us": cold_us})
    assert cold_us > 1.2 * warm_us, (warm_us, cold_us)


@pytest.mark.parametrize("shape", ["8192x8192", "256x1024"])
def test_a_short_memory_bound_kernel_reads_close_to_its_graph_replay_time(shape):
    """The OFFLINE pre-roll must hide a Triton kernel's ~30 us Python launch without raising a
    timer_mismatch or side_stream false positive, and report ~ its cold-L2 device time."""
    import torch

    from harness.timing import L2Flush
    from kernels.candidate import load_module

    problem = kernels.parse_problem("rmsnorm", shape, "bf16")
    op = kernels.get_op("rmsnorm")
    family = op.families()[0]
    src = family.render(problem, family.default(problem))
    ev = evaluate(Candidate(src), problem, config=EvalConfig(quick=True, baselines=("torch",)))
    module = load_module(src, name=f"kf_membound_{shape}")
    inputs = op.make_inputs(problem, seed=1, device="cuda")
    spec = op.output_spec(problem)
    out = torch.empty(spec.shape, dtype=spec.dtype, device="cuda")
    flush = L2Flush()
    cand = lambda: module.run(*inputs, out=out)  # noqa: E731
    torch_fn = lambda: op.baseline(problem, *inputs, out=out)  # noqa: E731
    flush_us = _graph_us(None, flush)
    graph = {
        "candidate_warm_us": _graph_us(cand),
        "candidate_cold_us": _graph_us(cand, flush) - flush_us,
        "torch_warm_us": _graph_us(torch_fn),
        "torch_cold_us": _graph_us(torch_fn, flush) - flush_us,
        "flush_us": flush_us,
    }
    offline = ev.timings.candidate.median_us if ev.timings else None
    torch_offline = ev.timings.baselines["torch"].median_us if ev.timings else None
    summary = {**_timing_summary(ev), "graph_replay": graph, "family": family.name}
    _record(f"membound_rmsnorm_{shape}_bf16", summary)
    print(f"rmsnorm {shape}: offline {offline} us (torch {torch_offline}); graph {graph}")
    assert ev.verdict is Verdict.PASSED, ev.error
    assert not {"timer_mismatch", "side_stream"} & checks(ev), ev.findings
    # Never over-credited, and within 15 % or a fixed few us of its graph replay. The fixed
    # part: an event pair costs ~1-2 us a replay does not, and the tail rule charges an
    # honest tiny kernel ~3 us of sync-timing difference (conservative on purpose: a side
    # stream must not hide there). H200, 2026-11-22: 7.5 us reported vs 2.5 us replayed.
    cold = graph["candidate_cold_us"]
    assert 0.85 * cold <= offline <= max(1.15 * cold, cold + 8.0), (offline, graph)


def test_the_sanitizer_catches_an_out_of_bounds_read_the_value_checks_miss():
    problem = kernels.parse_problem(*OOB_PROBLEM)
    ev = run_fixture("exploit_oob_read", problem, sanitize=True, time_candidate=False)
    _record("exploit_oob_read_sanitize", _timing_summary(ev))
    value_stages = [s for s in ev.stages if not s.name.startswith("sanitize_")]
    assert value_stages and all(s.passed for s in value_stages), ev.stages
    assert ev.verdict is Verdict.INCORRECT, (ev.verdict, ev.error, ev.findings)
    memcheck = next(s for s in ev.stages if s.name == "sanitize_memcheck")
    assert not memcheck.passed and "read" in memcheck.detail.lower(), memcheck


def test_the_sanitizer_passes_an_honest_kernel_under_memcheck_and_racecheck():
    problem = kernels.parse_problem(*OOB_PROBLEM)
    ev = run_fixture(
        "honest_triton_rmsnorm",
        problem,
        sanitize=True,
        sanitize_tools=("memcheck", "racecheck"),
        time_candidate=False,
        deadline_s=240.0,  # ends with its record (and the ladder's notes) instead of a kill
    )
    _record("honest_rmsnorm_sanitize", _timing_summary(ev))
    assert ev.verdict is Verdict.PASSED, (ev.error, ev.findings)
    assert {"sanitize_memcheck", "sanitize_racecheck"} <= {s.name for s in ev.stages}


def test_it_reports_a_failed_lazy_cuda_build_as_a_compile_error():
    ev = run_fixture("exploit_lazy_build")
    _record("lazy_cuda_build", {"verdict": ev.verdict.value, "log": ev.compile.log[-1500:]})
    assert ev.verdict is Verdict.COMPILE_ERROR, (ev.verdict, ev.error)


def test_it_times_the_server_regime_and_torch_compile():
    problem = kernels.parse_problem("matmul", "1024x1024x1024", "fp16", "NN")
    ev = run_fixture(
        "honest_triton_matmul", problem, regime=Regime.SERVER, baselines=("torch", "compile")
    )
    _record("server_regime_1024_fp16", _timing_summary(ev))
    assert ev.verdict is Verdict.PASSED, ev.error
    assert ev.timings.regime is Regime.SERVER
    assert "compile" in ev.timings.baselines, ev.checks.get("baseline_errors")
    assert ev.checks["judge_s"]["compile_first_call"] > 0, ev.checks["judge_s"]


def test_it_survives_an_illegal_memory_access_and_the_gpu_stays_usable():
    ev = run_fixture("exploit_illegal_address")
    assert ev.verdict is Verdict.CRASH, (ev.verdict, ev.error)
    after = run_fixture("honest_triton_matmul")
    assert after.verdict is Verdict.PASSED, after.error


def test_it_profiles_exactly_the_candidate_kernel_with_ncu():
    problem = kernels.parse_problem(*BIG, "fp16", "NN")
    prof = profile(Candidate(source("honest_triton_matmul")), problem)
    assert not prof.error, prof.error
    assert prof.kernels == ["_matmul"]
    assert prof.metrics["sm_pct"] is not None and prof.metrics["duration_ns"] > 0
    assert Path(prof.report_path).exists()
    out = os.environ.get("KF_RESULTS_DIR")
    if out:
        tag = "h200" if "H200" in device_ceilings().name else "h100"
        shutil.copy(prof.report_path, Path(out) / f"{tag}_triton_matmul_4096_fp16.ncu-rep")
    _record("profile_triton_matmul_4096_fp16", prof.to_dict())


def test_an_untrusted_cuda_candidate_runs_as_device_code_recorded_once():
    problem = kernels.parse_problem("matmul", "512x384x256", "fp16", "NN")
    cand = Candidate(fresh("honest_cuda_kernel"), backend=Backend.CUDA)
    first = evaluate(cand, problem, config=EvalConfig(quick=True))
    assert first.verdict is Verdict.PASSED, first.error
    assert first.kernels == ["gemm_f16"]
    second = evaluate(cand, problem, config=EvalConfig(quick=True, time_candidate=False))
    assert second.verdict is Verdict.PASSED, second.error
    assert second.compile.cached and "candidate_record" not in second.checks["phase_wall_s"]
    # Host code of its own (a torch extension) would have to run in the judge: refused.
    host = run_fixture("honest_cuda_matmul", problem)
    assert host.verdict is Verdict.COMPILE_ERROR and "cannot load a host library" in host.error
    _record(
        "cuda_candidate_512x384x256",
        {
            "first": first.compile.__dict__,
            "second": second.compile.__dict__,
            "timing": _timing_summary(first),
            "host_library": host.error[-500:],
        },
    )


def test_a_cutlass_render_passes_every_stage_and_an_edited_one_is_refused():
    """Our CUTLASS render is our code: the judge builds and runs it, memcheck included. The
    same source edited is untrusted, and its host library may not run in the judge."""
    from kernels.ops.matmul.families.cutlass_sm90 import CutlassSm90Matmul

    family = CutlassSm90Matmul()
    problem = kernels.parse_problem("matmul", "512x1024x2048", "bf16", "NN")
    params = family.default(problem)
    src = family.render(problem, params)
    cand = Candidate.of_render(src, Backend.CUDA, family.name, params)
    ev = evaluate(cand, problem, config=EvalConfig(quick=True, sanitize=True))
    _record("cutlass_candidate_512x1024x2048", _timing_summary(ev))
    assert ev.verdict is Verdict.PASSED, ev.error
    assert ev.checks["trusted_render"]
    assert not [f for f in ev.findings if f.severity == "reject"]
    edited = evaluate(
        Candidate(src + "\n# edited\n", Backend.CUDA), problem, config=EvalConfig(quick=True)
    )
    assert edited.verdict is Verdict.COMPILE_ERROR and "cannot load a host library" in edited.error
