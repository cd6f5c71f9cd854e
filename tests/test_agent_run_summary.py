"""The acceptance JSON is built from the CLI's JSON lines, never typed in by hand."""

from benchmarks.agent_run_summary import summarize


def test_it_takes_throughput_and_the_final_verification_from_the_run():
    final_eval = {
        "verdict": "passed",
        "timings": {
            "regime": "offline",
            "protocol": "kf-timing-v1",
            "candidate": {"median_us": 100.0, "samples": 300},
            "baselines": {"torch": {"median_us": 150.0}, "compile": {"median_us": 160.0}},
            "speedups": {"torch": 1.5, "compile": 1.6},
            "speedup_ci": {"torch": [1.45, 1.55]},
            "noise": 0.02,
        },
        "stages": [{"name": "sanitize_memcheck", "passed": True, "cases": 1}],
        "checks": {"sanitizer": {"memcheck": {"errors": 0}}},
    }
    lines = [
        {
            "event": "started",
            "problem": {"op": "rmsnorm", "shape": [8, 256], "dtype": "bf16"},
            "budget": {"wall_s": 120.0},
        },
        {
            "event": "iteration",
            "index": 0,
            "verdict": "kept",
            "tier": "verify",
            "speedup": 1.2,
            "screen_speedup": 1.3,
            "gpu_s": 30.0,
        },  # fmt: skip
        {"event": "finished"},
        {
            "event": "summary",
            "evaluated": 1,
            "candidates_per_gpu_hour": 120.0,
            "candidates_per_wall_hour": 90.0,
            "compile_s_saved": 2.5,
            "verified": True,
            "outcome": "verified",
            "outcome_reason": "#0 rmsnorm_rowwise: 1.500x the fastest baseline (torch)",
            "screened": 400,
            "tiers": {
                "screen": {"candidates": 400, "per_gpu_hour": 12000.0},
                "verify": {"candidates": 1, "per_gpu_hour": 120.0},
            },  # fmt: skip
            "time_s": {"compile": 900.0, "screen": 120.0, "verify": 30.0, "profile": 0.0},
            "best": {"index": 0, "speedup": 1.2, "evaluation": final_eval},
        },
    ]
    out = summarize(
        lines, {"name": "NVIDIA H200"}, "benchmarks/agent_run_gpu.sh OUT x -- ...", 125.9
    )
    assert out["what"].endswith("rmsnorm 8x256 bf16") and out["device"]["name"] == "NVIDIA H200"
    assert out["candidates_per_gpu_hour"] == 120.0 and out["compile_s_saved"] == 2.5
    final = out["final_verification"]
    assert final["speedups"] == {"torch": 1.5, "compile": 1.6} and final["verified"] is True
    assert final["speedup_ci95"]["torch"] == [1.45, 1.55] and final["sanitizer"]["memcheck"]
    assert final["baseline_median_us"] == {"torch": 150.0, "compile": 160.0}
    assert [(a["speedup"], a["screen_speedup"]) for a in out["attempts_table"]] == [(1.2, 1.3)]
    assert out["screened"] == 400 and out["fully_verified"] == 1
    assert out["tiers"]["screen"]["per_gpu_hour"] == 12000.0 and out["time_s"]["compile"] == 900.0
    assert out["outcome"] == "verified" and out["command_wall_s"] == 125.9
    assert out["within_budget"] is True  # 125.9 s <= 1.05 x 120 s
