"""benchmarks.ab_ratios: per-shape ratios of two checkouts' benchmark reports, over repeats."""

from __future__ import annotations

import json

from benchmarks.ab_ratios import compare, main


def _report(path, ratios: dict[str, float], plain_us: float = 30.0) -> None:
    results = [
        {
            "name": name,
            "speedups": {"offline": {"torch": {"synced": r, "plain": r}}},
            "timings": {
                "offline": {
                    "candidate": {"median_us": plain_us, "plain_median_us": plain_us},
                    "torch": {"median_us": plain_us * r},
                }
            },
        }
        for name, r in ratios.items()
    ]
    results.append({"name": "failed", "speedups": {}, "timings": {}})  # failed its gate
    path.write_text(json.dumps({"results": results}))


def test_it_compares_medians_over_repeats_and_flags_shapes_outside_the_tolerance(tmp_path):
    _report(tmp_path / "public_before.json", {"a": 1.00, "b": 0.80})
    _report(tmp_path / "public_before_2.json", {"a": 1.02, "b": 0.82})
    _report(tmp_path / "public_before_3.json", {"a": 0.50, "b": 0.81})  # an outlier run
    _report(tmp_path / "public_after.json", {"a": 1.01, "b": 0.70})
    _report(tmp_path / "unseen_after.json", {"c": 1.0})  # no before side: not compared
    (tmp_path / "notes.json").write_text("{}")  # not a report of a side
    rows = {r.name: r for r in compare(tmp_path, tol_pct=3.0)}
    assert rows["a"].before == [1.00, 1.02, 0.50] and rows["a"].diff_pct == 1.0
    assert rows["a"].within is True  # the median ignores the outlier run
    assert rows["b"].within is False and rows["b"].diff_pct == -13.58
    assert rows["c"].within is None and "failed" not in rows


def test_it_writes_the_rows(tmp_path, capsys):
    _report(tmp_path / "public_before.json", {"a": 1.0})
    _report(tmp_path / "public_after.json", {"a": 1.1})
    out = tmp_path / "out.json"
    assert main([str(tmp_path), "--out", str(out)]) == 0
    [row] = json.loads(out.read_text())
    assert row["name"] == "a" and row["within"] is False and row["diff_pct"] == 10.0
    assert "within 3.0%: 0 of 1" in capsys.readouterr().out
