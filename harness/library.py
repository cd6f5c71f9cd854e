"""The kernel library of this machine: every build of the families that name their build
parameters, compiled once ahead of any job (issue 24).

A CUTLASS configuration takes the problem's sizes at run time, so it compiles once per
(configuration, problem class, toolkit), not per shape or per point: `build()` compiles each
`Family.library_points` of each problem class (dtype, layout and epilogue) through the same
trusted compile path as the screen and the precompile (`harness.precompile`: a sandboxed child
imports our render, which builds its shared library into the trusted compile cache), many at
once on the CPU cores, and records each outcome in a manifest beside the cache. A search then
screens the library's points for its problem first (agents/nodes/planner.py): they cost no
compile, only their screen.

The manifest is per nvcc version (a build is only good for the toolkit that made it) and each
entry keeps the sha256 of the render it compiled, so a changed family template reads as not
built rather than as a stale build. It is written after every build: a build cut short keeps
what it made, and the next one goes on from there.

A machine with nvcc and no GPU builds the CUDA C++ families too (nvcc only, nothing runs), and
`pack` / `unpack` carry what it built to GPU machines of the same nvcc
(harness/library_archive.py).

    python -m harness.library build [--classes matmul/bf16/NN,...] [--workers N] [--minutes M]
    python -m harness.library status
    python -m harness.library pack OUT.tar.xz | unpack ARCHIVE
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kernels.problem import Family, Problem

# The classes a GPU worker builds when it starts: what models and shape sets mostly ask for
# (torch's Linear is x @ W.T: layout NT), with the epilogues a model job's fusion sites take
# (bias + GELU in both forms, residual adds, SwiGLU's gate): a model job's problems otherwise
# met a cold library, where the agent screened 2 CUTLASS points of a 198 s slice and a
# CUTLASS 1.184x arrived too late to verify (model_gptj_block_h200_v2.json). The classes are
# built in turn, each with its leaders first; bf16 (what models run) before fp16.
DEFAULT_CLASSES = (
    "matmul/bf16/NT",
    "matmul/bf16/NN",
    "swiglu_gate/bf16/i8",
    "swiglu_gate/bf16/i8+rowscale",  # the same GEMM with the RMSNorm before it folded in
    "matmul/bf16/NT+bias+gelu",
    "matmul/bf16/NT+bias+gelu_erf",
    "matmul/bf16/NT+res",
    "matmul/bf16/NT+bias+res",
    "matmul/bf16/NT+bias",
    # Prefill q/k/v with the RMSNorm before them folded in, at head dim 128 (Llama-3, Mistral,
    # Qwen2 with its biases: their builds are the same), as model jobs make them
    "qkv_rotary/bf16/i8+rowscale+head_dim=128",
    "matmul/fp16/NT",
    "matmul/fp16/NN",
)
# A shape every library point of the op accepts: builds do not depend on it, renders name it.
# swiglu_gate's library is its CUTLASS family's, for layouts i8 and i8+rowscale
# (`--classes swiglu_gate/bf16/i8`); qkv_rotary's is its CUTLASS family's too, a class per
# head dim, rope and folded norm (its Op.library_layout: "i8[+rowscale]+head_dim=<D>",
# "pairs+rot=<R>+head_dim=<D>"), whatever the model's heads and biases.
REPRESENTATIVE_SHAPE = {
    "matmul": (4096, 4096, 4096),
    "swiglu_gate": (4096, 14336, 4096),
    "qkv_rotary": (4096, 32, 8, 128, 4096),  # the class's head dim takes D's place
}


@dataclass(frozen=True)
class Entry:
    """One build in the manifest."""

    family: str
    problem_class: str  # "matmul/bf16/NN"
    params: dict[str, Any]  # the family's build parameters only
    ok: bool
    seconds: float  # the compile child's wall time
    render_sha256: str  # of the render that was compiled (a changed template: not built)
    error: str = ""
    built_at: str = ""
    # Why it failed: "compile" (nvcc refused it: the same render fails again) or what the
    # sandbox said ("timeout", "crash", ...: tried again by the next build).
    failure: str = ""


@dataclass(frozen=True)
class Planned:
    family: Family
    problem: Problem  # the class's representative problem
    point: dict[str, Any]

    @property
    def key(self) -> str:
        return entry_key(self.family, class_of(self.problem), self.point)

    def render_sha256(self) -> str:
        return hashlib.sha256(self.family.render(self.problem, self.point).encode()).hexdigest()


@dataclass(frozen=True)
class BuildReport:
    planned: int
    already: int  # built before this run (and still current)
    built: int
    failed: int
    left: int  # not tried: the time ran out
    cpu_s: float  # compile children's wall time, summed
    wall_s: float
    disk_bytes: int  # the compile cache's size after the build
    failures: dict[str, str]  # entry key -> the first lines of its error

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def class_of(problem: Problem) -> str:
    """The library class whose builds serve the problem: "op/dtype/library layout"."""
    from harness.ops import resolve_op

    return f"{problem.op}/{problem.dtype}/{resolve_op(problem.op).library_layout(problem)}"


def entry_key(family: Family, problem_class: str, point: dict[str, Any]) -> str:
    built = {name: point[name] for name in family.build_params}
    return json.dumps([family.name, problem_class, built], sort_keys=True)


def representative(problem_class: str) -> Problem:
    from harness.ops import resolve_op

    op, dtype, layout = (problem_class.split("/") + ["", ""])[:3]
    if op not in REPRESENTATIVE_SHAPE:
        raise ValueError(f"no library for op {op!r} (known: {sorted(REPRESENTATIVE_SHAPE)})")
    return resolve_op(op).library_problem(REPRESENTATIVE_SHAPE[op], dtype, layout)


def planned(classes: tuple[str, ...] = DEFAULT_CLASSES) -> list[Planned]:
    """Every build of every class, the classes taken in turn: a whole class takes ~20 min of a
    16-core host (53 CPU-s a CUTLASS build on an H200's host, both_ways_h200_2shapes.json), and
    a model's Linear (NT) must not wait for all of NN. Within a class, the builds of the op's
    measured starting points first, then nearest each family's default: a build cut short
    (a worker just started, `--minutes`) has the leaders."""
    from harness.ops import resolve_op

    per_class = []
    for problem_class in classes:
        problem = representative(problem_class)
        if class_of(problem) != problem_class:  # builds no problem's lookup would find
            raise ValueError(
                f"{problem_class} is not a library class: its problems' is {class_of(problem)}"
            )
        op = resolve_op(problem.op)
        op.validate(problem)
        items = [
            Planned(family, problem, p)
            for family in op.families()
            for p in family.library_points(problem)
        ]
        leaders = _leader_builds(op, problem)
        items.sort(key=lambda i: i.key not in leaders)  # stable: nearest the default next
        per_class.append(items)
    return [item for turn in itertools.zip_longest(*per_class) for item in turn if item is not None]


def _leader_builds(op: Any, problem: Problem) -> set[str]:
    """Entry keys of the builds the op's starting points for this problem would use."""
    families = {f.name: f for f in op.families()}
    keys = set()
    for name, partial in op.starting_points(problem):
        family = families.get(name)
        if family is not None and family.build_params:
            point = {**family.default(problem), **partial}
            keys.add(entry_key(family, class_of(problem), point))
    return keys


# ------------------------------------------------------------------ the manifest


def manifest_path() -> Path:
    from harness.cuda_ext import nvcc_version
    from harness.device import cache_dir

    return cache_dir() / "library" / f"manifest-nvcc-{nvcc_version()}.json"


def load(path: Path | None = None) -> dict[str, Entry]:
    path = path or manifest_path()
    try:
        return from_json(path.read_text())
    except (OSError, ValueError):
        return {}


def from_json(text: str | bytes) -> dict[str, Entry]:
    """A manifest's entries from its JSON (a list of entries, each with its key)."""
    return {e["key"]: Entry(**{k: v for k, v in e.items() if k != "key"}) for e in json.loads(text)}


def to_json(entries: dict[str, Entry]) -> str:
    return json.dumps([{"key": k, **asdict(e)} for k, e in entries.items()], indent=0)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time across processes (two workers of one machine may build)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _record(path: Path, key: str, entry: Entry) -> None:
    with _locked(path):
        entries = load(path)
        entries[key] = entry
        _write(path, entries)


def adopt(entries: dict[str, Entry], path: Path | None = None) -> int:
    """Takes another machine's builds of this nvcc version (harness/library_archive.py) into
    this machine's manifest, keeping what this one built itself; returns how many it took."""
    path = path or manifest_path()
    with _locked(path):
        mine = load(path)
        taken = {k: e for k, e in entries.items() if e.ok and not (k in mine and mine[k].ok)}
        _write(path, {**mine, **taken})
    return len(taken)


def _write(path: Path, entries: dict[str, Entry]) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(to_json(entries))
    os.replace(tmp, path)


def is_built(entries: dict[str, Entry], item: Planned) -> bool:
    entry = entries.get(item.key)
    return entry is not None and entry.ok and entry.render_sha256 == item.render_sha256()


def _failed(entries: dict[str, Entry], item: Planned) -> bool:
    """This very render failed to compile before (a changed template, a timeout or a crash
    is tried again)."""
    entry = entries.get(item.key)
    return (
        entry is not None
        and not entry.ok
        and entry.failure == "compile"
        and entry.render_sha256 == item.render_sha256()
    )


# ------------------------------------------------------------------ building


@dataclass(frozen=True)
class Built:
    """One build's outcome."""

    ok: bool
    seconds: float
    error: str = ""
    failure: str = ""  # "" when ok; "compile", or the sandbox's "timeout", "crash", ...


# The real one compiles through harness.precompile; tests give a stand-in.
Compile = Callable[[Planned], Built]


def _precompile(item: Planned) -> Built:
    from harness.config import EvalConfig
    from harness.precompile import precompile
    from harness.results import Backend, Candidate

    source = item.family.render(item.problem, item.point)
    candidate = Candidate.of_render(
        source, Backend.of_family(item.family.backend), item.family.name, item.point
    )
    result = precompile(
        candidate, item.problem, config=EvalConfig(quick=True), build_without_gpu=True
    )
    return Built(result.ok, result.compile_s or result.seconds, result.error, result.failure)


def build(
    classes: tuple[str, ...] = DEFAULT_CLASSES,
    *,
    workers: int | None = None,
    deadline_s: float | None = None,
    retry_failed: bool = False,
    compile_one: Compile | None = None,
    progress: Callable[[str], None] | None = None,
    manifest: Path | None = None,
) -> BuildReport:
    """Build what the manifest does not hold yet, `workers` at a time (every usable core
    less two); nothing new starts after `deadline_s` seconds."""
    from harness.device import usable_cpus

    started = time.monotonic()
    path = manifest or manifest_path()
    compile_one = compile_one or _precompile
    entries = load(path)
    items = planned(classes)
    todo = [
        i for i in items if not is_built(entries, i) and (retry_failed or not _failed(entries, i))
    ]
    already = sum(is_built(entries, i) for i in items)
    built = failed = 0
    cpu_s = 0.0
    failures: dict[str, str] = {}
    say = progress or (lambda line: None)
    say(f"library: {len(items)} builds planned, {already} already built, {len(todo)} to build")
    queue = iter(todo)
    size = workers or max(1, usable_cpus() - 2)
    with ThreadPoolExecutor(size, "kf-library") as pool:
        running: dict[Future, Planned] = {}

        def start_more() -> None:
            while len(running) < size:
                if deadline_s is not None and time.monotonic() - started > deadline_s:
                    return
                item = next(queue, None)
                if item is None:
                    return
                running[pool.submit(compile_one, item)] = item

        start_more()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                item = running.pop(future)
                try:
                    outcome = future.result()
                except Exception as exc:  # noqa: BLE001  (one build's failure is recorded)
                    outcome = Built(False, 0.0, f"{type(exc).__name__}: {exc}", "crash")
                ok, seconds, error = outcome.ok, outcome.seconds, outcome.error
                cpu_s += seconds
                built += ok
                failed += not ok
                if not ok:
                    failures[item.key] = error.strip()[:400]
                _record(
                    path,
                    item.key,
                    Entry(
                        family=item.family.name,
                        problem_class=class_of(item.problem),
                        params={n: item.point[n] for n in item.family.build_params},
                        ok=ok,
                        seconds=round(seconds, 2),
                        render_sha256=item.render_sha256(),
                        error="" if ok else error[-2000:],
                        built_at=datetime.now(UTC).isoformat(timespec="seconds"),
                        failure=outcome.failure,
                    ),
                )
                n = built + failed
                rate = (time.monotonic() - started) / n
                say(
                    f"library: {n}/{len(todo)} ({failed} failed), "
                    f"{cpu_s / 60:.1f} CPU-min, ~{rate * (len(todo) - n) / 60:.0f} min left"
                )
            start_more()
    return BuildReport(
        planned=len(items),
        already=already,
        built=built,
        failed=failed,
        left=len(todo) - built - failed,
        cpu_s=round(cpu_s, 1),
        wall_s=round(time.monotonic() - started, 1),
        disk_bytes=_disk_bytes(),
        failures=failures,
    )


def _disk_bytes() -> int:
    from harness.compile_cache import cuda_ext_dir

    root = cuda_ext_dir()
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.is_dir() else 0


# ------------------------------------------------------------------ what a search takes


def points_for(problem: Problem, *, manifest: Path | None = None) -> list[dict[str, Any]]:
    """The library's built points that fit this problem, {family, params}, nearest each
    family's default first ([] without nvcc or before any build)."""
    from harness.cuda_ext import CudaBuildError
    from harness.ops import resolve_op

    try:
        entries = load(manifest or manifest_path())
    except CudaBuildError:  # no nvcc here: no library either
        return []
    if not entries or problem.op not in REPRESENTATIVE_SHAPE:  # none built, or none for the op
        return []
    problem_class = class_of(problem)
    rep = representative(problem_class)
    out = []
    for family in resolve_op(problem.op).families():
        # Built as the representative's points: the build is the class's, whatever the shape
        # (a family whose default run-time levers follow the shape still finds its builds).
        built = {
            entry_key(family, problem_class, p)
            for p in family.library_points(rep)
            if is_built(entries, Planned(family, rep, p))
        }
        out += [
            {"family": family.name, "params": point}
            for point in family.library_points(problem)
            if entry_key(family, problem_class, point) in built
        ]
    return out


@contextmanager
def _the_only_build() -> Iterator[bool]:
    """True while this process holds the machine's build lock; False when another does."""
    path = manifest_path().with_name("build.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def start_background_build() -> subprocess.Popen | None:
    """`python -m harness.library build` beside the caller, at nice 19, logging beside the
    manifest (None without nvcc: nothing can be built here). It stays in the caller's process
    group, so it stops with the worker (`make up`'s Ctrl-C, a container's stop); the manifest
    keeps what it built and the next start goes on from there."""
    from harness.cuda_ext import CudaBuildError

    try:
        log_path = manifest_path().with_name("build.log")
    except CudaBuildError:
        return None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-m", "harness.library", "build"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    threading.Thread(target=proc.wait, name="kf-library-reaper", daemon=True).start()
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.library", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build what is not built yet")
    b.add_argument("--classes", default=",".join(DEFAULT_CLASSES), help="op/dtype/layout,...")
    b.add_argument("--workers", type=int, help="builds at a time (default: usable cores - 2)")
    b.add_argument("--minutes", type=float, help="start no build after this many minutes")
    b.add_argument("--retry-failed", action="store_true")
    b.add_argument("--out", help="write the build report (JSON) here")
    sub.add_parser("status", help="what the manifest holds")
    p = sub.add_parser("pack", help="this machine's library as one archive (.tar.xz)")
    p.add_argument("archive")
    u = sub.add_parser("unpack", help="take a packed library into this machine's")
    u.add_argument("archive")
    args = parser.parse_args(argv)
    if args.command in ("pack", "unpack"):
        from harness import library_archive
        from harness.cuda_ext import CudaBuildError

        try:
            if args.command == "pack":
                done: Any = library_archive.pack(Path(args.archive))
            else:
                done = library_archive.unpack(Path(args.archive))
        except (OSError, ValueError, CudaBuildError) as exc:  # no nvcc, a bad path or archive
            print(f"{args.command}: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(done.to_dict(), indent=1))
        return 0
    if args.command == "status":
        entries = load()
        by_class: dict[str, list[int]] = {}
        for e in entries.values():
            counts = by_class.setdefault(f"{e.family} {e.problem_class}", [0, 0])
            counts[0 if e.ok else 1] += 1
        print(f"{manifest_path()}: {len(entries)} builds")
        for name, (ok, bad) in sorted(by_class.items()):
            print(f"  {name}: {ok} built, {bad} failed")
        return 0
    classes = tuple(c.strip() for c in args.classes.split(",") if c.strip())
    with _the_only_build() as only:
        if not only:
            print("another library build is running on this machine", file=sys.stderr)
            return 0
        report = build(
            classes,
            workers=args.workers,
            deadline_s=args.minutes * 60 if args.minutes else None,
            retry_failed=args.retry_failed,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    text = json.dumps(report.to_dict(), indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
