"""A task's search line on the job page (selectors.search_line), from the agent's SearchStats."""

from webapp.jobs.selectors import search_line

SEARCH = {
    "tiers": {
        "screen": {"candidates": 23, "per_gpu_hour": 3809.1},
        "verify": {"candidates": 2, "per_gpu_hour": 54.9},
    },
    "time_s": {"compile": 44.8, "screen": 15.1, "verify": 131.1, "profile": 19.2},
    "families": {
        "matmul_cutlass_sm90": {"screened": 7, "passed": 0, "best_speedup": None},
        "matmul_tiled": {"screened": 16, "passed": 16, "best_speedup": 0.8833},
    },
    "outcome_reason": "nothing beat the fastest baseline, PyTorch is kept",
}


def test_it_says_what_the_screen_saw_of_each_family():
    line = search_line(SEARCH)
    assert line.startswith("screened 23, 3,809/GPU-h · fully verified 2, 55/GPU-h · time:")
    assert "screen by family: matmul_cutlass_sm90 0/7, matmul_tiled 16/16 best 0.883x" in line
    assert line.endswith("PyTorch is kept")


def test_a_search_from_before_the_families_were_recorded_still_reads():
    old = {k: v for k, v in SEARCH.items() if k != "families"}
    assert "by family" not in search_line(old) and search_line({}) == ""
