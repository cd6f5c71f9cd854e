"""benchmarks.model_standing: issue 25's table from recorded model jobs (CPU, no GPU)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.model_standing import standing


def _job(
    model: str,
    date: str,
    speedup: float,
    *,
    device: str = "H",
    replay: bool = False,
    package: float | None = None,
) -> dict[str, Any]:
    """A recorded job as benchmarks.model_job --record writes it: what the standing reads."""
    command = f"python3 -m benchmarks.model_job examples/models/{model}.py --budget 300"
    e2e: dict[str, Any] = {
        "speedup": speedup,
        "speedup_ci": [speedup - 0.01, speedup + 0.01],
        "faster": speedup - 0.01 > 1.0,
        "best_baseline": "compile_cudagraphs",
        "best_ours": "ours_compile",
        "rewrites": [],
        "ok": True,
    }
    if package is not None:  # the check took a change to the model's code too
        e2e["rewrites"] = [{"key": "attention/...", "where": ["self_attn"], "saves": "copies"}]
        e2e["package"] = {"way": "ours_compile", "speedup": package, "ok": True}
        e2e["package"]["speedup_ci"] = [package - 0.01, package + 0.01]
        e2e["package_faster"] = package - 0.01 > 1.0
    problems = [{"key": "k", "family": "f", "speedup": 1.3, "kept": True}]
    return {
        "date": date,
        "versions": {"device": device},
        "command": command + (" --replay earlier.json" if replay else ""),
        "result": {"end_to_end": e2e, "problems": problems},
    }


def test_each_models_latest_job_is_weighed_against_its_bar_and_replays_are_not_jobs():
    files = {  # out of date order: the latest job of a model counts, whatever the file order
        "decode_v2.json": _job("llama_decode", "2026-12-06 14:00 UTC", 1.16),
        "decode_v1.json": _job("llama_decode", "2026-11-24 22:07 UTC", 1.09),
        "decode_replay.json": _job("llama_decode", "2026-12-07 00:00 UTC", 1.01, replay=True),
        "block.json": _job("llama_block", "2026-12-06 14:10 UTC", 1.04),
        "vit.json": _job("vit_block", "2026-12-06 14:20 UTC", 0.99),
        "library.json": {"planned": 3, "built": 3},
    }
    result = standing(files)
    rows = {r["model"]: r for r in result["rows"]}
    assert rows["llama_decode"]["file"] == "decode_v2.json"  # not the later replay
    assert rows["llama_decode"]["meets_bar"]  # 1.16 >= 1.15
    assert rows["llama_block"]["shipped"] and not rows["llama_block"]["meets_bar"]  # < 1.05
    assert not rows["vit_block"]["shipped"] and not rows["vit_block"]["meets_bar"]
    assert rows["vit_block"]["check_failed"] is None
    assert result["meet_bar"] == 1 and result["shipped_losses"] == 0
    assert result["not_measured"] == ["qwen2_block", "gptj_block"]
    assert result["left_out"] == ["decode_replay.json", "library.json"]


def test_with_a_change_to_the_models_code_only_the_package_alone_counts():
    files = {
        "q.json": _job("qwen2_block", "2026-12-06 14:00 UTC", 1.06, package=1.04),
        "g.json": _job("gptj_block", "2026-12-06 14:00 UTC", 1.07, package=1.055),
    }
    rows = {r["model"]: r for r in standing(files)["rows"]}
    assert (
        rows["qwen2_block"]["speedup"] == 1.04 and rows["qwen2_block"]["with_code_change"] == 1.06
    )
    assert not rows["qwen2_block"]["meets_bar"]  # 1.06 with the change, 1.04 as shipped
    assert rows["gptj_block"]["meets_bar"]


def test_a_job_whose_check_died_is_below_its_bar_and_says_why():
    job = _job("llama_decode", "2026-12-06 14:00 UTC", 1.2)
    job["result"]["end_to_end"] = {"ok": False, "failure": "crash", "faster": False}
    (r,) = standing({"d.json": job})["rows"]
    assert r["check_failed"] == "crash" and r["speedup"] is None and not r["meets_bar"]


def test_jobs_of_two_devices_are_refused():
    files = {
        "a.json": _job("llama_decode", "2026-12-06 14:00 UTC", 1.2, device="H100"),
        "b.json": _job("llama_block", "2026-12-06 14:00 UTC", 1.1, device="H200"),
    }
    with pytest.raises(ValueError, match="more than one device"):
        standing(files)
