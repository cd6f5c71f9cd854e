"""benchmarks.points_probe: a family's default with changes, and with --starting the op's starting
points of that family, screened (here by the Triton interpreter: no GPU)."""

import json

import pytest

from benchmarks import points_probe
from harness.ops import resolve_op
from kernels.problem import Problem


@pytest.mark.parametrize(
    ("op", "shape", "layout", "family"),
    [
        # matmul keeps its starting points on the op: --starting crashed on its families
        ("matmul", "8x64x128", "NT", "matmul_weight_stream"),
        ("swiglu_gate", "8x32x64", "i8+rowscale", "swiglu_gate_weight_stream"),
    ],
)
def test_starting_adds_the_ops_starting_points_of_the_family(tmp_path, op, shape, layout, family):
    out = tmp_path / "probe.json"
    argv = [op, shape, "--dtype", "fp16", "--layout", layout, "--family", family, "--starting"]
    assert points_probe.main([*argv, "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    problem = Problem(op, tuple(int(d) for d in shape.split("x")), "fp16", layout)
    starting = [p for name, p in resolve_op(op).starting_points(problem) if name == family]
    screened = [e["params"] for e in record["screen"]["entries"]]
    assert starting and len(screened) > 1
    for partial in starting:  # each starting point was screened, on top of the default
        assert any(partial.items() <= params.items() for params in screened), partial
    assert all(e["family"] == family for e in record["screen"]["entries"])
