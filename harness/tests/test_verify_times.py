"""This machine's evaluation durations, kept across runs for the first reserve (CPU only)."""

import pytest

from harness import verify_times


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "kf-cache"))


def test_the_estimate_is_the_median_of_the_machines_recent_durations():
    assert verify_times.typical("full") is None
    for seconds in (46.5, 52.0, 55.8):
        verify_times.record("full", seconds)
    verify_times.record("quick", 20.0)
    assert verify_times.typical("full") == 52.0
    assert verify_times.typical("quick") == 20.0


def test_only_the_most_recent_are_kept_and_nonsense_is_not():
    for seconds in [10.0] * verify_times.KEEP + [50.0] * (verify_times.KEEP // 2 + 1):
        verify_times.record("full", seconds)
    verify_times.record("full", 0.0)
    verify_times.record("full", float("nan"))
    assert verify_times.typical("full") == 50.0  # the older tens fell out


def test_a_damaged_file_is_an_unknown_machine_and_the_next_record_repairs_it(tmp_path):
    path = tmp_path / "kf-cache" / "evaluate-seconds.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert verify_times.typical("full") is None
    verify_times.record("full", 47.0)
    assert verify_times.typical("full") == 47.0
