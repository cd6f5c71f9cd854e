"""Issue 24's measurement on one machine: per shape of a named set, what the agent exports
against what brute force over the machine's warm kernel library finds.

    python -m benchmarks.both_ways --set unseen --names moe_dsv3_up,pre_dsv3_kva \\
        --budget 4m [--build-minutes 14] [--gpus 0,1,2,3] --out DIR

1. The library: with --library-archive, a library packed on another machine of the same nvcc
   (`python -m harness.library pack`, e.g. built on a CPU box: harness/library_archive.py) is
   taken first; then `python -m harness.library build` for the shapes' classes, up to
   --build-minutes (0: use what is built), its report kept (builds, CPU seconds, disk,
   failures).
2. Each shape: `python -m agents optimize` at --budget, as a cold job with a warm library: a
   fresh cache holding only the machine's facts (ceilings, the cuBLASLt build) and the
   library's builds, so nothing an earlier run compiled helps it. With several --gpus, one
   run per GPU at a time, each pinned to its share of the CPU cores (a worker per GPU).
3. Then each shape's brute force, `python -m benchmarks --library` on the machine's cache: the
   class's starting pool plus every built library point, gated and timed against every
   baseline (torch, cuBLASLt, torch.compile max-autotune). Run after all the agents, so the
   builds it adds never warm an agent's job.
4. DIR/both_ways.json: the build and, per shape, both outcomes side by side; DIR holds each
   run's own output (agent-NAME.jsonl, bench-NAME.json) and log (*.log), and log.log.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import results_record
from kernels.shapes import SET_NAMES, NamedProblem, problem_set

ROOT = Path(__file__).resolve().parents[1]
# The agent's export counts as reaching the brute force's when it is within this fraction of
# it: run-to-run spread of two separate timings of one kernel (wider under 20 us).
NOISE = 0.03


@dataclass(frozen=True)
class Side:
    """One way's outcome on a shape. `exported` is what a user gets against torch.matmul: the
    kernel's speedup when it beat every baseline, else 1.00 (PyTorch kept)."""

    exported: float
    family: str | None
    speedups: dict[str, float]  # the kept (or best verified) kernel vs each baseline
    reason: str
    wall_s: float


@dataclass(frozen=True)
class AgentRun(Side):
    screened: int = 0
    fully_verified: int = 0
    compile_wait_s: float = 0.0
    families: dict[str, Any] = field(default_factory=dict)  # what the screen saw per family
    verify_s: list[float] = field(default_factory=list)  # each full verification's GPU wall time


@dataclass(frozen=True)
class BruteForce(Side):
    points: int = 0  # tried (pool and library)
    library_points: int = 0


@dataclass(frozen=True)
class ShapeResult:
    name: str
    shape: str
    agent: AgentRun | None
    brute_force: BruteForce | None
    gpu: str = ""  # where the agent ran (the brute force may run on another of --gpus)

    @property
    def agent_reaches_brute_force(self) -> bool | None:
        if self.agent is None or self.brute_force is None:
            return None
        return self.agent.exported >= self.brute_force.exported * (1 - NOISE)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "agent_reaches_brute_force": self.agent_reaches_brute_force}


@dataclass(frozen=True)
class Lane:
    """One GPU and the CPU cores its runs are pinned to ("": every core)."""

    gpu: str
    cpus: str = ""

    def command(self, command: list[str]) -> list[str]:
        return ["taskset", "--cpu-list", self.cpus, *command] if self.cpus else command


def lanes_for(gpus: list[str], cores: list[int]) -> list[Lane]:
    """A lane per GPU, the cores shared out evenly (one GPU: every core)."""
    if len(gpus) == 1:
        return [Lane(gpus[0])]
    k = len(cores) // len(gpus)
    return [Lane(g, ",".join(map(str, cores[i * k : (i + 1) * k]))) for i, g in enumerate(gpus)]


def spread(entries: list[NamedProblem], lanes: list[Lane], work: Callable) -> None:
    """work(entry, lane) for every entry, one at a time per lane, the lanes at once."""
    free: queue.Queue[Lane] = queue.Queue()
    for lane in lanes:
        free.put(lane)

    def one(entry: NamedProblem) -> None:
        lane = free.get()
        try:
            work(entry, lane)
        finally:
            free.put(lane)

    with ThreadPoolExecutor(len(lanes)) as pool:
        list(pool.map(one, entries))


# What each step's command imports. Checked in a child before anything starts: a device
# call's environment that lacked langgraph let a 5-minute library build run, then every agent
# run died on its first import (2026-11-29).
STEP_MODULES = ("harness.library", "agents.optimize", "benchmarks.pools", "benchmarks.verdict")


def missing_imports() -> str:
    """Why this interpreter cannot import every step's modules (its error's last line), or
    "" when it can."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)",
            *STEP_MODULES,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode == 0:
        return ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {proc.returncode}"


def classes_of(entries: list[NamedProblem]) -> list[str]:
    from harness.library import class_of

    return sorted({class_of(e.problem) for e in entries})


def build_library(classes: list[str], minutes: float, out: Path) -> dict[str, Any]:
    report = out / "library_build.json"
    command = [sys.executable, "-m", "harness.library", "build", "--classes", ",".join(classes)]
    command += ["--minutes", str(minutes), "--out", str(report)]
    _run(command, out / "library_build.log", None, {})
    return json.loads(report.read_text()) if report.exists() else {"error": "no build report"}


def seeded_cache(machine: Path, dest: Path) -> Path:
    """A fresh cache with the machine's facts and its library's builds (hard links: the
    library's files are never written again, and a new build goes beside them)."""
    from benchmarks.worker_scaling import seeded_cache as facts_only
    from harness.compile_cache import cuda_ext_dir

    facts_only(machine, dest)
    if (machine / "library").is_dir():
        shutil.copytree(machine / "library", dest / "library")
    built = machine / cuda_ext_dir().name
    if built.is_dir():
        shutil.copytree(built, dest / built.name, copy_function=_link_or_copy)
    return dest


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def run_agent(entry: NamedProblem, budget: str, machine: Path, out: Path, lane: Lane) -> AgentRun:
    p = entry.problem
    name = _file_name(entry)
    cache = out / "caches" / name
    shutil.rmtree(cache, ignore_errors=True)
    seeded_cache(machine, cache)
    command = [sys.executable, "-m", "agents", "optimize", "--op", p.op]
    command += ["--shape", "x".join(map(str, p.shape)), "--dtype", p.dtype, "--layout", p.layout]
    command += ["--budget", budget, "--no-progress", "--checkpoint", ""]
    jsonl = out / f"agent-{name}.jsonl"
    started = time.monotonic()
    with open(jsonl, "w") as stdout:
        _run(lane.command(command), out / f"agent-{name}.log", stdout, env(lane, cache))
    wall = time.monotonic() - started
    shutil.rmtree(cache, ignore_errors=True)
    lines = [json.loads(x) for x in jsonl.read_text().splitlines() if x.strip()]
    summary: dict[str, Any] = next((d for d in reversed(lines) if d.get("event") == "summary"), {})
    return agent_side(summary, wall, verify_durations(lines))


def verify_durations(lines: list[dict[str, Any]]) -> list[float]:
    """Each screen finalist's full verification time (tier two, "verify"; the issue's bar: a
    25-s median), from the CLI's iteration lines. An LLM's code ("check") goes through the
    quick protocol first, so its times are not one protocol's."""
    return [
        round(float(d["gpu_s"]), 1)
        for d in lines
        if d.get("event") == "iteration" and d.get("tier") == "verify" and d.get("gpu_s")
    ]


def agent_side(summary: dict[str, Any], wall: float, verify_s: Sequence[float] = ()) -> AgentRun:
    """The agent's side from its CLI's summary line ({} when it wrote none)."""
    speedups = {k: float(v) for k, v in (summary.get("final_speedups") or {}).items()}
    kept = summary.get("outcome") == "verified"
    return AgentRun(
        exported=speedups.get("torch", 1.0) if kept else 1.0,
        family=(summary.get("best") or {}).get("family"),
        speedups=speedups,
        reason=str(summary.get("outcome_reason") or summary.get("stop_reason") or "no summary"),
        wall_s=round(wall, 1),
        screened=int(summary.get("screened") or 0),
        fully_verified=int(summary.get("fully_verified") or 0),
        compile_wait_s=float((summary.get("time_s") or {}).get("compile_wait", 0.0)),
        families=dict(summary.get("families") or {}),
        verify_s=list(verify_s),
    )


def run_brute_force(
    entry: NamedProblem, set_name: str, machine: Path, out: Path, lane: Lane
) -> BruteForce:
    name = _file_name(entry)
    report = out / f"bench-{name}.json"
    cores = len(lane.cpus.split(",")) if lane.cpus else os.cpu_count() or 4
    command = [sys.executable, "-m", "benchmarks", "--set", set_name, "--names", entry.name]
    command += ["--library", "--precompile", str(max(1, cores - 2))]
    command += ["--regimes", "offline", "--out", str(report)]
    started = time.monotonic()
    _run(lane.command(command), out / f"bench-{name}.log", None, env(lane, machine))
    wall = time.monotonic() - started
    results = json.loads(report.read_text())["results"] if report.exists() else []
    mine = next((r for r in results if r["name"] == entry.name), None)
    return brute_force_side(mine, wall, _library_count(entry, machine))


def brute_force_side(result: dict[str, Any] | None, wall: float, library_points: int) -> BruteForce:
    """The brute force's side from its shape's entry in `python -m benchmarks`' report."""
    if result is None:
        return BruteForce(1.0, None, {}, "no benchmark result", round(wall, 1))
    verdict = result.get("verdict") or {}
    offline = (result.get("speedups") or {}).get("offline") or {}
    return BruteForce(
        exported=float(verdict.get("exported") or 1.0),
        family=result.get("family") or None,
        speedups={k: float(v["synced"]) for k, v in offline.items()},
        reason=str(verdict.get("reason") or (result.get("error") or "")[-300:]),
        wall_s=round(wall, 1),
        points=len(result.get("tried") or []),
        library_points=library_points,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.both_ways", description=__doc__)
    parser.add_argument("--set", default="unseen", choices=SET_NAMES)
    parser.add_argument("--names", default="", help="comma-separated substrings of shape names")
    parser.add_argument("--budget", default="4m", help="the agent's budget per shape")
    parser.add_argument("--build-minutes", type=float, default=0.0)
    parser.add_argument("--library-archive", help="a packed library to take before the build")
    parser.add_argument(
        "--gpus",
        default=os.environ.get("CUDA_VISIBLE_DEVICES") or "0",
        help="GPUs to spread the shapes over, e.g. 0,1,2,3 (default: CUDA_VISIBLE_DEVICES)",
    )
    parser.add_argument("--no-brute-force", action="store_true", help="the agent side only")
    parser.add_argument("--out", required=True, help="a folder")
    args = parser.parse_args(argv)
    from benchmarks.worker_scaling import warm_machine

    if why := missing_imports():
        print(f"both_ways: this environment cannot run the steps: {why}", file=sys.stderr)
        return 2

    names = [n for n in args.names.split(",") if n]
    entries = [
        e
        for e in problem_set(args.set)
        if e.problem.op == "matmul" and (not names or any(n in e.name for n in names))
    ]
    lanes = lanes_for(args.gpus.split(","), sorted(os.sched_getaffinity(0)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = results_record.stamp("benchmarks.both_ways", argv or sys.argv[1:])
    record["shapes"] = [e.name for e in entries]
    record["lanes"] = [asdict(lane) for lane in lanes]
    # What a worker keeps from its first job (ceilings, the cuBLASLt build): every agent's cold
    # cache starts with it, as a worker's jobs do.
    started = time.monotonic()
    machine = warm_machine(lanes[0].gpu)
    record["machine_warm_up_s"] = round(time.monotonic() - started, 1)
    if args.library_archive:
        from harness.library_archive import unpack

        record["library_archive"] = unpack(Path(args.library_archive)).to_dict()
    if args.build_minutes > 0:
        record["library_build"] = build_library(classes_of(entries), args.build_minutes, out)
    results = {e.name: ShapeResult(e.name, _shape(e), None, None) for e in entries}
    lock = threading.Lock()

    def agent(e: NamedProblem, lane: Lane) -> None:
        run = run_agent(e, args.budget, machine, out, lane)
        with lock:
            results[e.name] = ShapeResult(e.name, _shape(e), run, None, lane.gpu)
            _write(record, results, out)

    def brute_force(e: NamedProblem, lane: Lane) -> None:
        run = run_brute_force(e, args.set, machine, out, lane)
        with lock:
            r = results[e.name]
            results[e.name] = ShapeResult(e.name, r.shape, r.agent, run, r.gpu)
            _write(record, results, out)

    spread(entries, lanes, agent)
    if not args.no_brute_force:
        spread(entries, lanes, brute_force)
    print(json.dumps(record.get("summary"), indent=1))
    return 0


def _write(record: dict[str, Any], results: dict[str, ShapeResult], out: Path) -> None:
    """Written after every run: a call cut short keeps what it measured."""
    record["results"] = [r.to_dict() for r in results.values()]
    record["summary"] = summary(record["results"])
    results_record.write(record, str(out / "both_ways.json"))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the issue's acceptance reads, from ShapeResult.to_dict() rows (one run's, or the
    latest of each shape over several recorded runs: benchmarks.both_ways_standing)."""
    compared = [r["agent_reaches_brute_force"] for r in rows]
    agents = [r["agent"] for r in rows if r["agent"]]
    return {
        "shapes": len(rows),
        "agent_reaches_brute_force": sum(c is True for c in compared),
        "compared": sum(c is not None for c in compared),
        "noise": NOISE,
        "agent": exports([a["exported"] for a in agents]),
        "brute_force": exports([r["brute_force"]["exported"] for r in rows if r["brute_force"]]),
        # The bar: under 10 % of a cold job's wall time waiting for compiles.
        "agent_compile_wait_shares": [
            round(a["compile_wait_s"] / a["wall_s"], 3) for a in agents if a["wall_s"]
        ],
        # The bars: a full verification's median under 25 s, >= 3 of them in a 4-minute run.
        # (runs recorded before 2026-11-29 have no verify_s: their durations are unknown)
        "agent_full_verifications": [a["fully_verified"] for a in agents],
        "agent_verify_s_median": _median([s for a in agents for s in a.get("verify_s", ())]),
    }


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def exports(values: list[float]) -> dict[str, Any]:
    """Of what is exported per shape: the geomean, how many export 1.05x or more, the lowest."""
    from benchmarks.run import geomean

    return {
        "shapes": len(values),
        "exported_geomean": geomean(values),
        "at_least_1_05": sum(v >= 1.05 for v in values),
        "lowest": min(values, default=None),
    }


def env(lane: Lane, cache: Path) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": lane.gpu, "KF_CACHE_DIR": str(cache)}


def _run(command: list[str], log_path: Path, stdout=None, extra_env=None) -> int:
    """The command with its stderr (and stdout, unless given) in its own log."""
    print(f"{time.strftime('%H:%M:%S')} start: {log_path.name}", flush=True)
    with open(log_path, "a") as log:
        log.write(f"== {time.strftime('%H:%M:%S')} {' '.join(command)}\n")
        log.flush()
        proc = subprocess.run(
            command,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=stdout or log,
            stderr=log,
            env={**os.environ, **(extra_env or {})},
        )
        log.write(f"== exit {proc.returncode} at {time.strftime('%H:%M:%S')}\n")
    print(f"{time.strftime('%H:%M:%S')} exit {proc.returncode}: {log_path.name}", flush=True)
    return proc.returncode


def _library_count(entry: NamedProblem, machine: Path) -> int:
    from harness import library

    manifest = machine / "library" / library.manifest_path().name
    return len(library.points_for(entry.problem, manifest=manifest))


def _shape(entry: NamedProblem) -> str:
    return "x".join(map(str, entry.problem.shape))


def _file_name(entry: NamedProblem) -> str:
    return entry.name.replace("/", "_")


if __name__ == "__main__":
    raise SystemExit(main())
