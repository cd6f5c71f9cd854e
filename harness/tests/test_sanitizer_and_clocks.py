"""compute-sanitizer log parsing, GPU clock/throttle parsing, and how both degrade on a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import Verdict, gpu_state
from harness.device import gpu_visible
from harness.judge import sanitizer
from harness.tests.conftest import checks, run_fixture

MEMCHECK_LOG = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at _rmsnorm+0x2d0 in /tmp/kf-eval-x/sandbox/kf_candidate.py:15
=========     by thread (31,0,0) in block (4,0,0)
=========     Address 0x7f0c2e000a00 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f0c2e000000 of size 2560 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x2f0b1] in libcuda.so.1
=========
========= ERROR SUMMARY: 1 error
"""
RACECHECK_LOG = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at _k+0x80 in k.cu:10
=========     and Read access at _k+0x90 in k.cu:12 [4 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_it_counts_memcheck_errors_and_keeps_the_first_lines():
    errors, lines = sanitizer.parse_log(MEMCHECK_LOG)
    assert errors == 1
    assert lines[0].startswith("Invalid __global__ read of size 2 bytes")
    assert any("_rmsnorm" in ln for ln in lines)
    assert not any("Host Frame" in ln for ln in lines)


def test_it_counts_racecheck_hazards_and_a_clean_summary():
    assert sanitizer.parse_log(RACECHECK_LOG)[0] == 1
    assert (
        sanitizer.parse_log("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")[0]
        == 0
    )


def test_it_says_the_tool_did_not_run_when_there_is_no_summary():
    errors, _ = sanitizer.parse_log(
        "========= Error: Target application terminated before first instrumented API call\n"
    )
    assert errors is None


def test_it_builds_a_sanitizer_command_with_a_private_log_and_an_error_exit_code():
    cmd = sanitizer.command("/x/compute-sanitizer", "memcheck", "/side/memcheck.log")
    assert cmd[:3] == ["/x/compute-sanitizer", "--tool", "memcheck"]
    assert "/side/memcheck.log" in cmd and str(sanitizer.ERROR_EXIT_CODE) in cmd


def test_it_parses_nvidia_smi_clocks_and_throttle_reasons():
    snap = gpu_state.parse_smi("1755, 3201, 1980, 61, 655.31, 0x0000000000000024\n")
    assert snap["sm_mhz"] == 1755 and snap["max_sm_mhz"] == 1980 and snap["power_w"] == 655.31
    assert snap["reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert gpu_state.parse_smi("1980, [N/A], 1980, 40, [N/A], 0x0\n")["mem_mhz"] is None
    assert "error" in gpu_state.parse_smi("garbage\n")


def test_it_reports_throttling_from_reasons_or_violation_counters_but_not_idle():
    idle = {"reasons": ["gpu_idle"], "violation_power_ns": 5, "violation_thermal_ns": 0}
    assert gpu_state.throttle_during(idle, dict(idle)) == []
    hot = {"reasons": ["hw_thermal_slowdown"], "violation_power_ns": 5}
    assert gpu_state.throttle_during(idle, hot) == ["hw_thermal_slowdown"]
    capped = {"reasons": [], "violation_power_ns": 2_000_005, "violation_thermal_ns": 0}
    assert gpu_state.throttle_during(idle, capped) == ["power_violation 2.0 ms"]
    assert gpu_state.throttle_during({"error": "no GPU"}, {"error": "no GPU"}) == []


def test_it_degrades_to_an_error_snapshot_without_a_gpu_tool(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    snap = gpu_state.snapshot()
    assert "error" in snap or snap.get("source") == "nvml"


@pytest.mark.skipif(gpu_visible(), reason="a GPU is visible: test_gpu.py runs the sanitizer")
def test_it_skips_the_sanitizer_with_a_warning_on_the_cpu():
    ev = run_fixture("honest_triton_matmul", sanitize=True)
    assert ev.verdict is Verdict.PASSED, ev.error
    assert "sanitizer" in checks(ev)
    assert not any(s.name.startswith("sanitize_") for s in ev.stages)


FAKE_TOOL = """#!/bin/sh
# Stands in for compute-sanitizer on a CPU machine: runs the target, writes a summary and the
# namespaces it ran in to the --log-file.
while [ $# -gt 0 ]; do
  case "$1" in
    --log-file) log=$2; shift 2;;
    --*) shift 2;;
    *) break;;
  esac
done
"$@"; rc=$?
printf '========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: %s errors\\n' "${FAKE_ERRORS:-0}" > "$log"
readlink /proc/self/ns/net /proc/self/ns/pid /proc/self/ns/mnt >> "$log"
exit $rc
"""


def _sanitize_job(tmp_path):
    import secrets

    import kernels
    from harness.sandbox import scratch

    problem = kernels.parse_problem("matmul", "64x48x32", "fp16", "NN")
    family = next(f for f in kernels.get_op("matmul").families() if f.name == "matmul_tiled")
    params = family.default(problem)
    workdir = Path(scratch.make("test"))
    # The judge under the tool, running a render of our own (on the CPU: the interpreter).
    subject = {
        "kind": "render",
        "source": family.render(problem, params),
        "point": {"family": family.name, "params": params},
        "render_problem": problem.to_dict(),
    }
    return {
        "problem": problem.to_dict(),
        "op_ref": "",
        "device": "cpu",
        "interpreter": True,
        "workdir": str(workdir),
        "subject": subject,
        "seed": secrets.randbits(40),
    }, workdir


def test_it_wraps_the_tool_in_the_childs_namespaces_and_reads_its_log(tmp_path, monkeypatch):
    import os

    from harness.config import Limits

    fake = tmp_path / "fake-sanitizer"
    fake.write_text(FAKE_TOOL)
    fake.chmod(0o755)
    monkeypatch.setattr(sanitizer, "find_tool", lambda: str(fake))
    job, workdir = _sanitize_job(tmp_path)
    env = {"TRITON_INTERPRET": "1"}
    io = {"readable": (), "writable": (), "env_extra": env}
    clean = sanitizer.run("memcheck", job, str(workdir), limits=Limits(), wall_s=120, **io)
    assert clean.ran and clean.errors == 0, clean
    assert clean.isolation == "namespaces+netns+landlock", clean
    assert clean.note == "", clean.note
    dirty = sanitizer.run(
        "memcheck",
        job,
        str(workdir),
        limits=Limits(),
        wall_s=120,
        readable=(),
        writable=(),
        env_extra={**env, "FAKE_ERRORS": "2"},
    )
    assert dirty.ran and dirty.errors == 2 and dirty.isolation == "namespaces+netns+landlock"
    # The tool itself (not only the candidate) ran in namespaces other than ours, and wrote its
    # log (in the parent's folder) from inside the private view.
    for kind in ("net", "pid", "mnt"):
        tool_ns = [ln for ln in clean.log_tail.splitlines() if ln.startswith(f"{kind}:[")]
        assert tool_ns and tool_ns[0] != os.readlink(f"/proc/self/ns/{kind}"), clean.log_tail


def test_a_judge_that_raises_under_the_tool_is_not_retried_in_a_looser_sandbox(
    tmp_path, monkeypatch
):
    """The tool attached (its summary is in the log) but the calls under it raised: that is
    the judge's failure, reported as "did not run", not a reason to drop namespaces (H100,
    2026-11-27: a store the view lacked sent every run through the ladder, 120 s a step)."""
    from harness.config import Limits

    fake = tmp_path / "fake-sanitizer"
    fake.write_text(FAKE_TOOL)
    fake.chmod(0o755)
    monkeypatch.setattr(sanitizer, "find_tool", lambda: str(fake))
    job, workdir = _sanitize_job(tmp_path)
    job["subject"] = {**job["subject"], "source": "raise RuntimeError('kf-broken-render')\n"}
    env = {"TRITON_INTERPRET": "1"}
    rep = sanitizer.run(
        "memcheck", job, str(workdir), limits=Limits(), wall_s=120, readable=(), writable=(),
        env_extra=env,
    )  # fmt: skip
    assert not rep.ran and rep.isolation == "namespaces+netns+landlock", rep
    # (The judge refuses a source that is not the render it names, before running it.)
    assert "raised under the tool" in rep.note and "not the render it names" in rep.note, rep
    assert "netns+landlock (" not in rep.note, rep.note  # no looser step was tried
