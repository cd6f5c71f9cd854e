"""What a problem needs at least before the Amdahl plan funds it (agents/fit.py)."""

from __future__ import annotations

import math

from agents.config import OptimizeConfig
from agents.evaluator import SCREEN_MIN_S, VERIFY_ESTIMATE_S
from agents.fit import COMPILE_WALL_S, SCREEN_S_PER_POINT, for_plan, least_budget
from agents.stopping import ESTIMATE_SLACK
from kernels import parse_problem

MATMUL = parse_problem("matmul", "2048x3584x18944", "bf16", "NN")
RMSNORM = parse_problem("rmsnorm", "2048x3584", "bf16", "")


def test_a_gpu_matmul_needs_a_cutlass_build_a_screen_round_and_a_full_verification():
    least = least_budget(MATMUL, gpu=True)
    screen = SCREEN_MIN_S + COMPILE_WALL_S["cuda"] + 48 * SCREEN_S_PER_POINT["gpu"]
    assert least.points == OptimizeConfig().screen_batch == 48
    assert least.screen_s >= screen and least.verify_s >= ESTIMATE_SLACK * VERIFY_ESTIMATE_S["full"]
    assert least.total_s == least.screen_s + least.verify_s
    assert "a screen of 48 points" in least.describe() and "one verification" in least.describe()


def test_an_op_with_only_triton_families_and_the_interpreter_need_less():
    gpu_matmul = least_budget(MATMUL, gpu=True).total_s
    assert least_budget(RMSNORM, gpu=True).total_s < gpu_matmul  # no nvcc build to wait for
    cpu = least_budget(MATMUL, gpu=False)  # no CUDA C++ family on a CPU worker, quick protocol
    assert cpu.total_s < least_budget(RMSNORM, gpu=True).total_s
    assert least_budget(MATMUL, gpu=True, config=OptimizeConfig(screen_batch=8)).points == 8


def test_the_plan_asks_it_with_the_problem_dict_of_a_plan_group():
    assert for_plan(gpu=True)(MATMUL.to_dict()) == least_budget(MATMUL, gpu=True)


def test_a_gpu_worker_counts_its_own_recent_verifications(monkeypatch, tmp_path):
    # The plan funds a problem with this machine's measured verification time where it has
    # one (a GPU worker), so a faster harness funds more problems of the same budget.
    from harness import verify_times

    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path))
    before = least_budget(MATMUL, gpu=True)
    monkeypatch.setattr("harness.device.gpu_visible", lambda: True)
    verify_times.record("full", 20.0)
    after = least_budget(MATMUL, gpu=True)
    assert after.verify_s == math.ceil(ESTIMATE_SLACK * 20.0) < before.verify_s
    assert after.screen_s == before.screen_s


def test_a_gpu_worker_with_a_library_needs_a_screen_of_all_of_it_but_no_nvcc_wait(
    monkeypatch, tmp_path
):
    # Issue 24: a funded problem gets at least a screen of every library build that fits it;
    # those are compiled already (the screen takes them as such), so only Triton is waited for.
    from harness import cuda_ext, library
    from kernels import get_op

    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_ext, "nvcc_version", lambda: "13.0.88")  # this machine has none
    without = least_budget(MATMUL, gpu=True)
    library.build(("matmul/bf16/NN",), workers=2, compile_one=lambda i: library.Built(True, 1.0))
    built = len(library.points_for(MATMUL))
    least = least_budget(MATMUL, gpu=True)
    op = get_op("matmul")
    opening = len(op.starting_points(MATMUL)) + len(op.families())
    assert built >= 200 and least.library == built and least.points == opening + built
    screen = SCREEN_MIN_S + COMPILE_WALL_S["triton"] + least.points * SCREEN_S_PER_POINT["gpu"]
    assert least.screen_s == math.ceil(screen) > without.screen_s
    assert least.verify_s == without.verify_s
    assert f"{built} of them the machine's library" in least.describe()
    # Under the interpreter there is no library to screen.
    assert least_budget(MATMUL, gpu=False).library == 0
