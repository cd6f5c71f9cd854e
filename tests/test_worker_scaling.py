"""benchmarks/worker_scaling.py's reading of a run (issue 19): which tasks one worker ran at
once, each GPU's busy share, and how far the torch.matmul times moved. The run itself needs
several GPUs (a device run); its plumbing was run on the CPU by hand (one CPU worker)."""

import pytest

from benchmarks.worker_scaling import (
    Run,
    TaskRun,
    busy_fractions,
    overlapping,
    seeded_cache,
    summary,
)


def task(problem, worker, started, finished, torch_us=None):
    return TaskRun(problem, worker, "done", started, finished, torch_us)


def test_it_finds_two_tasks_one_worker_ran_at_once_and_only_those():
    tasks = [
        task("a", "gpu0@h", 0.0, 10.0),
        task("b", "gpu1@h", 1.0, 9.0),  # another worker: in parallel is the point
        task("c", "gpu0@h", 10.0, 20.0),  # starts as the first ends: not at once
        task("d", "gpu0@h", 19.0, 25.0),  # starts before c ended
        task("e", "gpu0@h", None, None),  # never ran
    ]
    assert overlapping(tasks) == [("gpu0@h", "c", "d")]


def test_a_gpus_busy_share_counts_only_the_jobs_window_and_the_runs_gpus():
    samples = [(0.0, "0", 90.0), (1.0, "0", 0.0), (2.0, "0", 50.0), (9.0, "0", 100.0)]
    samples += [(1.0, "1", 0.0), (2.0, "1", 0.0), (1.5, "2", 100.0)]
    assert busy_fractions(samples, 1.0, 2.0, "0,1") == {"0": 0.5, "1": 0.0}
    assert busy_fractions(samples, 1.0, 2.0, "2") == {"2": 1.0}  # a run beside it used GPU 2


def test_the_summary_gives_throughput_and_the_timing_drift_against_one_worker():
    one = Run(
        "0", "done", 100.0, [task("a", "gpu0@h", 0, 50, 10.0), task("b", "gpu0@h", 50, 100, 20.0)]
    )
    two = Run(
        "0,1", "done", 52.0, [task("a", "gpu0@h", 0, 50, 10.1), task("b", "gpu1@h", 0, 52, 19.8)]
    )
    result = summary([one, two])
    assert result["throughput_0,1_vs_0"] == pytest.approx(100 / 52)
    assert result["torch_time_drift_0,1"]["per_problem"] == pytest.approx({"a": 1.01, "b": 0.99})
    assert result["overlaps"] == {"0": [], "0,1": []}
    # The second worker ended 2 s before the job: uneven lengths, not slower tasks.
    assert result["balance"] == {
        "0": {"task_s": 100.0, "idle_at_end_s": {"gpu0@h": 0.0}},
        "0,1": {"task_s": 102.0, "idle_at_end_s": {"gpu0@h": 2.0, "gpu1@h": 0.0}},
    }


def test_each_run_starts_from_the_machine_facts_only(tmp_path):
    machine = tmp_path / "machine"
    (machine / "cublaslt-2.11.0").mkdir(parents=True)
    (machine / "cublaslt-2.11.0" / "kf_cublaslt.so").write_text("built")
    (machine / "ceilings-H100-580-2.11.0.json").write_text("{}")
    (machine / "cuda-ext" / "k1").mkdir(parents=True)  # an earlier run's compiled candidate
    (machine / "screen-triton").mkdir()
    fresh = seeded_cache(machine, tmp_path / "run" / "kf-cache")
    assert sorted(p.name for p in fresh.iterdir()) == [
        "ceilings-H100-580-2.11.0.json",
        "cublaslt-2.11.0",
    ]
    assert (fresh / "cublaslt-2.11.0" / "kf_cublaslt.so").read_text() == "built"
