"""benchmarks.replan on recorded model jobs: today's plan rule against real profiles."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.replan import recorded_roof, replan

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def _result(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())["result"]


def test_gptjs_recorded_profile_funds_its_bias_gelu_gemm_once_the_roof_is_known():
    first = _result("model_gptj_block_h200.json")  # planned before the plan read the roof
    roof = recorded_roof(_result("model_gptj_block_h200_roofplan.json"))
    assert roof is not None and roof.peak_gbps > 1000
    assert recorded_roof(first) is None
    without = [i.key for i in replan(first, None).funded]
    with_roof = [i.key for i in replan(first, roof).funded]
    # As recorded: the at-roof q/k/v GEMM took the 300 s (and reached 0.996x).
    assert without == [first["plan"]["items"][0]["key"]] == ["matmul/2048x4096x4096/bf16/NT"]
    assert with_roof == ["matmul/2048x16384x4096/bf16/NT+bias+gelu"]
