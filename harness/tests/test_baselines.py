"""The baselines' builds say where their time went (issue 24: a verification's budget)."""

from __future__ import annotations

import torch

import kernels
from harness.judge import baselines


def test_the_compile_baseline_records_where_its_build_went():
    # On the CPU the judge never builds it (`applicable`), but the build itself is the same:
    # Inductor's C++ backend stands in for its Triton one.
    problem = kernels.parse_problem("matmul", "32x48x64", "fp16", "NN")
    op = kernels.get_op("matmul")
    built = baselines.make(("compile",), op, problem, "cpu", None)
    assert not built.errors, built.errors

    a, b = op.make_inputs(problem, seed=3, device="cpu")
    out = torch.empty(op.output_spec(problem).shape)
    built.built["compile"](a, b, out=out)  # the compiled call returns its own tensor
    assert built.parts["compile_imports"] >= 0 and built.parts["compile_setup"] >= 0
    assert built.parts["compile_first_call"] > 0
    dynamo = {k: v for k, v in built.parts.items() if k.startswith("compile_part:")}
    assert "compile_part:_compile.compile_inner" in dynamo, built.parts
    assert built.seconds["compile"] >= built.parts["compile_first_call"]
