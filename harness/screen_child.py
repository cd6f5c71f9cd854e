"""Inside the screen's children (harness/screen.py): trusted code over renders of our own families.

screen_compile  render each point, import it, compile its kernels without launching them
screen_batch    render, check at the tail and problem shapes against the fp64 reference, then
                time by CUDA events interleaved with the baseline, by successive halving

Both render the points themselves from the kernels registry: a job names (family, params)
and the render must hash to the candidate id the parent computed, so nothing but our own
families' code is ever imported here. A progress file (one JSON line per step) tells the
parent which candidate a child was holding when it died.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import statistics
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from harness import cuda_ext, runtime, timing
from harness.compare import closeness, vendor_limit
from harness.compiling import call_at_shapes, compile_only_launches, is_compile_error, is_cuda_fault
from harness.judge.baselines import make as make_baselines
from harness.judge.cases import shrink
from harness.ops import resolve_op
from harness.results import Backend, Candidate, Regime, Verdict
from harness.screen import HUNG_EXIT, ScreenPoint, render, tail_shape
from kernels.problem import Problem


def _shapes(job: dict) -> tuple[Problem, list[Problem]]:
    """The problem as run here (the interpreter: fp16, small) and the shapes checked: tail first."""
    problem = Problem.from_dict(job["problem"])
    if job["interpreter"]:
        dtype = "fp16" if problem.dtype == "bf16" else problem.dtype  # interpreter bf16 is wrong
        problem = shrink(Problem(problem.op, problem.shape, dtype, problem.layout))
    return problem, [tail_shape(problem), problem]


def _load(point: dict, job: dict):
    """Render the point for the job's problem (trusted: our family) and import it; the render
    must be the one the parent asked for. Renders are valid for every shape of their op."""
    problem = Problem.from_dict(job["problem"])
    family, source = render(problem, ScreenPoint(point["family"], point["params"]), job["op_ref"])
    candidate = Candidate(source, Backend.of_family(family.backend))
    if candidate.id != point["candidate_id"]:
        raise RuntimeError(f"render of {point['family']} is not deterministic ({candidate.id})")
    name = f"kf_screen_{candidate.id}"
    return runtime.load_candidate(source, job["workdir"], name), candidate.backend


class _Progress:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def write(self, **data: Any) -> None:
        data.setdefault("t", time.time())  # wall clock: the parent lines steps up across children
        with self.path.open("a") as f:
            f.write(json.dumps(data, default=str) + "\n")


class _Watchdog:
    """Ends this process when one candidate's turn runs past its share of the batch (a hung
    kernel waits in the driver, where nothing in-process interrupts it; a timer thread can
    still exit). It notes which candidate hung first; the parent goes on in a fresh child, so
    a hang costs its share, not the batch's whole budget."""

    def __init__(self, progress: _Progress, seconds: float) -> None:
        self.progress, self.seconds = progress, seconds
        self.timer: threading.Timer | None = None

    def arm(self, cid: str) -> None:
        self.disarm()
        self.timer = threading.Timer(self.seconds, self._fire, (cid,))
        self.timer.daemon = True
        self.timer.start()

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _fire(self, cid: str) -> None:
        self.progress.write(hung=cid, seconds=self.seconds)
        os._exit(HUNG_EXIT)


# ---------------------------------------------------------------- compile ahead


def compile_batch(job: dict) -> dict:
    device = job["device"]
    problem = Problem.from_dict(job["problem"])
    op = resolve_op(problem.op, job["op_ref"])
    # The screen's two shapes, or (a precompile) every shape the judge will call it at: each
    # compile specialization then exists before the judge's clock starts.
    asked = [Problem.from_dict(s) for s in job.get("shapes", ())]
    shapes = list(dict.fromkeys(asked or [problem, tail_shape(problem)]))
    progress = _Progress(job["progress_path"])
    if device == "cuda":
        compile_only_launches()
    results = []
    for point in job["points"]:
        t0 = time.perf_counter()
        result: dict[str, Any] = {
            "candidate_id": point["candidate_id"],
            "ok": True,
            "log": "",
            "shapes": len(shapes),
        }
        try:
            module, backend = _load(point, job)
            # CUDA C++ builds at import; a call would run it on the GPU another one is timed on
            # (and without a GPU, a library build's, it cannot run at all).
            if backend is not Backend.CUDA:
                call_at_shapes(module, op, shapes, device)
        except BaseException as exc:  # noqa: BLE001  (report it; the next point goes on)
            result.update(
                ok=False,
                failure="compile" if is_compile_error(exc) else "raised",
                log="".join(traceback.format_exception(exc))[-4000:],
            )
        result["seconds"] = time.perf_counter() - t0
        progress.write(**result)
        results.append(result)
    return {"results": results}


# ---------------------------------------------------------------- screen


class _Shape:
    """One checked shape: inputs, the fp64 reference, and how far off the vendor itself is."""

    def __init__(self, op, problem: Problem, device: str, seed: int) -> None:
        self.problem = problem
        self.inputs = op.make_inputs(problem, seed=seed, device=device)
        self.ref = op.reference(problem, *self.inputs)
        self.tol = op.tolerance(problem)
        self.spec = op.output_spec(problem)
        base = torch.empty(self.spec.shape, dtype=self.spec.dtype, device=device)
        base = op.baseline_output(problem, *self.inputs, out=base)
        self.limit = vendor_limit(closeness(base, self.ref, self.tol).worst_error)
        self.device = device

    def check(self, module) -> tuple[bool, float, str]:
        out = torch.full(self.spec.shape, float("nan"), dtype=self.spec.dtype, device=self.device)
        if callable(getattr(module, "prepare", None)):
            module.prepare(*self.inputs)
        module.run(*self.inputs, out=out)
        if self.device == "cuda":
            torch.cuda.synchronize()
        c = closeness(out, self.ref, self.tol)
        ok = not c.unwritten and c.worst_error <= self.limit
        shape = "x".join(map(str, self.problem.shape))
        return (
            ok,
            c.worst_error,
            "" if ok else f"{shape}: {c.detail or f'error {c.worst_error:.3g}x tolerance'}",
        )


def screen_batch(job: dict) -> dict:
    cuda_ext.builds_refused = (
        "not built ahead: the screen times CUDA C++ renders its compile children built at "
        "import, and this one built nothing there (does its module build at import?)"
    )
    progress = _Progress(job["progress_path"])
    watchdog = _Watchdog(progress, job["point_s"])
    try:
        return _screen(job, progress, watchdog)
    finally:  # whichever way it ends, no timer outlives it (it would end the process)
        watchdog.disarm()


def _screen(job: dict, progress: _Progress, watchdog: _Watchdog) -> dict:
    started = time.perf_counter()

    def left() -> float:
        return job["budget_s"] - (time.perf_counter() - started)

    device = job["device"]
    problem, shapes = _shapes(job)
    op = resolve_op(problem.op, job["op_ref"])
    seed = secrets.randbits(62)
    checked = [_Shape(op, p, device, seed + i) for i, p in enumerate(shapes)]
    timed = checked[-1]  # the problem shape
    base = make_baselines([job["baseline"]], op, problem, device, None)
    if job["baseline"] not in base.built:
        raise RuntimeError(f"baseline {job['baseline']}: {base.errors}")
    base_out = torch.empty(timed.spec.shape, dtype=timed.spec.dtype, device=device)
    base_fn = base.built[job["baseline"]]
    entries: dict[str, dict] = {}
    passed: list[tuple[str, Any]] = []

    def crashed(cid: str, exc: BaseException) -> dict:
        # A fault poisons the context: return what is done; the parent retries the rest.
        detail = "".join(traceback.format_exception(exc))[-2000:]
        return {"entries": list(entries.values()), "crashed": cid, "crash_detail": detail}

    regime = Regime.OFFLINE if device == "cuda" else Regime.INTERPRETER
    samples = job["samples"]

    def timed_round(cid: str, module, rnd: int) -> bool:
        """Time one candidate for round `rnd`; False when it failed (its entry says why)."""
        progress.write(candidate_id=cid, stage="time", round=rnd)
        watchdog.arm(cid)
        try:
            if callable(getattr(module, "prepare", None)):
                module.prepare(*timed.inputs)
            speed = _time(module, base_fn, timed, base_out, regime, samples[rnd], left())
        except BaseException as exc:  # noqa: BLE001
            if is_cuda_fault(exc):
                raise
            entries[cid].update(
                verdict=Verdict.INCORRECT.value,
                detail="prepare() or run() raised while timed: "
                + "".join(traceback.format_exception(exc))[-1500:],
            )
            return False
        finally:
            watchdog.disarm()
        entries[cid].update(speed, verdict=Verdict.PASSED.value, detail="", rounds=rnd + 1)
        return True

    # Each candidate is checked and timed once as it comes (a batch cut short by the deadline
    # still ranks what it reached); then the faster half again with more samples, and so on.
    for point in job["points"]:
        if left() <= 0:
            break
        cid = point["candidate_id"]
        progress.write(candidate_id=cid, stage="check")
        watchdog.arm(cid)  # its import and checks (the timed rounds arm it again)
        entry = _new_entry(point)
        entries[cid] = entry
        try:
            module, _ = _load(point, job)
        except BaseException as exc:  # noqa: BLE001  (does not import: never reaches the GPU)
            watchdog.disarm()
            entry.update(
                verdict=Verdict.COMPILE_ERROR.value,
                detail="".join(traceback.format_exception(exc))[-1500:],
            )
            progress.write(entry=entry)
            continue
        try:
            worst = 0.0
            for shape in checked:
                ok, error, detail = shape.check(module)
                worst = max(worst, error)
                if not ok:
                    entry.update(verdict=Verdict.INCORRECT.value, detail=detail)
                    break
            entry["worst_error"] = worst if worst != float("inf") else None
            if entry["verdict"] == Verdict.PASSED.value:
                entry.update(verdict=Verdict.TIMEOUT.value, detail="correct; not timed in time")
                if timed_round(cid, module, 0):
                    passed.append((cid, module))
        except BaseException as exc:  # noqa: BLE001  (a render may fail like any code)
            if is_cuda_fault(exc):
                entries.pop(cid)
                return crashed(cid, exc)
            entry.update(
                verdict=(
                    Verdict.COMPILE_ERROR if is_compile_error(exc) else Verdict.INCORRECT
                ).value,
                detail="".join(traceback.format_exception(exc))[-1500:],
            )
        watchdog.disarm()
        progress.write(entry=entry)  # survives this process if a later candidate kills it

    survivors = passed
    for rnd in range(1, len(samples)):
        survivors.sort(key=lambda cm: entries[cm[0]]["speedup"], reverse=True)
        survivors = survivors[: max(job["keep"], math.ceil(len(survivors) / 2))]
        done = []
        for cid, module in survivors:
            if left() <= 0:
                break
            try:
                if timed_round(cid, module, rnd):
                    done.append((cid, module))
            except BaseException as exc:  # noqa: BLE001  (a fault: see timed_round)
                return crashed(cid, exc)
        survivors = done
    return {"entries": list(entries.values())}


def _new_entry(point: dict) -> dict:
    return {
        "family": point["family"],
        "params": point["params"],
        "candidate_id": point["candidate_id"],
        "verdict": Verdict.PASSED.value,
        "detail": "",
    }


def _time(module, base_fn, shape: _Shape, base_out, regime: Regime, n: int, left_s: float) -> dict:
    """n interleaved rounds of candidate and baseline (harness.timing's OFFLINE protocol); the
    GPU time is the plain end event after the pre-roll (host time under the interpreter)."""
    out = torch.empty(shape.spec.shape, dtype=shape.spec.dtype, device=shape.device)
    fns = {
        "candidate": lambda: module.run(*shape.inputs, out=out),
        "baseline": lambda: base_fn(*shape.inputs, out=base_out),
    }
    samples = timing.time_interleaved(
        fns,
        regime=regime,
        min_samples=n,
        max_samples=n,
        target_rel_err=1.0,
        max_seconds=max(1.0, left_s),
    )
    cand = samples["candidate"].plain_us or samples["candidate"].host_us
    base = samples["baseline"].plain_us or samples["baseline"].host_us
    median, base_median = statistics.median(cand), statistics.median(base)
    return {
        "median_us": median,
        "baseline_us": base_median,
        "speedup": base_median / median if median > 0 else None,
        "noise": timing.summarize(cand).rel_stderr,
        "samples": len(cand),
    }
