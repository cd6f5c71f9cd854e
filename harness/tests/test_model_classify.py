"""Classification of profiled kernels into the ops of kernels/, from recorded profiler output:
a hand-made trace with every linkage rule, and (when present) the trace recorded on a GPU."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from harness.model.classify import group_records
from harness.model.trace import records_from_trace

FIXTURES = Path(__file__).parent / "fixtures"


def _x(cat, name, ts, dur, tid=1, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": 1,
        "tid": tid,
        "args": args,
    }


def _launch(ts, corr, kernel, kdur):
    return [
        _x("cuda_runtime", "cudaLaunchKernel", ts, 2, correlation=corr),
        _x("kernel", kernel, 1000 + ts, kdur, tid=7, correlation=corr),
    ]


LINEAR_DIMS = [[8, 16, 64], [128, 64], []]
BF16 = ["c10::BFloat16", "c10::BFloat16", ""]
MODULES = {
    "up": {
        "cls": "Linear",
        "input": [8, 16, 64],
        "dtype": "bfloat16",
        "params": {"weight": [128, 64]},
    },
    "norm": {
        "cls": "RMSNorm",
        "input": [8, 16, 64],
        "dtype": "bfloat16",
        "params": {"weight": [64]},
        "eps": 1e-6,
    },
    "odd_norm": {
        "cls": "MyRMSNorm",
        "input": [8, 16, 64],
        "dtype": "bfloat16",
        "params": {"weight": [64]},
        "eps": 1e-5,
    },
}


def _trace():
    ev = [_x("user_annotation", "kf::step#0", 0, 500)]
    # norm module: two elementwise kernels under aten ops -> one rmsnorm problem
    ev += [_x("user_annotation", "kf.module::norm", 10, 40)]
    ev += [
        _x(
            "cpu_op",
            "aten::pow",
            11,
            5,
            **{"Input Dims": [[8, 16, 64], []], "Input type": ["float", "Scalar"]},
        )
    ]
    ev += _launch(12, 1, "void at::native::vectorized_elementwise_kernel<4, pow>", 3.0)
    ev += [_x("cpu_op", "aten::mul", 20, 5)]
    ev += _launch(21, 2, "void at::native::vectorized_elementwise_kernel<4, mul>", 2.0)
    # nn.Linear module: aten::linear -> aten::mm -> a cuBLAS kernel
    ev += [_x("user_annotation", "kf.module::up", 60, 40)]
    ev += [_x("cpu_op", "aten::linear", 61, 30, **{"Input Dims": LINEAR_DIMS, "Input type": BF16})]
    ev += [
        _x(
            "cpu_op",
            "aten::mm",
            62,
            20,
            **{"Input Dims": [[128, 64], [64, 128]], "Input type": BF16[:2]},
        )
    ]
    ev += _launch(63, 3, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 20.0)
    # a bare aten::linear outside any module (functional call): classified from the aten op
    ev += [_x("cpu_op", "aten::linear", 110, 30, **{"Input Dims": LINEAR_DIMS, "Input type": BF16})]
    ev += _launch(111, 4, "nvjet_hsh_128x128_64x4_1x2_h_bz_coopA_NNT", 20.0)
    # attention: named, not optimizable
    ev += [_x("cpu_op", "aten::scaled_dot_product_attention", 150, 30)]
    ev += _launch(151, 5, "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", 40.0)
    # a module with another eps than the op's own: its problem names that eps
    ev += [_x("user_annotation", "kf.module::odd_norm", 200, 20)]
    ev += _launch(201, 6, "void at::native::reduce_kernel<512, 1>", 5.0)
    # a kernel launched from nothing we know
    ev += _launch(300, 7, "my_custom_kernel_v2", 10.0)
    return {"traceEvents": ev}


def test_it_ties_each_kernel_to_the_op_stack_that_launched_it():
    records, steps = records_from_trace(_trace())
    assert steps == 1 and len(records) == 7
    gemm = next(r for r in records if "xmma_gemm" in r.name)
    assert [f.name for f in gemm.stack] == [
        "kf::step#0",
        "kf.module::up",
        "aten::linear",
        "aten::mm",
    ]
    assert gemm.stack[2].input_dims == ((8, 16, 64), (128, 64), ())


def test_it_groups_kernels_into_problems_with_shares():
    records, steps = records_from_trace(_trace())
    groups = {g.label: g for g in group_records(records, MODULES, steps)}
    mm = groups["matmul/128x128x64/bf16/NT"]
    assert mm.calls == 2 and mm.time_us == 40.0  # the module and the bare aten::linear
    assert {mm.how} <= {"module", "aten"}
    norm = groups["rmsnorm/128x64/bf16"]
    assert norm.calls == 2 and norm.time_us == 5.0 and norm.how == "module"
    attention = next(g for g in groups.values() if g.op == "attention")
    assert attention.problem is None and attention.time_us == 40.0
    odd = groups["rmsnorm/128x64/bf16/eps=1e-05"]  # computed with the module's own eps
    assert odd.problem is not None and odd.problem.layout == "eps=1e-05" and odd.how == "module"
    unknown = groups["my_custom_kernel_v2"]
    assert unknown.op == "unknown" and unknown.share == pytest.approx(10.0 / 100.0)
    assert sum(g.share for g in groups.values()) == pytest.approx(1.0)


def test_it_uses_op_self_times_on_a_cpu_profile():
    trace = {
        "traceEvents": [
            _x("user_annotation", "kf::step#0", 0, 100),
            _x("cpu_op", "aten::linear", 1, 50, **{"Input Dims": LINEAR_DIMS, "Input type": BF16}),
            _x(
                "cpu_op",
                "aten::mm",
                2,
                40,
                **{"Input Dims": [[128, 64], [64, 128]], "Input type": BF16[:2]},
            ),
            _x("cpu_op", "aten::relu", 60, 10),
        ]
    }
    records, _ = records_from_trace(trace)
    by_name = {r.name: r.duration_us for r in records}
    assert by_name == {"aten::linear": 10.0, "aten::mm": 40.0, "aten::relu": 10.0}
    groups = group_records(records, {}, 1)
    assert groups[0].label == "matmul/128x128x64/bf16/NT" and groups[0].time_us == 50.0


GPU_TRACE = FIXTURES / "llama_block_h200_trace.json.gz"
GPU_MODULES = FIXTURES / "llama_block_h200_modules.json"


@pytest.mark.skipif(not GPU_TRACE.exists(), reason="GPU trace fixture not recorded")
def test_it_classifies_the_llama_block_recorded_on_a_gpu():
    trace = json.loads(gzip.decompress(GPU_TRACE.read_bytes()))
    modules = json.loads(GPU_MODULES.read_text())
    records, steps = records_from_trace(trace)
    assert steps == 3 and all(r.kind in ("kernel", "memcpy", "memset") for r in records)
    groups = group_records(records, modules, steps)
    labels = {g.label: g for g in groups}
    # SwiGLU's gate/up share a shape (two GEMMs, each with a cuBLAS memset first); q/k/v/o
    # share one; down has its own. Kernel names are cuBLAS's (nvjet_sm90_...).
    gate_up = labels["matmul/4096x2816x1024/bf16/NT"]
    assert gate_up.calls == pytest.approx(4)
    assert any(k.startswith("nvjet_sm90") for k in gate_up.kernels)
    assert "Memset (Device)" in gate_up.kernels
    assert labels["matmul/4096x1024x1024/bf16/NT"].calls == pytest.approx(4)
    assert labels["matmul/4096x1024x2816/bf16/NT"].calls == pytest.approx(1)
    # The eager RMSNorm is 8 kernels per call, 2 calls: one problem, the largest share.
    norm = labels["rmsnorm/4096x1024/bf16"]
    assert norm.calls == pytest.approx(16) and groups[0] is norm
    assert labels["rotary/4096x16x64/bf16"].calls == pytest.approx(14)
    assert any(g.op == "attention" and g.problem is None for g in groups)
    assert sum(g.share for g in groups) == pytest.approx(1.0)
    matmul_kernels = {k for g in groups if g.op == "matmul" for k in g.kernels}
    assert matmul_kernels, "cuBLAS/CUTLASS kernel names were recorded"


@pytest.fixture
def tf32_setting():
    """Sets the process's TF32 flag (what a model's code would set) and puts it back."""
    import torch

    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32

    def setting(value: bool) -> None:
        matmul.allow_tf32 = value

    yield setting
    matmul.allow_tf32 = before


@pytest.mark.parametrize("tf32", [True, False])
def test_an_fp32_linear_follows_the_models_tf32_setting(tf32_setting, tf32):
    import torch

    from harness.model.classify import describe, problem_for_module

    tf32_setting(tf32)
    info = describe(torch.nn.Linear(64, 48), torch.randn(2, 8, 64))
    op, problem, note = problem_for_module(info)
    assert op == "matmul"
    if tf32:  # as cuBLAS runs it for the model: TF32
        assert problem is not None and problem.key == "matmul/16x48x64/fp32/NT+bias+tf32"
    else:  # full fp32 stays cuBLAS's, and the plan says why
        assert problem is None and "optimized as TF32 only" in note


def test_an_fp32_linear_site_carries_tf32_where_the_model_allows_it(tf32_setting):
    import torch

    from harness.model.substitute import Substituting

    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU()).eval()
    x = torch.randn(4, 64)
    keys = {}
    for tf32 in (True, False):
        tf32_setting(tf32)
        torch._dynamo.reset()
        finder = Substituting(model)
        with torch.no_grad():
            torch.compile(model, backend=finder, dynamic=False)(x)
        keys[tf32] = [s.key for s in finder.sites if s.kind == "matmul"]
    assert keys == {True: ["matmul/4x48x64/fp32/NT+bias+tf32"], False: []}


def test_an_fp32_model_that_allows_tf32_is_compared_end_to_end_at_tf32s_margin(tf32_setting):
    import torch

    from harness.model.child import _compare

    ref, noise = torch.randn(64, 256), torch.randn(64, 256)
    got = ref + 1e-3 * ref.norm() / noise.norm() * noise  # relative L2 error 1e-3
    for tf32, passed in ((False, False), (True, True)):
        tf32_setting(tf32)
        assert _compare(ref, got, None)["passed"] is passed
