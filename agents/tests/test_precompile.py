"""Compiling ahead on the CPU (harness.precompile) and the compile cache by source hash, against
the real harness and its sandbox under Triton's interpreter.

The interpreter compiles nothing, so the cache-reuse test uses a candidate that writes into its
TRITON_CACHE_DIR the way Triton's compiler does, and records what it found there from earlier
runs: that is exactly what a compiled kernel in the cache would see."""

import json
import os

import pytest

from agents import Budget, OptimizeConfig, optimize
from agents.evaluator import HarnessEvaluator
from agents.tests.fakes import ListReporter
from harness import EvalConfig, evaluate, precompile
from harness.compile_cache import cache_key, keep_cache, key_dir, seed_cache
from harness.device import gpu_visible
from harness.results import Candidate, Verdict
from kernels import get_op, parse_problem

PROBLEM = parse_problem("rmsnorm", "32x256", "fp32")
ON_GPU = gpu_visible()  # the cache key follows the device: these run on a GPU box too
_ROWWISE = next(f for f in get_op("rmsnorm").families() if f.name == "rmsnorm_rowwise")
GOOD = _ROWWISE.render(PROBLEM, _ROWWISE.default(PROBLEM))
BROKEN = GOOD + "\nimport kf_no_such_module  # fails at import, as a kernel that does not compile\n"

# Writes one "compiled" file per run into its cache and lists the files earlier runs left.
CACHE_PROBE = """
import os, pathlib
_cache = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "probe"
_found = sorted(p.name for p in _cache.glob("run-*")) if _cache.is_dir() else []
_cache.mkdir(parents=True, exist_ok=True)
(_cache / f"run-{len(_found)}").write_text(",".join(_found))

def run(x, w, *, out):
    raise RuntimeError("probe only")
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "kf-cache"))


def probe_runs(candidate: Candidate) -> dict[str, str]:
    folder = key_dir(cache_key(candidate, gpu=ON_GPU)) / "triton" / "probe"
    return {p.name: p.read_text() for p in sorted(folder.glob("run-*"))}


def test_a_second_evaluation_of_the_same_source_starts_from_its_first_ones_cache():
    probe = Candidate(source=CACHE_PROBE)
    config = EvalConfig(quick=True)
    first = evaluate(probe, PROBLEM, config=config)
    assert first.compile.ok  # imported; run() raising is the candidate's own failure
    assert probe_runs(probe) == {"run-0": ""}

    evaluate(probe, PROBLEM, config=config)
    # The second run's child found the first run's file in its own (seeded) cache folder.
    assert probe_runs(probe) == {"run-0": "", "run-1": "run-0"}

    other = Candidate(source=CACHE_PROBE + "\n# another source, another key\n")
    evaluate(other, PROBLEM, config=config)
    assert probe_runs(other) == {"run-0": ""}, "a candidate reaches only its own key's cache"
    assert len(probe_runs(probe)) == 2


def test_a_precompile_runs_once_per_source_and_fills_the_cache_the_evaluation_reads():
    probe = Candidate(source=CACHE_PROBE)
    first = precompile(probe, PROBLEM)
    # run() raises on purpose: not a compile error, and not a reason to cache the source as done
    assert not first.ok and first.failure == "raised" and "probe only" in first.error
    assert first.cache_key == cache_key(probe, gpu=ON_GPU) and first.files == 1

    good = Candidate(source=GOOD)
    compiled = precompile(good, PROBLEM)
    assert compiled.ok and not compiled.cached and compiled.seconds > 0, compiled.error
    again = precompile(good, PROBLEM)
    assert again.ok and again.cached and again.seconds == 0.0

    evaluate(probe, PROBLEM, config=EvalConfig(quick=True))
    assert probe_runs(probe) == {"run-0": "", "run-1": "run-0"}


def test_a_precompile_failure_surfaces_as_a_compile_error_without_an_evaluation():
    broken = Candidate(source=BROKEN)
    result = precompile(broken, PROBLEM)
    assert not result.ok and result.failure == "compile"
    assert "kf_no_such_module" in result.error

    evaluator = HarnessEvaluator(OptimizeConfig(precompile=True, precompile_workers=2))
    try:
        evaluator.prefetch([broken, broken], PROBLEM)  # the same source is compiled once
        evaluation = evaluator.evaluate(broken, PROBLEM, timeout_s=120)
    finally:
        evaluator.close()
    assert evaluation.verdict is Verdict.COMPILE_ERROR and not evaluation.compile.ok
    assert "kf_no_such_module" in evaluation.compile.log
    assert "compiling ahead" in evaluation.error  # answered from the precompile
    stats = evaluator.compile_stats()
    assert stats["submitted"] == 1 and stats["rejected_early"] == 1 and stats["used"] == 1


def test_seeding_points_triton_group_files_at_the_copies(tmp_path):
    """Triton's __grp__ files hold absolute paths; a seeded copy must name its own files."""
    candidate = Candidate(source=GOOD)
    done = tmp_path / "first" / "triton-cache" / "ab12"
    done.mkdir(parents=True)
    (done / "k.cubin").write_bytes(b"\x7fELF")
    (done / "k.json").write_text("{}")
    paths = {"k.cubin": str(done / "k.cubin"), "k.json": str(done / "k.json")}
    (done / "__grp__k.json").write_text(json.dumps({"child_paths": paths}))
    assert keep_cache(tmp_path / "first", candidate, gpu=True) == 3

    second = tmp_path / "second"
    assert seed_cache(second, candidate, gpu=True) == 3
    group = json.loads((second / "triton-cache" / "ab12" / "__grp__k.json").read_text())
    seeded = second / "triton-cache" / "ab12"
    assert group["child_paths"] == {
        "k.cubin": str(seeded / "k.cubin"),
        "k.json": str(seeded / "k.json"),
    }
    assert seed_cache(tmp_path / "third", candidate, gpu=False) == 0  # another key: nothing

    # A group whose files are not all there (yet) is dropped: a clean miss, never a half kernel.
    (seeded / "k.cubin").unlink()
    (seeded / "__grp__k.json").write_text(json.dumps({"child_paths": paths}))
    seed_cache(second, candidate, gpu=True)  # copies k.cubin back, then fixes the group
    assert (seeded / "__grp__k.json").is_file()
    (done / "k.json").unlink()
    (key_dir(cache_key(candidate, gpu=True)) / "triton" / "ab12" / "k.json").unlink()
    fourth = tmp_path / "fourth"
    seed_cache(fourth, candidate, gpu=True)
    assert not (fourth / "triton-cache" / "ab12" / "__grp__k.json").exists()


def test_a_child_cannot_make_the_parent_copy_files_from_outside_its_folder(tmp_path):
    candidate = Candidate(source=GOOD)
    cache = tmp_path / "w" / "triton-cache"
    (cache / "x").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    os.symlink(secret, cache / "x" / "link.json")
    os.symlink(tmp_path, cache / "dirlink")
    (cache / "x" / "real.json").write_text("{}")
    assert keep_cache(tmp_path / "w", candidate, gpu=True) == 1
    kept = key_dir(cache_key(candidate, gpu=True)) / "triton"
    assert [p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()] == [
        "x/real.json"
    ]


@pytest.mark.slow
def test_the_graph_compiles_ahead_and_reports_throughput():
    reporter = ListReporter()
    config = OptimizeConfig(
        budget=Budget(wall_s=300, max_attempts=2),
        plateau=None,
        screen_batch=6,
        finalists=2,
        min_gain=-1.0,  # the round's second finalist goes to tier two too
        profile=False,
        full_protocol=False,
        precompile=True,
        precompile_workers=2,
    )
    result = optimize(PROBLEM, config, reporter)
    assert [e.index for e in reporter.events] == [0, 1]
    stats = result.compile
    # The round's first finalist (#0) is verified while its second (#1) compiles ahead.
    assert stats["submitted"] == 1 and stats["used"] == 1, stats
    assert stats["compiled"] == 1 and stats["workers"] == 2, stats
    marker = key_dir(cache_key(Candidate(source=reporter.events[1].source), gpu=ON_GPU))
    assert (marker / "precompiled.json").is_file()
    summary = result.to_dict()
    assert summary["candidates_per_wall_hour"] > 0 and summary["candidates_per_gpu_hour"] > 0
    assert summary["compile_s_saved"] == stats["compile_s_saved"] >= 0.0


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_visible(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_precompiled_kernel_is_loaded_not_compiled_again():
    problem = parse_problem("matmul", "2048x2048x2048", "bf16", "NN")
    family = get_op("matmul").families()[0]
    candidate = Candidate(source=family.render(problem, family.default(problem)))
    first = precompile(candidate, problem)
    assert first.ok and first.files > 0, first.error  # Triton wrote its cubins under the key
    (key_dir(first.cache_key) / "precompiled.json").unlink()  # force a second child
    second = precompile(candidate, problem)
    assert second.ok and not second.cached, second.error
    evaluation = evaluate(candidate, problem, config=EvalConfig(quick=True))
    assert evaluation.verdict is Verdict.PASSED, evaluation.error
    record = {
        "device": evaluation.device.name if evaluation.device else "",
        "first": first.to_dict(),
        "second": second.to_dict(),
        "evaluation_s": evaluation.duration_s,
    }
    if os.environ.get("KF_RESULTS_DIR"):
        out = os.path.join(os.environ["KF_RESULTS_DIR"], "precompile_gpu.json")
        with open(out, "w") as f:
            json.dump(record, f, indent=2)
    # Compiling is most of the first child's calls; the second only loads from the cache.
    assert second.compile_s < 0.5 * first.compile_s, record
