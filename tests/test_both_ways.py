"""Issue 24's measurement (benchmarks/both_ways.py): the brute force's pool takes the machine's
built library points, an agent's job starts cold but for the machine's facts and library, and
each side's outcome is read as a user gets it. The runs themselves need a GPU (a device run)."""

import os

import pytest

from benchmarks.both_ways import (
    AgentRun,
    BruteForce,
    Lane,
    ShapeResult,
    agent_side,
    brute_force_side,
    lanes_for,
    verify_durations,
)
from benchmarks.both_ways import seeded_cache as library_cache
from benchmarks.pools import pool_for, valid_points
from harness import cuda_ext, library
from kernels import parse_problem

PROBLEM = parse_problem("matmul", "256x2048x7168", "bf16", "NN")


@pytest.fixture
def built_library(tmp_path, monkeypatch):
    """A machine cache whose library built every CUTLASS bf16/NN stream-K configuration (the
    compile is nvcc's, which this machine has not: a stand-in records the outcomes)."""
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "machine"))
    monkeypatch.setattr(cuda_ext, "nvcc_version", lambda: "13.0.88")
    library.build(
        ("matmul/bf16/NN",),
        workers=2,
        compile_one=lambda item: library.Built(
            item.point["SCHEDULER"] == "streamk", 1.0, "x", "compile"
        ),
    )
    return tmp_path / "machine"


def test_the_brute_force_pool_is_the_starting_pool_then_every_built_library_point(built_library):
    start = pool_for("matmul", PROBLEM)
    with_library = pool_for("matmul", PROBLEM, library=True)
    built = library.points_for(PROBLEM)
    assert built and all(p["params"]["SCHEDULER"] == "streamk" for p in built)
    assert with_library == start + [(p["family"], p["params"]) for p in built]
    # Each one is a valid point of its family for this shape: the benchmark tries them all.
    valid = valid_points(PROBLEM, with_library)
    assert len(valid) == len(valid_points(PROBLEM, start)) + len(built)


def test_an_agents_cold_cache_holds_the_machines_facts_and_library_and_nothing_else(
    built_library, tmp_path
):
    machine = built_library
    (machine / "ceilings-gpu0.json").write_text("{}")
    (machine / "cublaslt-abc").mkdir()
    (machine / "cublaslt-abc" / "lib.so").write_text("lt")
    (machine / "cuda-ext" / "k1").mkdir(parents=True)
    (machine / "cuda-ext" / "k1" / "kf_cutlass.so").write_text("built")
    (machine / "trusted-triton" / "x").mkdir(parents=True)  # an earlier job's Triton kernels
    (machine / "evaluate-seconds.json").write_text("{}")

    dest = library_cache(machine, tmp_path / "job")
    assert (dest / "ceilings-gpu0.json").exists() and (dest / "cublaslt-abc" / "lib.so").exists()
    assert sorted(p.name for p in (dest / "library").iterdir()) == sorted(
        p.name for p in (machine / "library").iterdir()
    )
    so = dest / "cuda-ext" / "k1" / "kf_cutlass.so"
    assert os.path.samefile(so, machine / "cuda-ext" / "k1" / "kf_cutlass.so")  # a hard link
    assert not (dest / "trusted-triton").exists() and not (dest / "evaluate-seconds.json").exists()


def summary(outcome, torch_speedup):
    return {
        "event": "summary",
        "outcome": outcome,
        "outcome_reason": "why",
        "best": {"family": "matmul_cutlass_sm90"},
        "final_speedups": {"torch": torch_speedup, "cublaslt": 1.01, "compile": 1.02},
        "screened": 120,
        "fully_verified": 3,
        "time_s": {"compile_wait": 4.5},
        "families": {"matmul_cutlass_sm90": {"screened": 80}},
    }


def test_the_agent_exports_its_kernel_only_when_it_was_kept_else_pytorchs_one():
    kept = agent_side(summary("verified", 1.12), 241.0)
    assert kept.exported == 1.12 and kept.family == "matmul_cutlass_sm90"
    assert kept.screened == 120 and kept.fully_verified == 3 and kept.compile_wait_s == 4.5
    # Verified but not faster than every baseline: the user runs PyTorch.
    assert agent_side(summary("baseline", 1.12), 241.0).exported == 1.0
    assert agent_side({}, 5.0).exported == 1.0 and agent_side({}, 5.0).reason == "no summary"


def test_the_agents_full_verifications_are_read_from_its_tier_two_iterations():
    lines = [
        {"event": "started"},
        {"event": "iteration", "tier": "verify", "gpu_s": 31.84},
        {"event": "iteration", "tier": "check", "gpu_s": 3.0},  # an LLM's code: quick protocol
        {"event": "iteration", "tier": "verify", "gpu_s": 20.26},
        summary("verified", 1.03),
    ]
    assert verify_durations(lines) == [31.8, 20.3]
    run = agent_side(lines[-1], 200.0, verify_durations(lines))
    assert run.verify_s == [31.8, 20.3]


def test_the_brute_forces_side_is_its_verdicts_export():
    entry = {
        "name": "matmul/moe_dsv3_up_m256",
        "family": "matmul_cutlass_sm90",
        "verdict": {"exported": 1.07, "reason": "won"},
        "speedups": {"offline": {"torch": {"synced": 1.07}, "compile": {"synced": 1.04}}},
        "tried": [{}, {}, {}],
    }
    side = brute_force_side(entry, 100.0, 2)
    assert side.exported == 1.07 and side.speedups == {"torch": 1.07, "compile": 1.04}
    assert side.points == 3 and side.library_points == 2
    assert brute_force_side(None, 1.0, 0).exported == 1.0


@pytest.mark.parametrize(
    ("agent", "brute", "reaches"),
    [(1.10, 1.10, True), (1.00, 1.00, True), (1.08, 1.10, True), (1.00, 1.10, False)],
)
def test_the_agent_reaches_the_brute_force_within_noise(agent, brute, reaches):
    a = AgentRun(agent, None, {}, "", 1.0)
    b = brute_force_side({"verdict": {"exported": brute}}, 1.0, 0)
    result = ShapeResult("x", "1x1x1", a, b)
    assert result.agent_reaches_brute_force is reaches
    assert result.to_dict()["agent_reaches_brute_force"] is reaches
    assert ShapeResult("x", "1x1x1", a, None).agent_reaches_brute_force is None


def test_each_gpu_gets_its_own_share_of_the_cores_and_one_gpu_gets_them_all():
    assert lanes_for(["0"], list(range(16))) == [Lane("0")]
    lanes = lanes_for(["0", "1", "2", "3"], list(range(64)))
    assert [lane.gpu for lane in lanes] == ["0", "1", "2", "3"]
    assert lanes[1].cpus == ",".join(map(str, range(16, 32)))
    assert lanes[1].command(["python3"]) == ["taskset", "--cpu-list", lanes[1].cpus, "python3"]
    assert Lane("0").command(["python3"]) == ["python3"]


def test_shapes_are_spread_over_the_gpus_one_run_per_gpu_at_a_time():
    import threading
    import time

    from benchmarks.both_ways import spread
    from kernels.shapes import problem_set

    entries = problem_set("unseen")[:9]
    running: dict[str, int] = {}
    ran: list[tuple[str, str]] = []
    most = {"lanes": 0}
    lock = threading.Lock()

    def work(entry, lane):
        with lock:
            running[lane.gpu] = running.get(lane.gpu, 0) + 1
            assert running[lane.gpu] == 1, f"two runs at once on GPU {lane.gpu}"
            most["lanes"] = max(most["lanes"], sum(running.values()))
        time.sleep(0.05)
        with lock:
            running[lane.gpu] -= 1
            ran.append((entry.name, lane.gpu))

    spread(entries, [Lane("0"), Lane("1"), Lane("2")], work)
    assert sorted(name for name, _ in ran) == sorted(e.name for e in entries)
    assert most["lanes"] == 3  # the GPUs ran at once


def test_the_summary_gives_what_the_acceptance_reads(tmp_path):
    from benchmarks.both_ways import _write, exports

    a = [AgentRun(x, None, {}, "", 200.0, compile_wait_s=10.0) for x in (1.21, 1.0, 1.05)]
    assert exports([side.exported for side in a]) == {
        "shapes": 3,
        "exported_geomean": pytest.approx((1.21 * 1.05) ** (1 / 3)),
        "at_least_1_05": 2,
        "lowest": 1.0,
    }
    results = {str(i): ShapeResult(str(i), "1x1x1", side, None) for i, side in enumerate(a)}
    record: dict = {}
    _write(record, results, tmp_path)
    assert record["summary"]["agent"]["at_least_1_05"] == 2
    assert record["summary"]["agent_compile_wait_shares"] == [0.05, 0.05, 0.05]
    assert record["summary"]["compared"] == 0 and (tmp_path / "both_ways.json").exists()


def test_a_run_whose_environment_lacks_a_steps_module_stops_before_it_builds_anything(
    tmp_path, monkeypatch, capsys
):
    from benchmarks import both_ways, worker_scaling

    assert both_ways.missing_imports() == ""  # this checkout's environment has them all
    monkeypatch.setattr(both_ways, "STEP_MODULES", (*both_ways.STEP_MODULES, "kf_no_such_module"))
    monkeypatch.setattr(
        worker_scaling, "warm_machine", lambda gpu: pytest.fail("warmed a machine regardless")
    )
    assert both_ways.main(["--names", "moe_dsv3_up_m256", "--out", str(tmp_path / "out")]) == 2
    assert "No module named 'kf_no_such_module'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _recorded(date: str, device: str, rows: list[ShapeResult]) -> dict:
    return {"date": date, "versions": {"device": device}, "results": [r.to_dict() for r in rows]}


def test_the_standing_takes_each_shapes_latest_run_and_names_those_not_measured():
    from benchmarks.both_ways_standing import standing

    def row(name: str, agent: float, brute: float) -> ShapeResult:
        return ShapeResult(
            name, "1x1x1", AgentRun(agent, None, {}, "", 200.0, fully_verified=2),
            BruteForce(brute, None, {}, "", 90.0),
        )  # fmt: skip

    first, second = "matmul/odd_clip_mlp", "matmul/moe_mixtral_w2_m64"
    records = [  # out of date order: a rerun replaces the earlier run whatever the file order
        _recorded("2026-11-29 07:00 UTC", "H", [row(first, 1.10, 1.00)]),
        _recorded("2026-11-29 06:00 UTC", "H", [row(first, 0.90, 1.00), row(second, 1.0, 1.2)]),
    ]
    result = standing(records)
    assert result["measured"] == [second, first]  # in the set's order
    assert result["versions"] == [{"device": "H"}]
    latest = {r["name"]: r for r in result["rows"]}
    assert latest[first]["agent"]["exported"] == 1.10 and latest[first]["runs"] == 2
    assert len(result["not_measured"]) == 23 and first not in result["not_measured"]
    s = result["summary"]
    assert s["agent_reaches_brute_force"] == 1 and s["compared"] == 2  # 1.0 misses 1.2
    assert s["agent"]["at_least_1_05"] == 1 and s["agent_full_verifications"] == [2, 2]
    with pytest.raises(ValueError, match="more than one device"):
        standing([*records, _recorded("2026-11-30 00:00 UTC", "other", [])])
