"""qkv_rotary's layouts "i8+kv_heads=<n>" / "i8+bias+kv_heads=<n>" and its CUTLASS family on
the CPU: the head interleave, the op's reference and baseline for them, check() rules, rendering, the nvcc flags, the
declared C signatures against the C prototypes and the padded correctness path. The library is
the GPU edge: a stand-in object takes its place here; the GPU test at the end builds and runs
the real one."""

from __future__ import annotations

import json
import re
import shutil
import types

import pytest
import torch

from kernels import get_op
from kernels.epilogue_gemm import ALONG_N, PINGPONG
from kernels.ops.matmul.families.cutlass_sm90 import CUTLASS_PIN
from kernels.ops.qkv_rotary.families.cutlass_sm90 import (
    CUDA_SOURCE,
    CutlassSm90QkvRotary,
)
from kernels.ops.qkv_rotary.op import (
    deinterleave_heads,
    from_interleaved,
    interleave_heads,
    interleaved_layout,
    to_interleaved,
)
from kernels.problem import Problem, ProblemError
from kernels.row_scale import rms_scale
from kernels.tests.test_cutlass_family import (
    assert_declared_as_in_c,
    fake_library,
    fake_loader,
)

FAMILY = CutlassSm90QkvRotary()
REGISTER = {"EPILOGUE": "register"}  # the pairs layouts' other epilogue
OP = get_op("qkv_rotary")


def problem(shape=(256, 4, 2, 64, 512), layout="i8", dtype="bf16") -> Problem:
    """layout "i8[+bias][+rowscale]": the interleaved layout naming the shape's k/v heads."""
    if layout.startswith("i8"):
        parts = layout.split("+")
        layout = interleaved_layout(shape[2], bias="bias" in parts, rowscale="rowscale" in parts)
    return Problem("qkv_rotary", shape, dtype, layout)


@pytest.fixture
def load(monkeypatch):
    return fake_loader(monkeypatch, FAMILY, fake_library("kf_qkv_rotary", abi_version=3))


def test_the_head_interleave_pairs_each_half_heads_rows_8_apart_and_round_trips():
    d = 32
    w = torch.arange(2 * d * 3, dtype=torch.float32).reshape(2 * d, 3)  # two heads
    packed = interleave_heads(w, d)
    for head in range(2):
        for row in range(d):
            group, within = divmod(row, 16)
            source = group * 8 + within % 8 + (d // 2 if within >= 8 else 0)
            assert torch.equal(packed[head * d + row], w[head * d + source])
    assert torch.equal(deinterleave_heads(packed, d), w)
    bias = torch.arange(2 * d, dtype=torch.float32)
    assert torch.equal(interleave_heads(bias, d), packed[:, 0] / 3)


@pytest.mark.parametrize("layout", ["i8", "i8+bias"])
def test_the_i8_layouts_mean_what_the_standard_ones_do(layout):
    prob = problem((5, 4, 2, 32, 24), layout)
    standard = problem(prob.shape, layout.removeprefix("i8"))
    inputs = OP.make_inputs(prob, seed=1, device="cpu")
    assert [tuple(t.shape) for t in inputs] == [tuple(s) for s in OP.input_shapes(prob)]
    same = OP.make_inputs(standard, seed=1, device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(from_interleaved(prob, inputs), same, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(to_interleaved(prob, same), inputs, strict=True))
    assert torch.equal(OP.reference(prob, *inputs), OP.reference(standard, *same))


@pytest.mark.parametrize("layout", ["i8+rowscale", "i8+bias+rowscale"])
def test_a_rowscale_layout_is_an_rmsnorm_folded_into_the_projections(layout):
    """s * (x @ (w * g)^T) + b is what the norm, then the projections, compute: the op over x,
    the folded weight and s means the same as the "i8" layout over the normalized rows."""
    prob = problem((5, 4, 2, 32, 24), layout)
    plain = problem(prob.shape, layout.removesuffix("+rowscale"))
    x, w, cos, sin, *rest = OP.make_inputs(prob, seed=2, device="cpu")
    *bias, s = rest
    assert s.dtype == torch.float32 and torch.equal(s, rms_scale(x))
    assert [tuple(t.shape) for t in (x, w, cos, sin, *rest)] == OP.input_shapes(prob)
    g = torch.rand(24, dtype=torch.float64) + 0.5
    normed = x.double() * s.double()[:, None] * g
    want = OP.reference(plain, normed, w.double(), cos, sin, *bias)
    got = OP.reference(prob, x, w.double() * g, cos, sin, *bias, s)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(OP.reference(plain, x, w.double() * g, cos, sin, *bias), want)
    for case in OP.adversarial_inputs(prob, seed=0, device="cpu").values():
        assert [tuple(t.shape) for t in case] == OP.input_shapes(prob)


@pytest.mark.parametrize("case", ["random", "zero_one", "swap_halves"])
@pytest.mark.parametrize("layout", ["i8", "i8+bias"])
def test_the_i8_baseline_is_the_standard_one_on_the_same_inputs(case, layout):
    """One GEMM over the interleaved weight and a rotation pass over its columns compute what
    the three projections and their rotations do (within a bf16 rounding)."""
    prob = problem((5, 4, 2, 32, 24), layout)
    standard = problem(prob.shape, layout.removeprefix("i8"))
    inputs = (
        OP.make_inputs(prob, seed=2, device="cpu")
        if case == "random"
        else OP.adversarial_inputs(prob, seed=3, device="cpu")[case]
    )
    out, want = (torch.empty(5, 8 * 32, dtype=torch.bfloat16) for _ in range(2))
    out = OP.baseline_output(prob, *inputs, out=out)
    want = OP.baseline_output(standard, *from_interleaved(prob, inputs), out=want)
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)
    if case != "zero_one":  # there PyTorch's own roundings exceed the tolerance near zero
        tol = OP.tolerance(prob)
        torch.testing.assert_close(
            out.double(), OP.reference(prob, *inputs), rtol=tol.rtol, atol=tol.atol
        )


@pytest.mark.parametrize(
    ("layout", "error"),
    [
        ("i8", "not 'i8'"),
        ("i8+bias", "not 'i8+bias'"),
        ("i8+kv_heads=02", "i8[+bias][+rowscale]+kv_heads=<HKV>"),
        ("i8,kv_heads=2", "i8[+bias][+rowscale]+kv_heads=<HKV>"),
        ("i8+rowscale+bias+kv_heads=2", "not 'i8+rowscale+bias+kv_heads=2'"),
        ("i8+kv_heads=3", "other k/v heads than the shape's HKV=2"),
        ("i8+bias+kv_heads=4", "other k/v heads than the shape's HKV=2"),
    ],
)
def test_an_i8_layout_names_the_shapes_kv_heads(layout, error):
    with pytest.raises(ProblemError, match=re.escape(error)):
        OP.validate(Problem("qkv_rotary", (4, 4, 2, 32, 8), "bf16", layout))
    OP.validate(Problem("qkv_rotary", (4, 4, 2, 32, 8), "bf16", "i8+bias+kv_heads=2"))
    OP.validate(Problem("qkv_rotary", (4, 4, 2, 32, 8), "bf16", "i8+bias+rowscale+kv_heads=2"))


def test_the_i8_layouts_take_whole_groups_and_keep_the_heads_in_their_sweep():
    with pytest.raises(ProblemError, match="multiple of 16"):
        OP.validate(problem((4, 2, 1, 24, 8)))
    OP.validate(problem((4, 2, 1, 24, 8), ""))  # the standard layouts take any even D
    prob = problem((33, 28, 4, 128, 3584))
    assert {s.shape[1:4] for s in OP.sweep(prob)} == {(28, 4, 128)}


def test_check_takes_only_the_interleaved_layouts_and_aligned_k():
    assert "reads layout" in FAMILY.check(problem(layout="+bias"), FAMILY.default(problem()))
    prob = problem((64, 4, 2, 64, 1027))
    assert "padded fallback" in FAMILY.check(prob, FAMILY.default(prob))
    assert FAMILY.check(problem(), FAMILY.default(problem())) is None
    pingpong_streamk = {**FAMILY.default(problem()), **PINGPONG, "SCHEDULER": "streamk"}
    assert "cooperative schedule only" in FAMILY.check(problem(), pingpong_streamk)
    assert {**FAMILY.default(problem()), "SCHEDULER": "streamk"} in FAMILY.starting_points(
        problem()
    )
    assert FAMILY.starting_points(problem()) and not FAMILY.starting_points(
        problem((8, 4, 2, 64, 512))
    )
    points = FAMILY.library_points(problem())
    assert len(points) > 50 and all(FAMILY.check(problem(), p) is None for p in points)
    assert {p["EPILOGUE"] for p in points} == {"register"}


def test_the_tma_epilogue_is_gpt_js_rotary_alone_and_searched_there():
    gptj = Problem(
        "qkv_rotary", (2048, 16, 16, 256, 4096), "bf16", "pairs+rot=64+head_dim=256+kv_heads=16"
    )
    tma = {**FAMILY.default(gptj), "EPILOGUE": "tma"}
    assert FAMILY.check(gptj, tma) is None
    assert "pairs layouts" in FAMILY.check(problem(), {**FAMILY.default(problem()), **tma})
    odd = Problem("qkv_rotary", (64, 1, 1, 2, 64), "bf16", "pairs+rot=2+head_dim=2+kv_heads=1")
    assert "16-byte rows" in FAMILY.check(odd, {**FAMILY.default(odd), "EPILOGUE": "tma"})
    assert FAMILY.default(gptj) == tma and FAMILY.default(odd)["EPILOGUE"] == "register"
    assert FAMILY.default(problem())["EPILOGUE"] == "register"
    starts = FAMILY.starting_points(gptj)
    assert tma in starts and {**tma, **REGISTER} in starts
    assert len(starts) == len({json.dumps(p, sort_keys=True) for p in starts})
    assert not [p for p in FAMILY.starting_points(problem()) if p["EPILOGUE"] == "tma"]
    epilogues = {p["EPILOGUE"] for p in FAMILY.library_points(gptj)}
    assert epilogues == {"register", "tma"}


def test_the_source_is_pasted_whole_and_the_flags_carry_the_point(load):
    prob = problem(dtype="fp16", layout="i8+bias")
    params = {**FAMILY.default(prob), "SCHEDULER": "streamk"}
    source = FAMILY.render(prob, params)
    assert CUDA_SOURCE in source and f'CUTLASS = "{CUTLASS_PIN}"' in source
    assert "HEADS = 4" in source and "KV_HEADS = 2" in source
    module, lib = load(prob, params)
    flags = dict(f[2:].split("=", 1) for f in lib.flags if f.startswith("-DKF_"))
    assert flags == {
        "KF_ELEM": "1", "KF_TILE_M": "128", "KF_TILE_N": "256", "KF_TILE_K": "64",
        "KF_CLUSTER_M": "2", "KF_CLUSTER_N": "1", "KF_SCHEDULE": "0", "KF_SCHEDULER": "1",
        "KF_STAGES": "0", "KF_HEAD_DIM": "64", "KF_ROPE": "0", "KF_ROTARY_DIM": "64",
        "KF_ROW_SCALE": "0", "KF_EPILOGUE": "0",
    }  # fmt: skip
    folded = problem(layout="i8+bias+rowscale")
    _, lib = load(folded, FAMILY.default(folded))
    assert "-DKF_ROW_SCALE=1" in lib.flags
    gptj = Problem(
        "qkv_rotary", (64, 4, 4, 256, 512), "bf16", "pairs+rot=64+head_dim=256+kv_heads=4"
    )
    _, lib = load(gptj, FAMILY.default(gptj))
    flags = dict(f[2:].split("=", 1) for f in lib.flags if f.startswith("-DKF_"))
    assert (flags["KF_ROPE"], flags["KF_ROTARY_DIM"], flags["KF_HEAD_DIM"]) == ("1", "64", "256")
    assert flags["KF_EPILOGUE"] == "1"  # the TMA epilogue unless a point asks for registers
    _, lib = load(gptj, {**FAMILY.default(gptj), **REGISTER})
    assert "-DKF_EPILOGUE=0" in lib.flags
    assert_declared_as_in_c(module, CUDA_SOURCE)


def test_the_kernel_gets_tensors_sizes_and_stream_in_prototype_order(load):
    module, _ = load(problem(), FAMILY.default(problem()))
    n = (4 + 2 * 2) * 64
    x, w, out = torch.zeros(16, 512), torch.zeros(n, 512), torch.zeros(16, n)
    cos, sin, bias = torch.zeros(16, 32), torch.zeros(16, 32), torch.zeros(n)
    stream = types.SimpleNamespace(cuda_stream=1234)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module.torch.cuda, "current_stream", lambda device=None: stream)
        module._launch(x, w, cos, sin, bias, None, out)
        (args,) = module._LIB.kf_qkv_rotary.calls
        assert args[:7] == (x, w, bias, cos, sin, None, out)
        # m, n, k, D, q's and k's columns; strides of x, w, cos/sin, out; the tile order
        assert args[7:18] == (16, n, 512, 64, 6 * 64, 512, 512, 32, n, 1, 0)
        assert args[-3:] == (None, 0, 1234)
        module._LIB.kf_qkv_rotary.result, module._LIB.kf_last_error.result = 1, "misaligned"
        with pytest.raises(RuntimeError, match=r"misaligned \(code 1\)"):
            module._launch(x, w, cos, sin, None, None, out)


def test_an_unaligned_k_takes_the_padded_path_and_stays_exact(load):
    prob = problem((9, 2, 1, 32, 13), dtype="fp16", layout="i8+bias")
    module, _ = load(prob, FAMILY.default(prob))
    x, w, cos, sin, bias = OP.make_inputs(prob, seed=4, device="cpu")
    seen = []

    def kernel(x_p, w_p, cos_p, sin_p, bias_p, scale, out_p):
        assert module.fast_path_blocker(x_p, w_p, cos_p, sin_p, bias_p, out_p) is None
        assert scale is None
        seen.append(tuple(x_p.shape))
        wider = prob.with_shape(9, 2, 1, 32, x_p.shape[1])
        out_p.copy_(OP.reference(wider, x_p, w_p, cos_p, sin_p, bias_p))

    module._launch = kernel
    out = torch.full((9, 4 * 32), float("nan"), dtype=torch.float16)
    assert "x" in module.fast_path_blocker(x, w, cos, sin, bias, out)
    module._run_padded(x, w, cos, sin, bias, None, out)
    assert seen == [(9, 16)]
    want = OP.reference(prob, x, w, cos, sin, bias)
    torch.testing.assert_close(out.double(), want, rtol=2e-3, atol=2e-3)


def test_run_refuses_what_it_was_not_built_for_with_a_clear_message(load):
    module, _ = load(problem(), FAMILY.default(problem()))
    n = 8 * 64
    x, w, cos, sin = (
        torch.zeros(16, 512),
        torch.zeros(n, 512),
        torch.zeros(16, 32),
        torch.zeros(16, 32),
    )
    with pytest.raises(TypeError, match="bf16 tensors only"):
        module.run(x, w, cos, sin, out=torch.zeros(16, n))
    bf16 = [t.bfloat16() for t in (x, w, cos, sin)]
    half_tables = [t[:, :16] for t in bf16[2:]]
    with pytest.raises(
        ValueError, match=r"heads of 64, 64 of them rotated: out \(16, 512\), cos \(16, 16\)"
    ):
        module.run(*bf16[:2], *half_tables, out=torch.zeros(16, n, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="CUDA tensors"):
        module.run(*bf16, out=torch.zeros(16, n, dtype=torch.bfloat16))
    folded, _ = load(problem(layout="i8+rowscale"), FAMILY.default(problem()))
    with pytest.raises(TypeError, match="float32 row scale last"):
        folded.run(*bf16, out=torch.zeros(16, n, dtype=torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="builds with nvcc")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize(
    ("shape", "layout", "changes"),
    [
        ((2048, 16, 16, 64, 1024), "i8", {}),  # llama_block's
        ((2048, 28, 4, 128, 3584), "i8+bias", {"TILE_N": 128, "SCHEDULE": "pingpong"}),  # Qwen2
        ((2048, 28, 4, 128, 3584), "i8+bias", {"SCHEDULER": "streamk"}),  # its partial tiles
        ((300, 4, 2, 128, 4104), "i8+bias", {"SCHEDULER": "streamk"}),  # and ragged edges
        ((300, 4, 2, 128, 4104), "i8+bias", {"TILE_N": 64}),  # half a head a tile: pair by pair
        ((33, 2, 1, 32, 65), "i8+bias", {}),  # partial tiles, the padded path
        ((512, 8, 2, 128, 512), "i8", {"TILE_M": 64, "CLUSTER_M": 1, "SCHEDULE": "pingpong"}),
        # GPT-J-6B's rotary in the register epilogue (the TMA one is the pairs' default)
        ((2048, 16, 16, 256, 4096), "pairs+rot=64+head_dim=256+kv_heads=16", REGISTER),
        (
            (2048, 16, 16, 256, 4096),
            "pairs+rot=64+head_dim=256+kv_heads=16",
            {**ALONG_N, **REGISTER},
        ),
        ((300, 4, 2, 128, 4104), "i8+bias", {"SCHEDULER": "streamk", **ALONG_N}),
        (
            (300, 4, 4, 256, 4104),
            "pairs+rot=64+head_dim=256+kv_heads=4",
            {"TILE_N": 128, "SCHEDULE": "pingpong", **REGISTER},
        ),
        ((33, 2, 1, 32, 65), "pairs+rot=16+head_dim=32+kv_heads=1", REGISTER),  # padded path
        # GPT-J's rotary in CUTLASS's TMA-store epilogue: its shape, another order, ragged
        # edges under a half-head tile and stream-K, and the padded path
        ((2048, 16, 16, 256, 4096), "pairs+rot=64+head_dim=256+kv_heads=16", {"EPILOGUE": "tma"}),
        (
            (2048, 16, 16, 256, 4096),
            "pairs+rot=64+head_dim=256+kv_heads=16",
            {**ALONG_N, "EPILOGUE": "tma"},
        ),
        (
            (300, 4, 4, 256, 4104),
            "pairs+rot=64+head_dim=256+kv_heads=4",
            {**PINGPONG, "EPILOGUE": "tma"},
        ),
        (
            (300, 4, 4, 256, 4104),
            "pairs+rot=64+head_dim=256+kv_heads=4",
            {"SCHEDULER": "streamk", "EPILOGUE": "tma"},
        ),
        ((33, 2, 1, 32, 65), "pairs+rot=16+head_dim=32+kv_heads=1", {"EPILOGUE": "tma"}),
        # subtiles (32 columns) turned whole or not at all: each 128x256 tile holds 4 heads of
        # 64, the first 32 of each turned, so turned and plain subtiles alternate
        ((300, 4, 2, 64, 512), "pairs+rot=32+head_dim=64+kv_heads=2", {"EPILOGUE": "tma"}),
        ((2048, 16, 16, 64, 1024), "i8+rowscale", {}),  # llama_block's, its norm folded in
        ((2048, 28, 4, 128, 3584), "i8+bias+rowscale", {"TILE_N": 64}),  # Qwen2's, pair by pair
        ((33, 2, 1, 32, 65), "i8+bias+rowscale", {}),  # the padded path
    ],
)
def test_the_built_kernel_is_correct_on_the_gpu(shape, layout, changes):
    from kernels.checking import check_source

    prob = problem(shape, layout)
    params = {**FAMILY.default(prob), **changes}
    failures = check_source(OP, prob, FAMILY.render(prob, params), device="cuda")
    assert not failures


def test_the_pairs_layout_is_gpt_js_rotary_of_the_first_dims():
    prob = Problem("qkv_rotary", (9, 3, 1, 32, 40), "bf16", "pairs+rot=16+head_dim=32+kv_heads=1")
    OP.validate(prob)
    x, w, cos, sin = (t.double() for t in OP.make_inputs(prob, seed=1, device="cpu"))
    y = (x @ w.T).view(9, 5, 32)

    def rotate_every_two(t):  # GPT-J's, on tables repeated for each pair's two dims
        return torch.stack((-t[..., 1::2], t[..., ::2]), dim=-1).flatten(-2)

    c, s = (t.repeat_interleave(2, dim=-1)[:, None, :] for t in (cos, sin))
    rot = y[:, :4, :16]
    turned = torch.cat([rot * c + rotate_every_two(rot) * s, y[:, :4, 16:]], dim=-1)
    want = torch.cat([turned, y[:, 4:]], dim=1).reshape(9, -1)  # v's head as it is
    got = OP.reference(prob, *OP.make_inputs(prob, seed=1, device="cpu"))
    assert torch.allclose(got, want)
    assert FAMILY.serves(prob.layout) and FAMILY.check(prob, FAMILY.default(prob)) is None
    assert not [f for f in OP.families_for(prob) if f.name != FAMILY.name]
    with pytest.raises(ProblemError, match="even and at most D=32"):
        OP.validate(
            Problem("qkv_rotary", (9, 3, 1, 32, 40), "bf16", "pairs+rot=48+head_dim=32+kv_heads=1")
        )
