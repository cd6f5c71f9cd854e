"""`python -m agents.model_job --record` wraps a result for benchmarks/results/: what ran,
where, and a summary whose numbers are the result's own (eager, launch-bound, CUDA graphs)."""

from __future__ import annotations

import json

from agents import model_job

PAIR = {"original_us": 200.0, "substituted_us": 100.0, "speedup": 2.0, "speedup_ci": [1.9, 2.1]}
RESULT = {
    "profile": {"total_us": 180.0, "forward_wall_us": 190.0, "gpu_busy": 180 / 190},
    "plan": {"items": [{"key": "rmsnorm/8x8/bf16", "share": 0.5, "budget_s": 10.0}]},
    "problems": [
        {
            "key": "rmsnorm/8x8/bf16",
            "family": "rmsnorm_rowwise",
            "speedup": 3.0,
            "kept": True,
            "elapsed_s": 9.0,
            "note": "",
        }
    ],
    "predicted_from_kernels": 1.5,
    "end_to_end": PAIR
    | {
        "compare": {"passed": True},
        "hits": {"rmsnorm/8x8/bf16": 2},
        "launch_bound": PAIR | {"speedup": 1.2},
        "graphed": {"ok": False, "error": "x" * 1000 + "capture failed"},
    },
}


def test_the_summary_copies_predicted_and_measured_speedups():
    summary = model_job.summarize(RESULT)
    assert summary["amdahl_predicted_from_kernels"] == 1.5
    assert summary["eager_offline"] == {
        "original_us": 200.0,
        "substituted_us": 100.0,
        "speedup": 2.0,
        "ci95": [1.9, 2.1],
    }
    assert summary["eager_launch_bound"]["speedup"] == 1.2
    assert summary["cuda_graphs"]["error"].endswith("capture failed")
    assert len(summary["cuda_graphs"]["error"]) == 400
    assert summary["outputs_match"] and summary["optimized"][0]["speedup"] == 3.0


def test_a_record_names_the_command_versions_and_date():
    entry = model_job.record(RESULT, "a run", ["m.py", "--budget", "60", "--record", "a run"])
    assert entry["command"] == "python3 -m agents.model_job m.py --budget 60 --record 'a run'"
    assert {"python", "torch", "triton", "device", "driver"} <= set(entry["versions"])
    assert entry["date"].endswith("UTC") and entry["result"] is RESULT
    json.dumps(entry)  # plain JSON
