"""The model page's "where a forward's GPU time goes" chart data: the best baseline's and the
best way's kernels from the end-to-end check, each way's slowest on their own, the rest as one
segment, every way's total kept."""

from __future__ import annotations

from webapp.jobs.selectors import SPLIT_KERNELS, WayRow, kernel_split


def _way(name: str, label: str) -> WayRow:
    return WayRow(name, label, "", 1.0, None, None, True, "", None, True)


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"name": f"{prefix}{i}", "us_per_step": 100.0 - i, "calls_per_step": 1.0}
            for i in range(n)]  # fmt: skip


def test_each_way_is_one_bar_of_its_slowest_kernels_and_the_rest():
    cutlass = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int"
    shared = {"name": "cudnn_attention", "us_per_step": 45.0, "calls_per_step": 1.0}
    e2e = {
        "best_baseline": "compile",
        "best_ours": "ours_compile",
        "kernels": {
            "compile": [*_rows("nvjet_", 12), shared],
            "ours_compile": [
                {"name": cutlass + " A>", "us_per_step": 700.0, "calls_per_step": 1.0},
                {"name": cutlass + " B>", "us_per_step": 380.0, "calls_per_step": 1.0},
                shared,
            ],
        },
    }
    ways = {"compile": _way("compile", "torch.compile"), "ours_compile": _way("o", "ours")}
    split = kernel_split(e2e, ways)
    assert split["ways"] == ["torch.compile", "ours"]
    names = [s["name"] for s in split["segments"]]
    assert names[:SPLIT_KERNELS] == [f"nvjet_{i}" for i in range(SPLIT_KERNELS)]
    assert names[-1] == "every other kernel"
    # Each way's total is kept: the segments add up to its kernels' time.
    for i, way in enumerate(("compile", "ours_compile")):
        total = sum(r["us_per_step"] for r in e2e["kernels"][way])
        assert abs(sum(s["us"][i] for s in split["segments"]) - total) < 0.05
    labels = [s["label"] for s in split["segments"]]
    assert "CUTLASS kernel" in labels and "CUTLASS kernel (2)" in labels  # two, told apart
    assert all(len(label) <= 48 for label in labels)


def test_no_chart_without_both_tables():
    assert kernel_split({"best_baseline": "compile", "best_ours": "ours"}, {}) is None
    one = {"best_baseline": "compile", "best_ours": "ours", "kernels": {"compile": _rows("k", 2)}}
    assert kernel_split(one, {}) is None
