"""Nsight Compute reports recorded on a real H200, parsed on the CPU with ncu_report."""

from __future__ import annotations

import pytest

from harness import ncu
from harness.profiling import digest, from_report
from harness.results import Bottleneck, Profile
from harness.tests.conftest import FIXTURES

GEMM = str(FIXTURES / "h200_gemm4096_bf16_full.ncu-rep")
ELEMENTWISE = str(FIXTURES / "h200_elementwise_256MB_sections.ncu-rep")


def test_it_reads_the_key_metrics_of_a_cublas_gemm():
    prof = from_report(GEMM, "cand", "matmul/4096x4096x4096/bf16")
    m = prof.metrics
    assert prof.kernels == ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"]
    assert m["duration_ns"] == pytest.approx(175968.0)
    assert m["sm_pct"] == pytest.approx(90.2, abs=0.1)
    assert m["dram_pct"] == pytest.approx(20.9, abs=0.1)  # gpu__dram_throughput, not dram__
    assert m["tensor_pipe_pct"] == pytest.approx(94.8, abs=0.1)
    assert m["l2_hit_pct"] == pytest.approx(72.5, abs=0.1)
    assert m["achieved_occupancy_pct"] == pytest.approx(14.6, abs=0.1)
    assert m["registers_per_thread"] == 168
    assert m["shared_mem_dynamic_bytes"] == 213188
    assert prof.bottleneck is Bottleneck.COMPUTE
    assert [s[0] for s in prof.stalls[:3]] == ["barrier", "long_scoreboard", "gmma"]
    assert any(r["rule"] == "SOLBottleneck" for r in prof.rules)
    assert ncu.LIMITERS[int(m["occupancy_limiter"])] in ("registers", "shared_mem")


def test_it_calls_a_dram_bound_elementwise_kernel_memory_bound():
    prof = from_report(ELEMENTWISE, "cand", "x")
    assert prof.bottleneck is Bottleneck.MEMORY
    assert prof.metrics["dram_pct"] == pytest.approx(85.1, abs=0.1)
    # Not collected by that 6-section report: missing metrics are None, not errors.
    assert prof.metrics["dram_read_bytes"] is None
    assert prof.stalls[0][0] == "long_scoreboard"


def test_it_selects_kernels_by_nvtx_range():
    assert [k.name for k in ncu.read_report(GEMM, "gemm/")] == [
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    ]
    empty = from_report(ELEMENTWISE, "c", "p", nvtx="kf_candidate/")
    assert empty.kernels == [] and "no kernel" in empty.error


def test_it_writes_a_compact_digest_for_the_llm():
    text = digest(from_report(GEMM, "cand", "p"))
    assert "bottleneck: compute" in text
    assert "tensor pipe 94.8%" in text
    assert "top stalls: barrier" in text


def test_it_round_trips_a_profile_through_json():
    prof = from_report(GEMM, "cand", "p")
    again = Profile.from_dict(prof.to_dict())
    assert again.bottleneck is Bottleneck.COMPUTE
    assert again.metrics == prof.metrics


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({"sm_pct": 85.0, "memory_pct": 40.0}, Bottleneck.COMPUTE),
        ({"sm_pct": 10.0, "memory_pct": 80.0}, Bottleneck.MEMORY),
        (
            {
                "sm_pct": 20.0,
                "memory_pct": 20.0,
                "achieved_occupancy_pct": 10.0,
                "theoretical_occupancy_pct": 25.0,
            },
            Bottleneck.OCCUPANCY,
        ),
        (
            {
                "sm_pct": 20.0,
                "memory_pct": 20.0,
                "achieved_occupancy_pct": 80.0,
                "theoretical_occupancy_pct": 100.0,
            },
            Bottleneck.LATENCY,
        ),
        ({}, Bottleneck.UNKNOWN),
    ],
)
def test_it_classifies_the_bottleneck(metrics, expected):
    assert ncu.classify(metrics) is expected


def test_it_reads_the_report_profile_recorded_on_an_h100():
    # Recorded by harness.profile() on an H100 (tests/test_gpu.py): one Triton GEMM inside the
    # harness's NVTX range and nothing else (no input generation, no flush kernels).
    path = str(FIXTURES / "h100_triton_matmul_4096_fp16.ncu-rep")
    prof = from_report(path, "cand", "matmul/4096x4096x4096/fp16/NN", nvtx="kf_candidate/")
    assert prof.kernels == ["_matmul"]
    assert prof.metrics["registers_per_thread"] == 58
    assert 400_000 < prof.metrics["duration_ns"] < 600_000
    assert prof.bottleneck is Bottleneck.MEMORY
    assert len(ncu.read_report(path)) == 1
