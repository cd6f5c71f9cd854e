"""The screen (tier one) on the CPU: it renders (family, point) itself, checks each render at
the tail and problem shapes against the reference, ranks the right ones by time interleaved
with the baseline, and a render that kills its process costs that render only."""

from __future__ import annotations

import inspect
import time

import pytest

import kernels
from harness.results import Verdict
from harness.screen import Screener, ScreenPoint, screen, tail_shape
from harness.tests.conftest import needs_interpreter
from kernels import parse_problem
from kernels.problem import Problem

PROBLEM = parse_problem("rmsnorm", "32x256", "fp32")
REF = "harness.tests.screen_op:OP"


def point(kind: str, scale: int = 1) -> ScreenPoint:
    return ScreenPoint(f"screen_{kind}", {"SCALE": scale})


@needs_interpreter
def test_it_checks_and_ranks_renders_and_survives_one_that_kills_its_process():
    from harness.screen import ScreenConfig

    points = [
        point("right", 1),
        point("unwritten"),
        point("raises"),
        point("dies"),
        point("right", 2),
    ]
    points.append(ScreenPoint("screen_right", {"SCALE": 7}))  # not a point of the family
    result = screen(PROBLEM, points, deadline_s=240, config=ScreenConfig(op_ref=REF))

    by = {(e.family, e.params.get("SCALE")): e for e in result.entries}
    for scale in (1, 2):
        right = by[("screen_right", scale)]
        assert right.verdict is Verdict.PASSED and right.speedup and right.rounds == 1
        assert right.median_us and right.baseline_us and right.worst_error is not None
    assert by[("screen_unwritten", 1)].verdict is Verdict.INCORRECT
    assert "NaN" in by[("screen_unwritten", 1)].detail
    assert by[("screen_raises", 1)].verdict is Verdict.INCORRECT
    assert by[("screen_dies", 1)].verdict is Verdict.CRASH  # the batch went on without it
    assert by[("screen_right", 7)].verdict is Verdict.COMPILE_ERROR
    assert "invalid point" in by[("screen_right", 7)].detail
    assert [e.family for e in result.ranked()] == ["screen_right", "screen_right"]
    assert result.timed == 4 and result.gpu_s > 0 and result.regime.value == "interpreter"


def test_only_renders_of_an_ops_own_families_reach_it():
    # No entry point takes source text: an LLM's code cannot be screened, only verified.
    for fn in (screen, Screener.submit, Screener.screen):
        assert "source" not in inspect.signature(fn).parameters
    with pytest.raises(ValueError, match="no family"):
        from harness.screen import render

        render(PROBLEM, ScreenPoint("not_a_family", {}), REF)


@needs_interpreter
def test_a_candidate_that_hangs_costs_its_share_and_the_rest_are_screened():
    from harness.screen import ScreenConfig

    points = [point("right", 1), point("hangs"), point("right", 2)]
    config = ScreenConfig(op_ref=REF, point_s=8.0)
    started = time.monotonic()
    result = screen(PROBLEM, points, deadline_s=240, config=config)
    took = time.monotonic() - started
    by = {(e.family, e.params.get("SCALE")): e for e in result.entries}
    hung = by[("screen_hangs", 1)]
    assert hung.verdict is Verdict.TIMEOUT and "its share" in hung.detail, hung.detail
    assert hung.detail.startswith("its import and correctness checks ran past 8 s"), hung.detail
    for scale in (1, 2):
        assert by[("screen_right", scale)].verdict is Verdict.PASSED
    assert took < 120, f"the hang took the batch's budget ({took:.0f} s of 240)"


@needs_interpreter
def test_a_point_a_hang_kept_from_its_turn_is_not_given_the_hangs_reason(monkeypatch):
    # A 2x H200 run (2026-11-28) reported every point of a screen as "its turn ran past 30 s"
    # when two had hung and the rest had never run: the screen's why-not sent people after
    # the wrong points.
    from harness.screen import NOT_REACHED, ScreenConfig

    monkeypatch.setattr("harness.screen.RETRIES", 0)  # no fresh child after the hang
    config = ScreenConfig(op_ref=REF, point_s=8.0)
    result = screen(PROBLEM, [point("hangs"), point("right", 1)], deadline_s=240, config=config)
    by = {e.family: e for e in result.entries}
    assert "ran past 8 s" in by["screen_hangs"].detail
    assert by["screen_right"].verdict is Verdict.TIMEOUT
    assert by["screen_right"].detail == NOT_REACHED


def test_a_screen_past_its_deadline_screens_nothing_and_says_so():
    result = screen(PROBLEM, [point("right")], deadline_s=1.0, config=_config())
    assert [e.verdict for e in result.entries] == [Verdict.TIMEOUT]
    assert result.gpu_s == 0.0


def test_the_tail_shape_keeps_the_compile_specialization_and_misses_every_tile():
    p = parse_problem("matmul", "4096x28672x1", "bf16", "NN")
    t = tail_shape(p)
    assert t.shape == (1040, 1040, 1)
    for s in t.shape[:2]:
        assert s % 16 == 0 and s % 32 != 0
    odd = tail_shape(parse_problem("matmul", "3000x17x4095", "bf16", "NN"))
    for a, b in zip(odd.shape, (3000, 17, 4095), strict=True):
        assert (a % 16 == 0) == (b % 16 == 0) and a <= b and a > 1


def test_the_tail_shape_and_the_interpreters_shrink_keep_the_heads_a_layout_names():
    """Qwen2's q/k/v as one interleaved weight (28 q, 4 k/v heads of 128): a tail of 26 and 2
    heads of 112 made every candidate of the first job that screened it fail its own run()
    check (H200, 2026-11-29); a kv_heads=<n> attention keeps H, which n must divide."""
    from harness.judge.cases import shrink

    qkv = parse_problem("qkv_rotary", "2048x28x4x128x3584", "bf16", "i8+bias+kv_heads=4")
    assert tail_shape(qkv).shape == (1040, 28, 4, 128, 1040)
    assert shrink(qkv).shape == (64, 28, 4, 128, 64)
    assert tail_shape(Problem(qkv.op, qkv.shape, qkv.dtype, "+bias")).shape == (
        1040,
        26,
        2,
        112,
        1040,
    )
    gqa = parse_problem("decode_attention", "1x28x1x4096x128", "bf16", "kv_heads=4")
    assert tail_shape(gqa).shape[1] == 28 and shrink(gqa).shape[1] == 28
    for p in (tail_shape(qkv), shrink(qkv), tail_shape(gqa), shrink(gqa)):
        kernels.get_op(p.op).validate(p)


def _config():
    from harness.screen import ScreenConfig

    return ScreenConfig(op_ref=REF)


def test_every_cuda_family_builds_at_import_where_the_compile_children_build(monkeypatch, tmp_path):
    # The screen's compile children build a CUDA C++ render by importing it (a call would run
    # it on the GPU being timed), and the screening child refuses to build: a family that
    # builds later, in prepare() or run(), would never be built ahead.
    import kernels
    from harness import cuda_ext, runtime

    class BuildReached(Exception):  # the toolchain is the edge: no nvcc on this machine
        pass

    def reached(*args, **kwargs):
        raise BuildReached

    monkeypatch.setattr(cuda_ext, "load_cuda", reached)
    monkeypatch.setattr(cuda_ext, "load_library", reached)
    problems = {
        "matmul": parse_problem("matmul", "2048x2048x2048", "bf16", "NN"),
        "swiglu_gate": parse_problem("swiglu_gate", "2048x2816x1024", "bf16", "i8"),
        "qkv_rotary": parse_problem("qkv_rotary", "2048x16x16x64x1024", "bf16", "i8+kv_heads=16"),
    }
    families = [
        f for op in kernels.all_ops().values() for f in op.families() if f.backend == "cuda"
    ]
    assert {f.op for f in families} <= set(problems), "add a problem for the new op here"
    assert families
    for i, family in enumerate(families):
        problem = problems[family.op]
        params = family.default(problem)
        assert family.check(problem, params) is None
        source = family.render(problem, params)
        with pytest.raises(BuildReached):  # during the import itself
            runtime.load_candidate(source, str(tmp_path), f"kf_cuda_{i}")


def test_the_screening_child_refuses_to_build_cuda_and_says_why(monkeypatch, tmp_path):
    from harness import cuda_ext

    monkeypatch.setenv("KF_COMPILE_CACHE", str(tmp_path))  # empty: nothing was built ahead
    monkeypatch.setattr(cuda_ext, "builds_refused", "not built ahead (test)")
    with pytest.raises(cuda_ext.CudaBuildError, match="not built ahead"):
        cuda_ext.load_cuda("x", cuda_source="", cpp_source="", functions=["f"])
    lib = cuda_ext.CudaLibrary("x", 'extern "C" void f() {}', ())
    with pytest.raises(cuda_ext.CudaBuildError, match="not built ahead"):
        cuda_ext.load_library(lib, {})


def test_triton_compiles_go_before_queued_builds_which_never_take_every_worker(
    monkeypatch, tmp_path
):
    import threading

    from harness import device
    from harness.screen import ScreenConfig
    from kernels.ops.matmul.families import cutlass_sm90, tiled

    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path))  # no library here: every build compiles
    problem = parse_problem("matmul", "256x2048x7168", "bf16", "NN")
    cutlass, triton = cutlass_sm90.CutlassSm90Matmul(), tiled.TiledMatmul()
    builds = [ScreenPoint(cutlass.name, p) for p in cutlass.library_points(problem)[:6]]
    quick = [ScreenPoint(triton.name, {**triton.default(problem), "GROUP": g}) for g in (1, 4, 16)]
    # A GPU machine's screen; its compile children (nvcc, Triton) are the stand-in's, which
    # holds each compile until the test lets it end.
    monkeypatch.setattr(device, "gpu_visible", lambda: True)
    started: list[str] = []
    release = threading.Semaphore(0)
    changed = threading.Condition()

    def compile_stand_in(self, chunk):
        with changed:
            started.append(chunk[0].point.family)
            changed.notify_all()
        release.acquire()
        for item in chunk:
            self._compiled(item, True, "", "", 1.0)

    def until(n):
        with changed:
            assert changed.wait_for(lambda: len(started) >= n, timeout=10), started
        time.sleep(0.1)  # anything else that would start now has started
        return list(started)

    monkeypatch.setattr(Screener, "_compile", compile_stand_in)
    screener = Screener(
        problem, config=ScreenConfig(compile_workers=4), deadline_at=time.monotonic() + 60
    )
    try:
        assert screener.build_slots == 3
        assert screener.submit(builds) == 6
        assert until(3) == [cutlass.name] * 3  # the fourth worker is kept from builds
        assert screener.submit(quick) == 3
        assert until(4)[3] == triton.name  # on the free worker at once
        for _ in range(3):  # three compiles end: the two queued Triton chunks go first
            release.release()
        assert sorted(until(7)[4:]) == sorted([triton.name, triton.name, cutlass.name])
        for _ in range(9):
            release.release()
        assert until(9)[7:] == [cutlass.name] * 2
        with changed:
            assert changed.wait_for(lambda: screener.compiling == 0, timeout=10)
        assert screener.ready == 9
    finally:
        for _ in range(9):
            release.release()
        screener.close()


def test_a_compiled_point_is_ready_while_the_rest_of_its_chunk_still_compiles(
    monkeypatch, tmp_path
):
    # A compile child reports each point as it finishes; the screen may take that point at
    # once rather than when the child's whole chunk is done (a cold run's first round waited
    # for every chunk's last compile).
    import json
    import threading

    from harness import device, sandbox
    from harness.sandbox.parent import ChildResult, ChildStatus
    from harness.screen import ScreenConfig
    from kernels.ops.matmul.families import tiled

    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(device, "gpu_visible", lambda: True)
    problem = parse_problem("matmul", "256x512x512", "bf16", "NN")
    family = tiled.TiledMatmul()
    points = [ScreenPoint(family.name, {**family.default(problem), "GROUP": g}) for g in (1, 4)]
    release = threading.Event()

    def compile_child(phase, job, workdir, **_):  # reports the first point, then waits
        assert phase == "screen_compile" and len(job["points"]) == 2
        with open(job["progress_path"], "a") as f:
            ids = [p["candidate_id"] for p in job["points"]]
            f.write(json.dumps({"candidate_id": ids[0], "ok": True, "seconds": 2.0}) + "\n")
            f.flush()
            assert release.wait(timeout=20)
            f.write(json.dumps({"candidate_id": ids[1], "ok": True, "seconds": 2.0}) + "\n")
        return ChildResult(ChildStatus.OK, wall_s=4.0)

    monkeypatch.setattr(sandbox, "run_child", compile_child)
    screener = Screener(
        problem, config=ScreenConfig(compile_workers=1), deadline_at=time.monotonic() + 60
    )
    try:
        assert screener.submit(points) == 2
        deadline = time.monotonic() + 10
        while screener.ready < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (screener.ready, screener.compiling) == (1, 1)  # its chunk-mate still compiles
        release.set()
        deadline = time.monotonic() + 10
        while screener.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (screener.ready, screener.compiling) == (2, 0)
        assert screener.compile_cpu_s == 4.0
    finally:
        release.set()
        screener.close()
