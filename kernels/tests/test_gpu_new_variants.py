"""This round's new problem variants on the GPU, in bf16 where the interpreter cannot check it:
grouped-query decode attention, prefill attention (grouped too) and the exact-GELU epilogue (fp32 matmuls as TF32:
harness/tests/test_gpu_tf32.py, judged by the harness's vendor rule)."""

import pytest
import torch

from kernels import all_ops
from kernels.checking import check_source
from kernels.problem import Problem

GPU = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")]


@pytest.mark.parametrize(
    ("shape", "kv"),
    [
        ((1, 32, 4, 1028, 128), 8),  # Llama-3-8B decode: 4 query heads a cached head
        ((2, 28, 16, 4096, 128), 4),  # Qwen2-7B, a 16-token draft: 7 a cached head
        ((1, 64, 1, 8192, 128), 8),  # Llama-3-70B, one token
    ],
)
def test_grouped_query_decode_attention_on_the_gpu(shape, kv):
    op = all_ops()["decode_attention"]
    problem = Problem("decode_attention", shape, "bf16", f"kv_heads={kv}")
    family = op.families()[0]
    for params in family.starting_points(problem)[:3]:
        for seed in (0, 1):
            source = family.render(problem, params)
            assert not check_source(op, problem, source, seed=seed, device="cuda"), params


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((2, 28, 1024, 128), "causal+kv_heads=4"),  # Qwen2-7B prefill: 7 query heads a k/v head
        ((4, 16, 512, 256), "causal"),  # GPT-J-6B: heads of 256
        ((64, 12, 197, 64), ""),  # ViT-B/16: an odd sequence, no mask
    ],
)
def test_prefill_attention_on_the_gpu(shape, layout):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    op = all_ops()["attention"]
    problem = Problem("attention", shape, "bf16", layout)
    # The baseline is SDPA's flash kernel (grouped heads through enable_gqa), not the math
    # fallback, which would make every speedup look larger than it is.
    inputs = op.make_inputs(problem, seed=0, device="cuda")
    out = torch.empty(op.output_spec(problem).shape, dtype=inputs[0].dtype, device="cuda")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        op.baseline(problem, *inputs, out=out)
    family = op.families()[0]
    for params in family.starting_points(problem)[:3]:
        source = family.render(problem, params)
        assert not check_source(op, problem, source, device="cuda"), params


@pytest.mark.parametrize("shape", [(12608, 3072, 768), (130, 768, 192), (17, 33, 65)])
def test_the_exact_gelu_epilogue_in_bf16_on_the_gpu(shape):
    op = all_ops()["matmul"]
    problem = Problem("matmul", shape, "bf16", "NT+bias+gelu_erf")
    for family in op.families():
        if family.backend != "triton":
            continue
        params = family.default(problem)
        if family.check(problem, params) is not None:
            continue
        failures = check_source(op, problem, family.render(problem, params), device="cuda")
        assert not failures, (family.name, failures)


STREAMS = [("swiglu_gate", (8, 11008, 4096), layout) for layout in ("", "i8", "i8+rowscale")] + [
    ("swiglu_gate", (1, 14336, 4096), "i8+rowscale"),  # Llama-3-8B, one token
    ("swiglu_gate", (33, 200, 1000), "i8"),  # odd sizes
    ("qkv_rotary", (8, 32, 32, 128, 4096), ""),  # Llama-2-7B's decode step
    ("qkv_rotary", (1, 28, 4, 128, 3584), "+bias"),  # Qwen2-7B, one token
    ("qkv_rotary", (33, 5, 1, 16, 1000), ""),  # odd sizes
]


@pytest.mark.parametrize(("op_name", "shape", "layout"), STREAMS)
def test_the_two_weight_streams_in_bf16_on_the_gpu(op_name, shape, layout):
    """swiglu_gate's and qkv_rotary's weight streams on decode shapes and odd ones: the first
    two starting points and a forced split, correct in bf16 and bit-identical call to call (the
    splits' partials are summed in a fixed order)."""
    from kernels.checking import run_candidate

    op = all_ops()[op_name]
    problem = Problem(op_name, shape, "bf16", layout)
    family = next(f for f in op.families() if f.name == f"{op_name}_weight_stream")
    points = family.starting_points(problem)[:2] + [{**family.default(problem), "SPLIT_K": 8}]
    for params in points:
        source = family.render(problem, params)
        assert not check_source(op, problem, source, device="cuda"), params
    inputs = op.make_inputs(problem, seed=0, device="cuda")
    first = run_candidate(op, problem, source, inputs)
    assert torch.equal(first, run_candidate(op, problem, source, inputs))
