"""The screen: rank many renders of our own kernel families cheaply, before any full evaluation.

Tier one of a search (tier two is `evaluate()`, the full sandboxed protocol). The screen takes
(family name, parameter point) pairs, never source text: it renders each point itself from the
kernels registry, so only our own families' code (trusted) can reach it. Anything an LLM wrote
goes through `evaluate()` instead, always.

    screener = Screener(problem, deadline_at=time.monotonic() + 600)
    screener.submit([ScreenPoint("matmul_tiled", params), ...])   # compiles start now
    result = screener.screen(deadline_at=..., min_ready=16)       # what has compiled so far
    result.ranked()[0].speedup, result.gpu_s
    screener.close()

How it runs (the caller's process never initialises CUDA):
* compile ahead: `submit` renders the points and hands them, a few per child, to a pool of
  compile children (every CPU core less two; phase `screen_compile`, harness/screen_child.py)
  that import each render and compile its kernels without launching them (Triton) or build it
  (CUDA C++ with nvcc, one configuration per child: a CUTLASS build takes ~80 s and must not
  hold up the others; Triton's compiles go first and builds never take every worker, so a
  round's Triton points are not stuck behind them). Kernels land in one shared Triton cache
  that only screen children use.
  A point this machine's kernel library built (harness/library.py) is ready at once.
* screen: `screen` waits a bounded time for compiles, then gives everything compiled to ONE warm
  child (phase `screen_batch`): each render is checked against the op's fp64 reference at the
  problem shape and at a smaller "tail" shape with the same compile specialization (sizes not a
  multiple of any tile), then timed by CUDA events interleaved with the baseline
  (harness.timing, OFFLINE regime: L2 flush, pre-roll), by successive halving: every survivor
  with few samples, the faster half again with more, and so on.
* every wait has a deadline: compile children and the screening child are killed at the
  caller's deadline; a kernel that faults or kills its child costs that candidate (CRASH) and
  the rest of the batch is screened again in a fresh child.

The screen's numbers rank candidates; they are never a verdict. Only `evaluate()` decides
what is correct and how fast (every correctness stage, anti-cheat, the timing protocol, every
baseline), so only a candidate that passed it may become a best, be ranked or be exported.
"""

from __future__ import annotations

import json
import math
import shutil
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.compile_cache import trusted_dirs, trusted_env
from harness.config import Limits
from harness.results import Backend, Candidate, Regime, Verdict
from kernels.problem import Family, Problem

# The child's own start-up (python, torch, CUDA context) before it can screen anything; the
# part of the deadline it is not given, so its results come back before the caller's deadline.
CHILD_RETURN_S = 3.0
PROGRESS_POLL_S = 0.25  # how often a running compile child's reported points are taken up
RETRIES = 3  # fresh screening children after one died (each retry drops the culprit)
# Each stage of a candidate's turn in a screening child (import and checks; each timed round)
# is cut at its share of the batch's time, but never below this: a first call may load or JIT-compile
# (seconds on a GPU; the CPU interpreter runs every check at its own slow pace). An H100 agent
# run lost 86 s four times over to one hung candidate (2026-11-28), all of its budget.
POINT_FLOOR_S = {True: 30.0, False: 120.0}  # by "on a GPU"
HUNG_EXIT = 75  # the screening child's exit status when its watchdog ended it
# A point still waiting when its batch ended (another one's hang or fault used the time or
# the retries): it was never run, so it gets no one else's reason.
NOT_REACHED = "not screened: the batch's time or its retries ran out before its turn"


@dataclass(frozen=True)
class ScreenPoint:
    family: str
    params: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.family}:{json.dumps(dict(self.params), sort_keys=True, default=str)}"

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "params": dict(self.params)}


@dataclass
class ScreenEntry:
    """One render's screen: correct at both shapes, and its GPU time against the baseline."""

    family: str
    params: dict[str, Any]
    candidate_id: str  # Candidate(render).id: the same candidate evaluate() would judge
    verdict: Verdict  # PASSED: right at both shapes and timed; else why not
    detail: str = ""
    median_us: float | None = None  # GPU time (plain end event after a pre-roll), last round
    baseline_us: float | None = None  # the baseline's, interleaved in the same rounds
    speedup: float | None = None  # baseline_us / median_us
    noise: float = 0.0  # relative standard error of the candidate's median
    samples: int = 0
    rounds: int = 0  # successive-halving rounds it was timed in (more: it ranked higher)
    worst_error: float | None = None  # over both shapes, in units of the op's tolerance
    compile_s: float = 0.0  # its compile child's time for it (0: nothing compiled)

    @property
    def key(self) -> str:
        return ScreenPoint(self.family, self.params).key


@dataclass
class ScreenResult:
    problem_key: str
    baseline: str
    regime: Regime
    entries: list[ScreenEntry] = field(default_factory=list)
    gpu_s: float = 0.0  # wall time of the screening children: the GPU was theirs meanwhile
    compile_s: float = 0.0  # compile time of the entries reported here (CPU, in parallel)
    compile_wait_s: float = 0.0  # how long this call waited for compiles
    wall_s: float = 0.0
    pending: int = 0  # submitted points still compiling (screened by a later call)
    error: str = ""  # the screening child failed for every retry

    def ranked(self) -> list[ScreenEntry]:
        """Passed entries, best first: the later halving round they reached, then speedup."""
        passed = [e for e in self.entries if e.verdict is Verdict.PASSED and e.speedup]
        return sorted(passed, key=lambda e: (e.rounds, e.speedup or 0.0), reverse=True)

    @property
    def timed(self) -> int:
        """Entries that reached the GPU (checked, and timed when correct)."""
        return sum(1 for e in self.entries if e.verdict in (Verdict.PASSED, Verdict.INCORRECT))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["regime"] = self.regime.value
        for entry in data["entries"]:
            entry["verdict"] = entry["verdict"].value
        return data


@dataclass(frozen=True)
class ScreenConfig:
    device: str | None = None  # "cpu" forces the interpreter even where a GPU exists
    compile_workers: int | None = None  # None: every usable CPU core less two (at least one)
    chunk: int = 4  # Triton renders per compile child (each child imports torch once)
    # Successive halving: samples per round; after each round the faster half (at least
    # `keep`) goes on. None: (10, 30, 100) on a GPU, (2,) under the interpreter.
    samples: tuple[int, ...] | None = None
    keep: int = 4
    baseline: str = "torch"  # the op's eager baseline; the ranking is relative to it
    compile_wall_s: float = 300.0  # one compile child (a CUTLASS configuration: ~80 s)
    limits: Limits = field(default_factory=lambda: Limits(wall_s=600.0))
    op_ref: str = ""  # "module:ATTR" naming an Op outside kernels/ (tests)
    point_s: float | None = None  # a candidate's turn at most; None: its share (POINT_FLOOR_S)


@dataclass
class _Item:
    point: ScreenPoint
    family: Family
    candidate: Candidate
    compile_s: float = 0.0


def render(problem: Problem, point: ScreenPoint, op_ref: str = "") -> tuple[Family, str]:
    """The point's family and its render; ValueError when the point is not valid for it."""
    from harness.ops import resolve_op

    family = next(
        (f for f in resolve_op(problem.op, op_ref).families() if f.name == point.family), None
    )
    if family is None:
        raise ValueError(f"{problem.op} has no family {point.family!r}")
    why = family.check(problem, dict(point.params))
    if why:
        raise ValueError(f"invalid point: {why}")
    return family, family.render(problem, dict(point.params))


def _library_points(problem: Problem) -> frozenset[str]:
    """ScreenPoint keys of this machine's library builds for the problem (none without one)."""
    from harness import library

    return frozenset(ScreenPoint(p["family"], p["params"]).key for p in library.points_for(problem))


def tail_shape(problem: Problem) -> Problem:
    """A shape no larger than the problem's with the same compile specialization (Triton
    specializes integer arguments on == 1 and % 16), whose sizes are not multiples of a tile:
    one compile serves both shapes, and the tile edges are exercised. The op's fixed dims
    (heads its layout names) stay."""
    from kernels import get_op

    op = get_op(problem.op)
    fixed = op.fixed_dims(problem)
    dims = []
    for name, s in zip(op.dims, problem.shape, strict=True):
        if s <= 2 or s == 16 or name in fixed:
            dims.append(s)
        elif s % 16 == 0:
            t = min(s - 16, 1040)  # 16 x an odd number: no tile of 32 or more divides it
            dims.append(t if t % 32 else t - 16)
        else:
            t = min(s - 2, 1041)
            dims.append(next(x for x in (t, t - 1, t - 2) if x % 16 and x > 1))
    return problem.with_shape(*dims)


class Screener:
    """Compile ahead on every core; screen what has compiled in one warm child per batch.

    `deadline_at` (time.monotonic()) bounds every child this screener starts: a compile still
    running then is killed, so nothing it started outlives its caller's budget."""

    def __init__(
        self,
        problem: Problem,
        *,
        config: ScreenConfig | None = None,
        deadline_at: float | None = None,
    ) -> None:
        from harness import device as device_mod
        from harness.ops import resolve_op

        self.problem = problem
        self.config = config or ScreenConfig()
        self.deadline_at = deadline_at
        resolve_op(problem.op, self.config.op_ref).validate(problem)
        self.gpu = self.config.device != "cpu" and device_mod.gpu_visible()
        workers = self.config.compile_workers or max(1, device_mod.usable_cpus() - 2)
        # Under the interpreter nothing compiles: points are ready as soon as they render.
        self._pool = ThreadPoolExecutor(workers, "kf-screen-compile") if self.gpu else None
        self.workers = workers if self.gpu else 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._seen: set[str] = set()  # candidate ids submitted (a render is screened once)
        self._compiling: dict[str, _Item] = {}
        self._ready: dict[str, _Item] = {}
        self._done: list[Any] = []  # ScreenEntry for points that failed before the GPU
        self._futures: list[Future] = []
        # Queued compiles, Triton's first: a Triton chunk takes seconds, an nvcc build about a
        # minute of one core, and a round waits for its Triton points. Builds never take more
        # than `build_slots` workers at once, so such a round finds cores free. (An H200 agent
        # run's last three rounds waited 31 s, 17 % of its wall time, with 81 compiles queued
        # behind the planner's non-library nvcc builds, 2026-11-29.)
        self._triton_queue: deque[list[_Item]] = deque()
        self._build_queue: deque[list[_Item]] = deque()
        self._building = 0
        self.build_slots = max(1, workers - workers // 4)
        self.compile_cpu_s = 0.0  # compile children's wall time, summed (CPU work)
        self._closed = threading.Event()  # set by close(): running compiles end then
        # This machine's library builds (harness/library.py) that fit the problem: such a
        # point is ready at once. A compile child would only load its finished build, and
        # queued behind real compiles it kept the screen waiting (an H200 agent run with a
        # warm library still waited 9-10 s for its first round, 2026-11-29).
        self._built = _library_points(problem) if self._pool is not None else frozenset()

    # ------------------------------------------------------------------ compile ahead

    def submit(self, points: Sequence[ScreenPoint]) -> int:
        """Render and start compiling; returns how many were new (a render is screened once)."""
        fresh: list[_Item] = []
        for point in points:
            try:
                family, source = render(self.problem, point, self.config.op_ref)
            except Exception as exc:  # a family bug or a bad point costs that point only
                self._fail(point, "", Verdict.COMPILE_ERROR, f"{type(exc).__name__}: {exc}")
                continue
            candidate = Candidate.of_render(
                source, Backend.of_family(family.backend), family.name, point.params
            )
            with self._lock:
                if candidate.id in self._seen:
                    continue
                self._seen.add(candidate.id)
            fresh.append(_Item(point, family, candidate))
        built = {
            i.candidate.id: i for i in fresh if self._pool is None or i.point.key in self._built
        }
        if built:
            with self._changed:
                self._ready.update(built)
                self._changed.notify_all()
        to_compile = [i for i in fresh if i.candidate.id not in built]
        if not to_compile:
            return len(fresh)
        assert self._pool is not None
        with self._lock:
            self._compiling.update((i.candidate.id, i) for i in to_compile)
        triton = [i for i in to_compile if i.candidate.backend is Backend.TRITON]
        size = max(1, min(self.config.chunk, math.ceil(len(triton) / self.workers)))
        chunks = [triton[i : i + size] for i in range(0, len(triton), size)]
        builds = [[i] for i in to_compile if i.candidate.backend is not Backend.TRITON]
        with self._lock:
            self._triton_queue.extend(chunks)
            self._build_queue.extend(builds)
        for _ in range(len(chunks) + len(builds)):
            self._futures.append(self._pool.submit(self._compile_queued))
        return len(fresh)

    def _compile_queued(self) -> None:
        """A pool thread's turn: compile queued chunks, Triton's first, until none is left
        that it may take (a build beyond `build_slots` waits for a running build's thread)."""
        while not self._closed.is_set():
            with self._lock:
                if self._triton_queue:
                    chunk, build = self._triton_queue.popleft(), False
                elif self._build_queue and self._building < self.build_slots:
                    chunk, build = self._build_queue.popleft(), True
                    self._building += 1
                else:
                    return
            try:
                self._compile(chunk)
            finally:
                if build:
                    with self._lock:
                        self._building -= 1

    @property
    def compiling(self) -> int:
        with self._lock:
            return len(self._compiling)

    @property
    def ready(self) -> int:
        with self._lock:
            return len(self._ready)

    def _compile(self, chunk: list[_Item]) -> None:
        from harness.sandbox import ChildStatus, run_child, scratch

        wall = self.config.compile_wall_s * len(chunk)
        if self.deadline_at is not None:
            wall = min(wall, self.deadline_at - time.monotonic())
        if wall < 1.0:
            for item in chunk:
                self._compiled(item, False, "timeout", "no time was left to compile it", 0.0)
            return
        root = Path(scratch.make("screen"))
        progress = root / "progress.jsonl"
        # Each point is ready once its child reports it compiled, not when the child's whole
        # chunk is: a round waiting for its first points waited for every chunk's last
        # compile (the first round of a cold H100 agent run waited 9-14 s, 2026-12-07).
        pending = {item.candidate.id: item for item in chunk}
        child_done = threading.Event()
        watcher = threading.Thread(
            target=self._watch_progress, args=(progress, pending, child_done), daemon=True
        )
        watcher.start()
        try:
            res = run_child(
                "screen_compile",
                {**self._job(chunk, root), "progress_path": str(progress)},
                str(root),
                limits=self.config.limits,
                wall_s=wall,
                cuda=True,
                isolate_fs=False,  # trusted renders write the shared screen cache
                writable=self._cache_dirs(),  # the private view keeps the rest read-only
                env_extra=self._env(),
                background=True,  # while the screen child times the points compiled before
                cancel=self._closed,
            )
        finally:
            child_done.set()
            watcher.join()
            self._take_progress(progress, pending)  # what it wrote after the last look
            shutil.rmtree(root, ignore_errors=True)
        with self._lock:
            self.compile_cpu_s += res.wall_s
        for item in pending.values():  # never reported: the child ran out of time or died
            if res.status is ChildStatus.TIMEOUT:
                self._compiled(item, False, "timeout", "compile did not finish in time", 0.0)
            else:
                why = f"compile child {res.status.value}: {res.error} {res.output[-800:]}"
                self._compiled(item, False, "crash", why, 0.0)

    def _watch_progress(
        self, progress: Path, pending: dict[str, _Item], child_done: threading.Event
    ) -> None:
        while not child_done.wait(PROGRESS_POLL_S):
            self._take_progress(progress, pending)

    def _take_progress(self, progress: Path, pending: dict[str, _Item]) -> None:
        """The points a compile child reported since the last look: ready (or failed) now.
        Called by one thread at a time: the chunk's watcher, then its pool thread."""
        for r in _read_lines(progress):
            item = pending.pop(r.get("candidate_id", ""), None)
            if item is not None:
                self._compiled(item, r["ok"], r.get("failure", ""), r.get("log", ""), r["seconds"])

    def _compiled(self, item: _Item, ok: bool, failure: str, log: str, seconds: float) -> None:
        item.compile_s = seconds
        with self._changed:
            self._compiling.pop(item.candidate.id, None)
            if ok or failure == "raised":  # raised under compile-only calls: the screen decides
                self._ready[item.candidate.id] = item
            self._changed.notify_all()
        if not (ok or failure == "raised"):
            verdict = {"timeout": Verdict.TIMEOUT, "crash": Verdict.CRASH}.get(
                failure, Verdict.COMPILE_ERROR
            )
            self._fail(item.point, item.candidate.id, verdict, log[-1500:], seconds)

    def _fail(
        self, point: ScreenPoint, cid: str, verdict: Verdict, detail: str, compile_s: float = 0.0
    ) -> None:
        entry = ScreenEntry(
            point.family, dict(point.params), cid, verdict, detail, compile_s=compile_s
        )
        with self._changed:
            self._done.append(entry)
            self._changed.notify_all()

    # ------------------------------------------------------------------ screen

    def screen(
        self, *, deadline_at: float, min_ready: int = 1, max_wait_s: float = 30.0
    ) -> ScreenResult:
        """Screen everything compiled by now (waiting up to max_wait_s for at least min_ready,
        never past deadline_at); points still compiling wait for a later call."""
        started = time.monotonic()
        wait_until = min(deadline_at - CHILD_RETURN_S - 5.0, started + max_wait_s)
        with self._changed:
            while (
                len(self._ready) < min_ready and self._compiling and time.monotonic() < wait_until
            ):
                self._changed.wait(timeout=max(0.05, min(1.0, wait_until - time.monotonic())))
            batch = list(self._ready.values())
            self._ready.clear()
            failed, self._done = self._done, []
        waited = time.monotonic() - started
        result = ScreenResult(
            self.problem.key,
            self.config.baseline,
            Regime.OFFLINE if self.gpu else Regime.INTERPRETER,
            entries=list(failed),
            compile_wait_s=waited,
        )
        todo = batch
        for _ in range(RETRIES + 1):
            if not todo:
                break
            entries, rest, wall, error = self._screen_batch(todo, deadline_at)
            result.entries += entries
            result.gpu_s += wall
            result.error = result.error or error  # the first failure says most
            todo = rest
        for item in todo:  # never had its turn: the retries or the time ran out first
            result.entries.append(
                ScreenEntry(
                    item.point.family,
                    dict(item.point.params),
                    item.candidate.id,
                    Verdict.TIMEOUT,
                    NOT_REACHED,
                )
            )
        by_id = {i.candidate.id: i for i in batch}
        for entry in result.entries:
            screened = by_id.get(entry.candidate_id)
            if screened is not None:
                entry.compile_s = screened.compile_s
        result.compile_s = sum(e.compile_s for e in result.entries)
        result.pending = self.compiling
        result.wall_s = time.monotonic() - started
        return result

    def _screen_batch(
        self, items: list[_Item], deadline_at: float
    ) -> tuple[list[ScreenEntry], list[_Item], float, str]:
        """One screening child: (entries, items to try again in a fresh child, wall, error)."""
        from harness.sandbox import ChildStatus, run_child, scratch

        wall = deadline_at - time.monotonic()
        if wall < CHILD_RETURN_S + 2.0:
            return [], items, 0.0, "no time was left to screen it"
        root = Path(scratch.make("screen"))
        progress = root / "progress.jsonl"
        cfg = self.config
        samples = cfg.samples or ((10, 30, 100) if self.gpu else (2,))
        job = {
            **self._job(items, root),
            "progress_path": str(progress),
            "baseline": cfg.baseline,
            "samples": list(samples),
            "keep": cfg.keep,
            "budget_s": wall - CHILD_RETURN_S,
            "point_s": cfg.point_s
            or max(POINT_FLOOR_S[self.gpu], (wall - CHILD_RETURN_S) / len(items)),
        }
        try:
            res = run_child(
                "screen_batch",
                job,
                str(root),
                limits=cfg.limits,
                wall_s=wall,
                cuda=self.gpu,
                isolate_fs=False,  # trusted renders read the shared screen cache
                # Triton writes there too if a kernel was not compiled ahead (the compile
                # child ran out of time): a read-only cache would fail the render.
                writable=self._cache_dirs(),
                env_extra=self._env(),
            )
            lines = _read_lines(progress)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        started = [r["candidate_id"] for r in lines if "candidate_id" in r]
        # What the child finished before it died: each candidate's first pass (check + one
        # timed round), written as it went.
        finished = {r["entry"]["candidate_id"]: r["entry"] for r in lines if "entry" in r}
        by_id = {i.candidate.id: i for i in items}
        if res.status is ChildStatus.OK:
            entries = [_entry(r) for r in res.result["entries"]]
            done_ids = {e.candidate_id for e in entries}
            crashed = res.result.get("crashed")  # a CUDA fault poisoned the context there
            rest = [i for i in items if i.candidate.id not in done_ids]
            if crashed:
                rest = [i for i in rest if i.candidate.id != crashed]
                entries.append(self._crashed(by_id[crashed], res.result.get("crash_detail", "")))
            return entries, rest, res.wall_s, ""
        hung = next((r for r in lines if "hung" in r), None)
        if hung is not None and hung["hung"] in by_id:
            # Its watchdog ended the child: that one candidate had its share and is done with
            # (a kernel that hangs once must not rank, whatever an earlier round said).
            culprit = by_id[hung["hung"]]
            why = (
                f"{_stage(lines, culprit.candidate.id)} ran past {hung['seconds']:.0f} s, its "
                "share of the batch's time: stopped there; the others went on in a fresh child"
            )
            done = [_entry(e) for cid, e in finished.items() if cid != culprit.candidate.id]
            rest = [i for i in items if i.candidate.id not in finished and i is not culprit]
            return [*done, self._crashed(culprit, why, Verdict.TIMEOUT)], rest, res.wall_s, why
        why = f"screening child {res.status.value}: {res.error} {res.output[-1500:]}".strip()
        done = [_entry(e) for e in finished.values()]
        todo = [i for i in items if i.candidate.id not in finished]
        last = started[-1] if started else None
        if last is None or last in finished:
            return done, todo, res.wall_s, why
        culprit = by_id[last]  # it died (or hung) with this one in hand
        rest = [i for i in todo if i is not culprit]
        verdict = Verdict.TIMEOUT if res.status is ChildStatus.TIMEOUT else Verdict.CRASH
        return [*done, self._crashed(culprit, why, verdict)], rest, res.wall_s, why

    def _crashed(self, item: _Item, detail: str, verdict: Verdict = Verdict.CRASH) -> ScreenEntry:
        return ScreenEntry(
            item.point.family, dict(item.point.params), item.candidate.id, verdict, detail[-1500:]
        )

    def _job(self, items: list[_Item], root: Path) -> dict[str, Any]:
        return {
            "problem": self.problem.to_dict(),
            "op_ref": self.config.op_ref,
            "device": "cuda" if self.gpu else "cpu",
            "interpreter": not self.gpu,
            "workdir": str(root),
            "points": [{**i.point.to_dict(), "candidate_id": i.candidate.id} for i in items],
        }

    def _cache_dirs(self) -> tuple[str, ...]:
        """The trusted compile caches (shared with the judge, which then finds a screened
        point compiled): the folders outside its workdir its children write."""
        return trusted_dirs() if self.gpu else ()

    def _env(self) -> dict[str, str]:
        return trusted_env(self.gpu)

    def close(self) -> None:
        """Drop queued compiles and end the running ones: nothing will screen them. (Left to
        their wall clock, the run's deadline, they most likely held a 4-minute H200 agent
        run's process 38 s past its search's end, 2026-11-29, and would hold a worker's
        cores from its next task.)"""
        self._closed.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def screen(
    problem: Problem,
    points: Sequence[ScreenPoint],
    *,
    deadline_s: float,
    config: ScreenConfig | None = None,
) -> ScreenResult:
    """One-shot: compile every point, wait for all (within the deadline), screen them."""
    deadline_at = time.monotonic() + deadline_s
    screener = Screener(problem, config=config, deadline_at=deadline_at)
    try:
        screener.submit(points)
        return screener.screen(
            deadline_at=deadline_at, min_ready=len(points), max_wait_s=deadline_s
        )
    finally:
        screener.close()


def _stage(lines: list[dict[str, Any]], cid: str) -> str:
    """What the candidate was doing when its turn ran out, from its last progress line."""
    last: dict[str, Any] = next((r for r in reversed(lines) if r.get("candidate_id") == cid), {})
    if last.get("stage") == "time":
        return f"its timed round {last.get('round', 0) + 1}"
    return "its import and correctness checks"


def _entry(data: dict[str, Any]) -> ScreenEntry:
    return ScreenEntry(**{**data, "verdict": Verdict(data["verdict"])})


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The child's progress file: one JSON object a line (a half-written last line is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
