"""The machine's kernel library (issue 24): which builds there are, how a build is recorded and
resumed, and which built points a search gets for its problem. The compile itself is the
screen's (harness.precompile, tested with it); here a stand-in compiles, except where a CUDA
build meets a machine without a GPU, which is the real path's answer."""

import json
import time

import pytest

from harness import device, library
from kernels import parse_problem
from kernels.ops.matmul.families.cutlass_sm90 import CutlassSm90Matmul

CUTLASS = CutlassSm90Matmul()
BF16_NN = ("matmul/bf16/NN",)


def test_cutlass_builds_once_per_configuration_not_per_point_or_shape():
    problem = parse_problem("matmul", "4096x4096x4096", "bf16", "NN")
    points = CUTLASS.library_points(problem)
    assert len(points) >= 200  # hundreds of configurations in one class
    builds = {library.entry_key(CUTLASS, "matmul/bf16/NN", p) for p in points}
    assert len(builds) == len(points)  # one point per build
    assert all(CUTLASS.check(problem, p) is None for p in points)
    default = CUTLASS.default(problem)
    assert all(points[0][k] == default[k] for k in CUTLASS.build_params)  # nearest first
    # Another shape of the class has the same builds; a shape TMA cannot take has none.
    other = parse_problem("matmul", "192x4096x7168", "bf16", "NN")
    assert CUTLASS.library_points(other) == points
    assert CUTLASS.library_points(parse_problem("matmul", "4096x4095x4096", "bf16", "NN")) == []


def test_a_build_records_each_outcome_and_the_next_goes_on_from_there(tmp_path):
    manifest = tmp_path / "manifest.json"
    compiled: list[str] = []

    def compile_one(item):
        compiled.append(item.key)
        if item.point["TILE_N"] == 192:
            return library.Built(False, 1.0, "nvcc failed: no wgmma for this tile", "compile")
        if item.point["TILE_N"] == 64 and item.point["SCHEDULE"] == "pingpong":
            return library.Built(False, 300.0, "compile did not finish in time", "timeout")
        return library.Built(True, 2.0)

    first = library.build(BF16_NN, workers=4, compile_one=compile_one, manifest=manifest)
    planned = len(library.planned(BF16_NN))
    assert first.planned == planned and first.already == 0
    assert first.built + first.failed == planned and first.failed > 0 and first.left == 0
    entries = library.load(manifest)
    assert len(entries) == planned
    assert {e.failure for e in entries.values() if e.params["TILE_N"] == 192} == {"compile"}
    timed_out = [e for e in entries.values() if e.failure == "timeout"]
    assert timed_out and all(not e.ok for e in timed_out)

    compiled.clear()
    again = library.build(BF16_NN, workers=4, compile_one=compile_one, manifest=manifest)
    assert again.already == first.built  # nothing built is built twice;
    assert len(compiled) == len(timed_out)  # a timeout is tried again, an nvcc refusal not
    compiled.clear()
    retried = library.build(
        BF16_NN, workers=4, compile_one=compile_one, manifest=manifest, retry_failed=True
    )
    assert retried.failed == first.failed and len(compiled) == first.failed


def test_a_build_cut_short_keeps_what_it_made(tmp_path):
    manifest = tmp_path / "manifest.json"
    report = library.build(
        BF16_NN,
        workers=2,
        deadline_s=0.2,  # only the first wave starts
        compile_one=lambda item: time.sleep(0.4) or library.Built(True, 0.4),
        manifest=manifest,
    )
    assert report.built == 2 and report.left == report.planned - 2
    assert len(library.load(manifest)) == 2


def test_a_search_gets_the_built_points_of_its_class_and_nothing_stale(tmp_path):
    manifest = tmp_path / "manifest.json"
    items = library.planned(BF16_NN)
    library.build(
        BF16_NN,
        workers=2,
        compile_one=lambda item: library.Built(
            item.point["SCHEDULER"] == "streamk", 1.0, "x", "compile"
        ),
        manifest=manifest,
    )
    problem = parse_problem("matmul", "192x4096x7168", "bf16", "NN")  # another shape, same class
    got = library.points_for(problem, manifest=manifest)
    streamk = [i for i in items if i.point["SCHEDULER"] == "streamk"]
    assert len(got) == len(streamk) > 0
    assert all(p["family"] == CUTLASS.name and p["params"]["SCHEDULER"] == "streamk" for p in got)
    assert got[0]["params"] == streamk[0].point
    # Other classes (layout NT, fp16) were not built.
    assert (
        library.points_for(
            parse_problem("matmul", "192x4096x7168", "bf16", "NT"), manifest=manifest
        )
        == []
    )
    assert (
        library.points_for(
            parse_problem("matmul", "192x4096x7168", "fp16", "NN"), manifest=manifest
        )
        == []
    )
    # A build of a different render (the family's template changed since) is not built.
    data = json.loads(manifest.read_text())
    for entry in data:
        entry["render_sha256"] = "0" * 64
    manifest.write_text(json.dumps(data))
    assert library.points_for(problem, manifest=manifest) == []
    # ... and the next build makes every one of them again, the failed ones too.
    again = library.build(
        BF16_NN, workers=4, compile_one=lambda item: library.Built(True, 1.0), manifest=manifest
    )
    assert again.already == 0 and again.built == len(items)
    assert len(library.points_for(problem, manifest=manifest)) == len(items)


def test_no_nvcc_means_no_library(monkeypatch):
    from harness import cuda_ext

    monkeypatch.setattr(cuda_ext, "nvcc_path", lambda: None)
    cuda_ext._NVCC_VERSION.clear()
    problem = parse_problem("matmul", "4096x4096x4096", "bf16", "NN")
    assert library.points_for(problem) == []


def test_swiglu_gates_interleaved_class_plans_its_cutlass_builds_only():
    items = library.planned(("swiglu_gate/bf16/i8",))
    assert {i.family.name for i in items} == {"swiglu_gate_cutlass_sm90"}
    assert len(items) == len(items[0].family.library_points(items[0].problem)) > 100
    # The separate-weights layout has no family built ahead: nothing to plan.
    assert library.planned(("swiglu_gate/bf16/",)) == []


def _library_of(render: str, monkeypatch) -> object:
    """The CudaLibrary a render asks harness.cuda_ext to build (nothing is built or loaded)."""
    import types

    from harness import cuda_ext

    asked = []

    def load_library(lib, functions):
        asked.append(lib)
        return types.SimpleNamespace(kf_abi_version=lambda: 3)  # the CUTLASS families' ABI

    monkeypatch.setattr(cuda_ext, "load_library", load_library)
    exec(compile(render, "candidate", "exec"), {"__name__": "candidate"})
    return asked[-1]


def test_q_k_v_problems_of_one_head_dim_share_a_class_and_its_builds(tmp_path, monkeypatch):
    """Llama-3-8B's q/k/v (32 q and 8 k/v heads) and Qwen2-7B's (28 and 4, with biases), each
    with its RMSNorm folded: one class at head dim 128, whose builds serve both (the heads and
    the bias are run-time arguments of the same build); GPT-J's rotary is a class of its own."""
    llama = parse_problem("qkv_rotary", "2048x32x8x128x4096", "bf16", "i8+rowscale+kv_heads=8")
    qwen = parse_problem("qkv_rotary", "2048x28x4x128x3584", "bf16", "i8+bias+rowscale+kv_heads=4")
    (cls,) = {library.class_of(llama), library.class_of(qwen)}
    assert cls == "qkv_rotary/bf16/i8+rowscale+head_dim=128" and cls in library.DEFAULT_CLASSES
    gptj = parse_problem(
        "qkv_rotary", "2048x16x16x256x4096", "bf16", "pairs+rot=64+head_dim=256+kv_heads=16"
    )
    assert library.class_of(gptj) == "qkv_rotary/bf16/pairs+rot=64+head_dim=256"
    assert library.class_of(library.representative(library.class_of(gptj))) == library.class_of(
        gptj
    )
    manifest = tmp_path / "manifest.json"
    items = library.planned((cls,))
    assert {i.family.name for i in items} == {"qkv_rotary_cutlass_sm90"} and len(items) > 50
    library.build(
        (cls,), workers=4, compile_one=lambda item: library.Built(True, 1.0), manifest=manifest
    )
    for problem in (llama, qwen):
        got = library.points_for(problem, manifest=manifest)
        assert len(got) == len(items) and got[0]["params"] == items[0].point
    assert library.points_for(gptj, manifest=manifest) == []
    softmax = parse_problem("softmax", "64x1000", "fp16")  # an op with no library at all
    assert library.points_for(softmax, manifest=manifest) == []
    # What the two models' renders of one point ask nvcc for is one build.
    family = items[0].family
    point = items[0].point
    built = {
        _library_of(family.render(p, point), monkeypatch).key
        for p in (llama, qwen, items[0].problem)
    }
    assert len(built) == 1


def test_an_unknown_class_is_refused_with_what_is_known():
    with pytest.raises(ValueError, match="no library for op 'softmax'"):
        library.planned(("softmax/bf16/",))
    # A problem's own layout where the class names less: its builds would never be found.
    with pytest.raises(ValueError, match="its problems' is qkv_rotary/bf16/i8\\+head_dim=128"):
        library.planned(("qkv_rotary/bf16/i8+kv_heads=8",))


def test_one_build_at_a_time_per_machine(tmp_path, monkeypatch):
    """Every GPU worker of a machine starts a build when it is ready: the first holds the
    machine's build lock, the others leave it be."""
    monkeypatch.setattr(library, "manifest_path", lambda: tmp_path / "manifest.json")
    with library._the_only_build() as first, library._the_only_build() as second:
        assert first and not second
    with library._the_only_build() as again:
        assert again  # released with the first


def test_the_screen_takes_a_library_build_as_compiled_and_compiles_only_the_rest(
    tmp_path, monkeypatch
):
    from harness import cuda_ext
    from harness.screen import Screener, ScreenPoint

    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cuda_ext, "nvcc_version", lambda: "13.0.88")  # this machine has none
    library.build(
        BF16_NN,
        workers=2,
        compile_one=lambda item: library.Built(
            item.point["SCHEDULER"] == "streamk", 1.0, "x", "compile"
        ),
    )
    problem = parse_problem("matmul", "256x2048x7168", "bf16", "NN")
    built = library.points_for(problem)[:5]
    other = {**built[0]["params"], "STAGES": 3}  # compile-time: a build of its own
    assert CUTLASS.check(problem, other) is None
    # A GPU machine's screen; its compile children (nvcc on a GPU box) are the stand-in's.
    monkeypatch.setattr(device, "gpu_visible", lambda: True)
    compiled: list[list[str]] = []
    monkeypatch.setattr(
        Screener, "_compile", lambda self, chunk: compiled.append([i.point.key for i in chunk])
    )
    screener = Screener(problem, deadline_at=time.monotonic() + 60)
    try:
        points = [ScreenPoint(p["family"], p["params"]) for p in built]
        assert screener.submit([*points, ScreenPoint(CUTLASS.name, other)]) == 6
        assert screener.ready == 5  # the library's builds, at once
        assert screener.compiling == 1
        deadline = time.monotonic() + 10
        while not compiled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert compiled == [[ScreenPoint(CUTLASS.name, other).key]]
    finally:
        screener.close()


def test_the_classes_are_built_in_turn_each_nearest_its_default_first():
    classes = ("matmul/bf16/NN", "matmul/bf16/NT", "matmul/fp16/NN")
    items = library.planned(classes)
    assert len(items) == sum(len(library.planned((c,))) for c in classes)
    assert [library.class_of(i.problem) for i in items[:6]] == [*classes, *classes]
    for c in classes:  # each class keeps its own order
        assert [i.point for i in items if library.class_of(i.problem) == c] == [
            i.point for i in library.planned((c,))
        ]


def test_a_class_builds_its_measured_starting_points_first():
    """A build cut short (a worker just started, --minutes) has the op's leaders: the CUTLASS
    points of kernels/ops/matmul/starting_points.py and swiglu's measured ones come first."""
    from harness.ops import resolve_op

    for problem_class in ("matmul/bf16/NT", "swiglu_gate/bf16/i8"):
        items = library.planned((problem_class,))
        problem = items[0].problem
        op = resolve_op(problem.op)
        leaders = library._leader_builds(op, problem)
        assert leaders, problem_class
        first = [i.key for i in items[: len(leaders)]]
        assert set(first) == leaders, problem_class
        assert {i.key for i in items} >= leaders  # every leader is a library build
