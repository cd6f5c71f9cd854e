"""`python -m benchmarks.model_job --record` wraps a result for benchmarks/results/: what ran,
where, and a summary whose numbers are the result's own (eager, launch-bound, CUDA graphs)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import model_job


def _way(side, label, offline, server=None, compile_s=0.0, ok=True, error=""):
    v = {"side": side, "label": label, "ok": ok, "compile_s": compile_s}
    if error:
        return v | {"error": error}
    return (
        v
        | {"offline": {"median_us": offline}}
        | ({"server": {"median_us": server}} if server else {})
    )


RESULT = {
    "profile": {
        "total_us": 180.0,
        "forward_wall_us": 190.0,
        "gpu_busy": 180 / 190,
        "basis": "torch.compile",
        "compiled": {"ok": True, "compile_s": 6.8, "total_us": 150.0},
    },
    "plan": {"items": [{"key": "swiglu_gate/8x64x32/bf16", "share": 0.5, "budget_s": 10.0}]},
    "problems": [
        {
            "key": "swiglu_gate/8x64x32/bf16",
            "family": "swiglu_gate_dual",
            "speedup": 1.2,
            "kept": True,
            "elapsed_s": 9.0,
            "note": "",
        }
    ],
    "predicted_from_kernels": 1.1,
    "end_to_end": {
        "variants": {
            "eager": _way("baseline", "eager PyTorch", 300.0, 900.0),
            "compile": _way("baseline", "torch.compile (default)", 200.0, 700.0, 6.8),
            "compile_max_autotune": _way("baseline", "max-autotune", 0, error="x" * 900 + "!"),
            "ours_compile": _way("ours", "kernels + torch.compile", 160.0, 650.0, 3.1),
        },
        "best_baseline": "compile",
        "best_ours": "ours_compile",
        "baseline_us": 200.0,
        "ours_us": 160.0,
        "speedup": 1.25,
        "speedup_ci": [1.2, 1.3],
        "faster": True,
        "hits": {"swiglu_gate/8x64x32/bf16": 2},
        "message": "",
    },
}


def test_the_summary_copies_every_way_and_the_speedup_over_the_best_baseline():
    summary = model_job.summarize(RESULT)
    assert summary["amdahl_predicted_from_kernels"] == 1.1
    assert (
        summary["plan_basis"] == "torch.compile" and summary["compiled_kernel_us_per_step"] == 150
    )
    rows = {r["variant"]: r for r in summary["end_to_end"]}
    assert rows["compile"] == {
        "variant": "compile",
        "side": "baseline",
        "label": "torch.compile (default)",
        "offline_us": 200.0,
        "server_us": 700.0,
        "compile_s": 6.8,
        "outputs_match": True,
    }
    assert rows["compile_max_autotune"]["error"].endswith("!")
    assert len(rows["compile_max_autotune"]["error"]) == 400
    assert summary["best_baseline"] == "compile" and summary["best_ours"] == "ours_compile"
    assert summary["kernel_effects"] == []  # one kernel: nothing to weigh it against
    assert summary["speedup_over_best_baseline"] == 1.25 and summary["faster"]
    assert summary["optimized"][0]["speedup"] == 1.2


def test_a_record_names_the_command_versions_and_date():
    entry = model_job.record(RESULT, "a run", ["m.py", "--budget", "60", "--record", "a run"])
    assert entry["command"] == "python3 -m benchmarks.model_job m.py --budget 60 --record 'a run'"
    assert {"python", "torch", "triton", "device", "driver"} <= set(entry["versions"])
    assert entry["timing_protocol"] == "kf-timing-v2"  # its times came after a read flush
    assert entry["date"].endswith("UTC") and entry["result"] is RESULT
    json.dumps(entry)  # plain JSON


def test_a_replay_renders_the_recorded_kernels_again_and_checks_the_model_with_them():
    recorded = {
        "plan": {
            "items": [
                {"key": k, "problem": {"op": "rmsnorm", "shape": s, "dtype": "fp32", "layout": ""}}
                for k, s in (("rmsnorm/32x64/fp32", [32, 64]), ("rmsnorm/8x64/fp32", [8, 64]))
            ]
        },
        "problems": [
            {"key": "rmsnorm/32x64/fp32", "family": "rmsnorm_rowwise", "kept": True, "params": {}},
            {"key": "rmsnorm/8x64/fp32", "family": "rmsnorm_rowwise", "kept": False},
        ],
    }
    recorded["problems"][0]["params"] = {
        "MODE": "one_pass",
        "BLOCK_N": 64,
        "ROWS": 1,
        "NUM_WARPS": 1,
        "EVICT_FIRST": False,
        "PROGRAMS_PER_SM": 0,
        "STREAM_STORE": False,
    }
    model = (Path(__file__).parents[1] / "harness/tests/fixtures/models/tiny_mlp.py").read_text()
    result = model_job.replay({"result": recorded}, model, device="cpu", max_samples=5)
    e2e = result["end_to_end"]
    assert result["ok"], e2e["message"]
    assert e2e["hits"] == {"rmsnorm/32x64/fp32": 1}, "only the kept kernel, and it ran"
    assert [p["key"] for p in result["problems"]] == ["rmsnorm/32x64/fp32"]
    assert set(e2e["kernels"]) == {"eager", "ours"}
