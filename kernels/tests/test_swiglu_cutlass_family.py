"""swiglu_gate's layouts "i8" and "i8+rowscale" and its CUTLASS family on the CPU: the
interleave, the op's reference and baseline for them, check() rules, rendering, the nvcc flags, the declared C
signatures against the C prototypes and the padded correctness path. The library is the GPU
edge: a stand-in object takes its place here (kernels/tests/test_cutlass_family.py's); the GPU
test at the end builds and runs the real one."""

from __future__ import annotations

import shutil
import types

import pytest
import torch

from kernels import get_op
from kernels.epilogue_gemm import ALONG_N
from kernels.ops.matmul.families.cutlass_sm90 import CUTLASS_PIN
from kernels.ops.swiglu_gate.families.cutlass_sm90 import (
    CUDA_SOURCE,
    CutlassSm90SwigluGate,
)
from kernels.ops.swiglu_gate.op import ROW_SCALE, deinterleave, interleave
from kernels.problem import Problem, ProblemError
from kernels.row_scale import rms_scale
from kernels.tests.test_cutlass_family import (
    assert_declared_as_in_c,
    fake_library,
    fake_loader,
)

FAMILY = CutlassSm90SwigluGate()
OP = get_op("swiglu_gate")


def problem(shape=(256, 512, 1024), layout="i8", dtype="bf16") -> Problem:
    return Problem("swiglu_gate", shape, dtype, layout)


@pytest.fixture
def load(monkeypatch):
    return fake_loader(monkeypatch, FAMILY, fake_library("kf_swiglu", abi_version=3))


def test_the_interleave_round_trips_and_the_op_means_the_same_in_both_layouts():
    w_gate, w_up = torch.randn(24, 5), torch.randn(24, 5)
    w = interleave(w_gate, w_up)
    assert torch.equal(w[8:16], w_up[:8]) and torch.equal(w[16:24], w_gate[8:16])
    back = deinterleave(w)
    assert torch.equal(back[0], w_gate) and torch.equal(back[1], w_up)
    x = torch.randn(3, 5)
    plain, packed = problem((3, 24, 5), ""), problem((3, 24, 5))
    assert torch.equal(OP.reference(plain, x, w_gate, w_up), OP.reference(packed, x, w))


def test_layout_i8_takes_one_interleaved_weight_and_whole_groups():
    prob = problem((4, 16, 8))
    assert OP.input_shapes(prob) == [(4, 8), (32, 8)]
    assert [tuple(t.shape) for t in OP.make_inputs(prob, seed=1, device="cpu")] == [(4, 8), (32, 8)]
    with pytest.raises(ProblemError, match="multiple of 8"):
        OP.validate(problem((4, 12, 8)))
    assert all(s.shape[1] % 8 == 0 for s in OP.sweep(problem((33, 40, 65))))


def test_layout_i8_rowscale_is_an_rmsnorm_folded_into_the_pair():
    """rmsnorm(h) @ w^T = s * (h @ (w * g)^T), s the norm's row scale and g its weight: the op
    over h, the folded weight and s computes what the norm and then i8 compute."""
    m, n, k = 5, 16, 24
    prob, plain = problem((m, n, k), ROW_SCALE, "fp16"), problem((m, n, k), "i8", "fp16")
    assert OP.input_shapes(prob) == [(m, k), (2 * n, k), (m,)]
    h, w, s = OP.make_inputs(prob, seed=2, device="cpu")
    assert s.dtype == torch.float32 and torch.equal(s, rms_scale(h))
    norms = h.double().pow(2).mean(-1).sqrt()
    assert norms.max() / norms.min() > 3, "rows of different sizes, so a misplaced scale shows"
    g = torch.rand(k, dtype=torch.float64) + 0.5
    w_gate, w_up = (t.double() for t in deinterleave(w))
    normed = h.double() * s.double()[:, None] * g
    want = OP.reference(plain, normed, interleave(w_gate, w_up))
    folded = interleave(w_gate * g, w_up * g)
    torch.testing.assert_close(OP.reference(prob, h.double(), folded, s.double()), want)
    # The scale applied after the gating, or not at all, is another answer.
    assert not torch.allclose(OP.reference(plain, h.double(), folded), want, rtol=0.1)
    for case in OP.adversarial_inputs(prob, seed=0, device="cpu").values():
        assert [tuple(t.shape) for t in case] == [(m, k), (2 * n, k), (m,)]


@pytest.mark.parametrize("case", ["random", "wide_gates", "zero_one"])
def test_the_i8_baseline_matches_the_reference(case):
    prob = problem((5, 16, 24))
    inputs = (
        OP.make_inputs(prob, seed=2, device="cpu")
        if case == "random"
        else OP.adversarial_inputs(prob, seed=3, device="cpu")[case]
    )
    out = torch.empty(5, 16, dtype=torch.bfloat16)
    OP.baseline(prob, *inputs, out=out)
    tol = OP.tolerance(prob)
    torch.testing.assert_close(
        out.double(), OP.reference(prob, *inputs), rtol=tol.rtol, atol=tol.atol
    )


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"SCHEDULE": "cooperative", "TILE_M": 64}, "two warpgroups"),
        ({"SCHEDULE": "pingpong", "TILE_M": 256, "STORE": "pair"}, "owns a whole tile"),
        ({"TILE_M": 256, "TILE_N": 256}, "accumulators per thread"),
        ({"SCHEDULE": "pingpong", "TILE_N": 128, "STORE": "bulk"}, "the cooperative schedule"),
    ],
)
def test_check_refuses_points_that_cannot_build(changes, reason):
    prob = problem()
    assert reason in FAMILY.check(prob, {**FAMILY.default(prob), **changes})


def test_check_takes_only_the_interleaved_layout_and_aligned_k():
    assert "reads layout 'i8', 'i8+rowscale', not ''" in FAMILY.check(
        problem(layout=""), FAMILY.default(problem())
    )
    prob = problem((64, 128, 1027))
    assert "padded fallback" in FAMILY.check(prob, FAMILY.default(prob))
    assert FAMILY.check(problem(), FAMILY.default(problem())) is None
    assert FAMILY.starting_points(problem()) and not FAMILY.starting_points(problem((8, 512, 1024)))
    points = FAMILY.library_points(problem())
    assert len(points) > 100 and all(FAMILY.check(problem(), p) is None for p in points)


def test_the_tile_order_is_a_run_time_lever_of_the_same_build(load):
    """Raster and swizzle are scheduler arguments: a point in another order asks for the very
    build the default's does (the library's, the compile cache's), and the library keeps one
    point per build, in CUTLASS's own order; the starting points try the other order."""
    prob = problem()
    default = FAMILY.default(prob)
    assert (default["RASTER"], default["SWIZZLE"]) == ("heuristic", 1)
    assert not {"RASTER", "SWIZZLE"} & set(FAMILY.build_params)
    _, built = load(prob, default)
    _, reordered = load(prob, {**default, "RASTER": "along_m", "SWIZZLE": 8})
    assert built == reordered
    points = FAMILY.library_points(prob)
    assert {(p["RASTER"], p["SWIZZLE"]) for p in points} == {("heuristic", 1)}
    starting = FAMILY.starting_points(prob)
    assert {**default, "RASTER": "along_n", "SWIZZLE": 8} in starting
    assert "SWIZZLE=3 is not one of" in FAMILY.check(prob, {**default, "SWIZZLE": 3})


def test_the_source_is_pasted_whole_and_the_flags_carry_the_point(load):
    prob = problem(dtype="fp16")
    params = {**FAMILY.default(prob), "TILE_N": 128, "SCHEDULE": "pingpong", "STORE": "pair"}
    source = FAMILY.render(prob, params)
    assert CUDA_SOURCE in source and f'CUTLASS = "{CUTLASS_PIN}"' in source
    assert source == FAMILY.render(prob, dict(reversed(list(params.items()))))
    _, lib = load(prob, params)
    flags = dict(f[2:].split("=", 1) for f in lib.flags if f.startswith("-DKF_"))
    assert flags == {
        "KF_ELEM": "1", "KF_TILE_M": "128", "KF_TILE_N": "128", "KF_TILE_K": "64",
        "KF_CLUSTER_M": "2", "KF_CLUSTER_N": "1", "KF_SCHEDULE": "1", "KF_SCHEDULER": "0",
        "KF_STAGES": "0", "KF_STORE": "0", "KF_ROW_SCALE": "0",
    }  # fmt: skip
    assert "-gencode=arch=compute_90a,code=sm_90a" in lib.flags and lib.headers == (CUTLASS_PIN,)
    folded = problem(layout=ROW_SCALE)
    _, lib = load(folded, FAMILY.default(folded))
    assert "-DKF_ROW_SCALE=1" in lib.flags
    _, lib = load(prob, FAMILY.default(prob))  # bulk stores: the cooperative default's
    assert "-DKF_STORE=2" in lib.flags


def test_the_declared_signatures_match_the_c_prototypes(load):
    module, _ = load(problem(), FAMILY.default(problem()))
    assert_declared_as_in_c(module, CUDA_SOURCE)


def test_the_kernel_gets_tensors_strides_and_stream_in_prototype_order(load):
    module, _ = load(problem(), {**FAMILY.default(problem()), "RASTER": "along_n", "SWIZZLE": 4})
    x, w, out = torch.zeros(64, 256), torch.zeros(256, 256), torch.zeros(64, 128)
    stream = types.SimpleNamespace(cuda_stream=1234)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module.torch.cuda, "current_stream", lambda device=None: stream)
        module._launch(x, w, None, out)
        (args,) = module._LIB.kf_swiglu.calls
        assert args[:4] == (x, w, None, out) and args[4:10] == (64, 128, 256, 256, 256, 128)
        assert args[10:12] == (4, 2)  # the tile order: swizzle, raster along N
        assert args[-3:] == (None, 0, 1234)
        assert module._LIB.kf_workspace_size.calls == [(64, 128, 256, 4, 2)]
        module._LIB.kf_swiglu.result, module._LIB.kf_last_error.result = 1, "misaligned"
        with pytest.raises(RuntimeError, match=r"misaligned \(code 1\)"):
            module._launch(x, w, None, out)
    assert len(module._LIB.kf_workspace_size.calls) == 1  # once per shape, not per call


def test_an_unaligned_k_takes_the_padded_path_and_stays_exact(load):
    """The padded path hands the kernel only aligned operands; the kernel is stood in for by
    the op's own math on what it is given."""
    prob = problem((9, 16, 13), dtype="fp16")
    module, _ = load(prob, FAMILY.default(prob))
    x, w = OP.make_inputs(prob, seed=4, device="cpu")
    seen = []

    def kernel(x_p, w_p, scale, out_p):
        assert module.fast_path_blocker(x_p, w_p, out_p) is None and scale is None
        seen.append(tuple(x_p.shape))
        out_p.copy_(OP.reference(prob.with_shape(9, 16, x_p.shape[1]), x_p, w_p))

    module._launch = kernel
    out = torch.full((9, 16), float("nan"), dtype=torch.float16)
    assert "x" in module.fast_path_blocker(x, w, out)
    module._run_padded(x, w, None, out)
    assert seen == [(9, 16)]
    torch.testing.assert_close(out.double(), OP.reference(prob, x, w), rtol=2e-3, atol=2e-3)


def test_run_refuses_cpu_tensors_with_a_clear_message(load):
    module, _ = load(problem(), FAMILY.default(problem()))
    x, w = torch.zeros(64, 256), torch.zeros(256, 256)
    with pytest.raises(TypeError, match="bf16 tensors only"):
        module.run(x, w, out=torch.zeros(64, 128))
    x, w = x.bfloat16(), w.bfloat16()
    with pytest.raises(RuntimeError, match="CUDA tensors"):
        module.run(x, w, out=torch.zeros(64, 128, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="no row scale"):
        module.run(x, w, torch.ones(64), out=torch.zeros(64, 128, dtype=torch.bfloat16))
    folded, _ = load(problem(layout=ROW_SCALE), FAMILY.default(problem()))
    with pytest.raises(TypeError, match="one float32 row scale"):
        folded.run(x, w, out=torch.zeros(64, 128, dtype=torch.bfloat16))


PAIR = {"STORE": "pair"}


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="builds with nvcc")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize(
    ("shape", "changes"),
    [
        ((2048, 2816, 1024), PAIR),
        ((33, 40, 65), PAIR),  # partial tiles, and the padded path on the same library
        ((512, 1024, 512), {"STORE": "quad"}),
        ((512, 1024, 512), {**PAIR, "TILE_M": 64, "CLUSTER_M": 1, "SCHEDULE": "pingpong"}),
        ((256, 4096, 3584), {**PAIR, "TILE_M": 256, "TILE_N": 128, "CLUSTER_M": 1, "CLUSTER_N": 2}),
        ((300, 2816, 4104), {**PAIR, "SCHEDULER": "streamk"}),  # split tiles, before the epilogue
        ((2048, 2816, 1024), {**PAIR, **ALONG_N}),  # the first case's build, in another order
        ((300, 2816, 4104), {**PAIR, "SCHEDULER": "streamk", "RASTER": "along_m", "SWIZZLE": 4}),
        ((2048, 2816, 1024, ROW_SCALE), PAIR),  # an RMSNorm folded in
        ((33, 40, 65, ROW_SCALE), {"STORE": "quad"}),
        # Bulk copies (the default): partial rows and columns, several tiles a CTA, split
        # tiles, 256 rows
        ((33, 40, 65), {}),
        ((2048, 2816, 1024, ROW_SCALE), {}),
        ((300, 2816, 4104), {"SCHEDULER": "streamk"}),
        ((520, 1000, 512), {"TILE_M": 256, "TILE_N": 128, "CLUSTER_N": 2, "CLUSTER_M": 1}),
    ],
)
def test_the_built_kernel_is_correct_on_the_gpu(shape, changes):
    from kernels.checking import check_source

    *shape, layout = shape if len(shape) == 4 else (*shape, "i8")
    prob = problem(tuple(shape), layout)
    params = {**FAMILY.default(prob), **changes}
    failures = check_source(OP, prob, FAMILY.render(prob, params), device="cuda")
    assert not failures
