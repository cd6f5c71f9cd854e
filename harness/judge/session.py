"""Phase `judge`: one trusted process runs the candidate's cases, times it, then checks it.

Order matters, and is the point (harness/README.md, "Trust boundary"):
1. the cases are built from secret seeds; their inputs stay in host memory (device code
   cannot reach it), and each call gets a fresh device copy;
2. the candidate (a Subject: our render in-process, its recorded plans launched by our code,
   or a sandboxed CPU executor on a shared arena) runs every case into a NaN-poisoned output
   with random guard bands; the judge copies each output to the host itself;
3. if asked, it is timed against the baselines, interleaved, by this process's clock
   (harness/timing.py), keeping a few timed outputs with the seeds of their inputs;
4. only then, with the candidate done, are references computed and every check made.
No key, seed, reference or clock ever exists in a process where candidate host code runs.
"""

from __future__ import annotations

import secrets
import sys
import time
from typing import Any

import torch

from harness.compiling import is_compile_error, is_cuda_fault
from harness.judge import cases as cases_mod
from harness.judge import oracle
from harness.judge.subjects import CandidateFailure, Subject
from harness.ops import VENDOR_ATEN_OPS, VENDOR_KERNEL_MARKERS, resolve_op
from harness.plan import guarded_output
from harness.redact import candidate_traceback
from kernels.problem import Op, Problem

GUARD = cases_mod.GUARD_ELEMENTS


def poisoned_output(subject: Subject, shape, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(padded, out): a NaN-filled output between guard bands, where the subject's buffers live."""
    padded, out = guarded_output(subject.empty_strided, shape, dtype)
    padded.fill_(float("nan"))
    return padded, out


def judge(job: dict) -> dict[str, Any]:
    from harness.judge.open import open_subject

    problem = Problem.from_dict(job["problem"])
    op = resolve_op(problem.op, job.get("op_ref", ""))
    device = job["device"]
    result: dict[str, Any] = {"findings": [], "phase_s": {}}
    t0 = time.perf_counter()
    try:
        subject, compile_info = open_subject(job)
    except CandidateFailure as failure:
        return {**result, "compile": {"ok": False, "log": failure.detail[-6000:]}}
    result["compile"] = compile_info
    cases = cases_mod.build_cases(
        op,
        problem,
        job["seeds"],
        device,
        quick=job["quick"],
        interpreter=job["interpreter"],
        dtypes=tuple(job.get("dtypes", ())),
    )
    # The originals stay on the host: device code cannot reach them, so the references are
    # computed from exactly what the candidate was given.
    for case in cases:
        case.inputs = tuple(t.cpu() for t in case.inputs)
    result["phase_s"]["import"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    outputs, error = _run_cases(subject, op, cases, device, job["workdir"], result["phase_s"])
    result["phase_s"]["cases"] = round(time.perf_counter() - t0, 3)
    result["error"] = error
    result["kernels"] = sorted(k for k in subject.kernels if not k.startswith("aten::"))[:50]
    result["aten_ops"] = sorted(k for k in subject.kernels if k.startswith("aten::"))[:100]
    result["findings"] += _vendor_audit(subject, problem.op, job)
    if error and error["kind"] != "raised":
        subject.close()
        return result  # a dead CUDA context or an unusable plan: nothing more can run
    timed = None
    timed_at = cases_mod.timed_problem(problem, interpreter=job["interpreter"])
    if job.get("time") and not error and _smoke_written(outputs, op, cases):
        t0 = time.perf_counter()
        try:
            timed = _time(subject, op, timed_at, job)
            result["phase_s"].update(timed.pop("phase_s"))
        except CandidateFailure as failure:
            result["error"] = {"case": "timing", "kind": failure.kind, "detail": failure.detail}
        result["phase_s"]["time"] = round(time.perf_counter() - t0, 3)
    subject.close()
    if device == "cuda":
        torch.cuda.synchronize()
    # From here on nothing of the candidate runs: references may exist.
    t0 = time.perf_counter()
    checked = oracle.check_cases(op, cases, outputs, job["baseline_error_factor"], device)
    result["stages"] = checked["stages"]
    result["findings"] += checked["findings"]
    if timed is not None:
        spots = timed.pop("spots")
        result["timing"] = timed
        result["recheck"] = oracle.recheck_spots(op, timed_at, spots, device)
    result["phase_s"]["check"] = round(time.perf_counter() - t0, 3)
    return result


def _run_cases(
    subject: Subject,
    op: Op,
    cases: list[cases_mod.Case],
    device: str,
    workdir: str,
    phase_s: dict[str, float],
) -> tuple[list[dict], dict | None]:
    """Every case's runs; phase_s gets "cases_first_calls", the first call at each shape
    (prepare and JIT compiles: where a full verification's case time goes)."""
    saved: list[dict] = []
    prepared: set[str] = set()
    first_calls = 0.0
    for case in cases:
        spec = op.output_spec(case.problem)
        n = oracle.spec_numel(spec.shape)
        guard = cases_mod.guard_pattern(GUARD, spec.dtype, case.guard_seed, "cpu")
        runs, after = [], None
        try:
            for rep in range(case.runs):
                if rep and device == "cuda":
                    # Other memory state for the determinism run: dirty the caching allocator.
                    scratch = torch.empty(64 * 2**20, dtype=torch.uint8, device=device).random_()
                    del scratch
                inputs = [place(subject, t) for t in case.inputs]
                padded, out = poisoned_output(subject, spec.shape, spec.dtype)
                padded[:GUARD] = guard[:GUARD].to(padded.device)
                padded[GUARD + n :] = guard[GUARD:].to(padded.device)
                first = case.problem.key not in prepared
                t0 = time.perf_counter()
                subject.bind(case.problem, inputs, out, prepare=first)
                prepared.add(case.problem.key)
                subject.call()
                if device == "cuda":
                    torch.cuda.synchronize()
                if first:
                    first_calls += time.perf_counter() - t0
                    phase_s["cases_first_calls"] = round(first_calls, 3)
                runs.append(padded.to("cpu", copy=True))
                if rep == 0:
                    after = [t.to("cpu", copy=True) for t in inputs]
        except BaseException as exc:  # noqa: BLE001  (whatever the candidate's call raised)
            return saved, {"case": case.name, **_failure(exc, workdir)}
        saved.append({"runs": runs, "inputs_after": after})
    return saved, None


def place(subject: Subject, t: torch.Tensor) -> torch.Tensor:
    """A fresh copy of a host tensor where the subject's buffers live, strides kept."""
    copy = subject.empty_strided(t.shape, t.stride(), t.dtype)
    copy.copy_(t)
    return copy


def _failure(exc: BaseException, workdir: str) -> dict[str, str]:
    if isinstance(exc, CandidateFailure):
        return {"kind": exc.kind, "detail": exc.detail[-4000:]}
    if is_cuda_fault(exc):
        kind = "cuda_fault"
    elif is_compile_error(exc):
        kind = "compile"
    else:
        kind = "raised"
    return {"kind": kind, "detail": candidate_traceback(exc, workdir, limit=4000)}


def _smoke_written(outputs: list[dict], op: Op, cases: list[cases_mod.Case]) -> bool:
    """Worth timing: the smoke case's output holds no poison (cheap, needs no reference)."""
    if not outputs:
        return False
    n = oracle.spec_numel(op.output_spec(cases[0].problem).shape)
    first = outputs[0]["runs"][0][GUARD : GUARD + n]
    return not bool(torch.isnan(first).all())


def _vendor_audit(subject: Subject, op_name: str, job: dict) -> list[dict]:
    forbidden = VENDOR_ATEN_OPS.get(op_name, frozenset())
    markers = VENDOR_KERNEL_MARKERS.get(op_name, ())
    used = sorted(
        k for k in subject.kernels if k in forbidden or any(m in k.lower() for m in markers)
    )
    if not (job.get("forbid_vendor_library") and used):
        return []
    return [
        {
            "check": "vendor_library",
            "severity": "reject",
            "detail": f"the problem forbids the vendor library; run() called {', '.join(used)}",
        }
    ]


# ---------------------------------------------------------------- timing


def _time(subject: Subject, op: Op, problem: Problem, job: dict) -> dict[str, Any]:
    """Candidate and baselines interleaved (harness/timing.py); a few timed outputs kept."""
    import os

    from harness import gpu_state, timing
    from harness.judge import baselines
    from harness.results import Regime

    device = job["device"]
    regime = Regime(job["regime"])
    spec = op.output_spec(problem)
    started = time.perf_counter()
    own_cache = os.environ.get("TRITON_CACHE_DIR")
    if own_cache:  # baselines compile into a cache of their own (trusted, never shared)
        os.environ["TRITON_CACHE_DIR"] = own_cache + "-baselines"
    try:
        base_fns = baselines.make(job["baselines"], op, problem, device, job.get("cublaslt_dir"))
    finally:
        if own_cache:
            os.environ["TRITON_CACHE_DIR"] = own_cache
    built_s = time.perf_counter() - started
    state_before = state_after = None
    uuid = None
    if device == "cuda":
        uuid = gpu_state.device_uuid()
        state_before = gpu_state.snapshot(uuid)
    n_sets = job.get("input_sets", 2)

    def fresh_inputs(name: str, seed: int) -> list[torch.Tensor]:
        made = op.make_inputs(problem, seed=seed, device=device)
        # Device to device: through the host, every timed call of a large problem waited on
        # two copies of its inputs over PCIe.
        return [place(subject, t) for t in made] if name == "candidate" else list(made)

    sets = {
        name: [fresh_inputs(name, secrets.randbits(62)) for _ in range(n_sets)]
        for name in ["candidate", *base_fns.built]
    }
    outs = {
        name: torch.empty(spec.shape, dtype=spec.dtype, device=device) for name in base_fns.built
    }
    outs["candidate"] = poisoned_output(subject, spec.shape, spec.dtype)[1]
    current = dict.fromkeys(sets, 0)
    subject.bind(problem, sets["candidate"][0], outs["candidate"], prepare=True)
    seeds: dict[str, int] = {}
    spots: list[dict] = []
    chosen = spot_rounds(max(job["min_samples"], 1), job.get("spot_checks", 3))

    def before(name: str, rnd: int) -> None:
        # New values every call: in-place refill on even rounds, fresh buffers on odd ones.
        i = (current[name] + 1) % n_sets
        current[name] = i
        seed = secrets.randbits(62)
        fresh = fresh_inputs(name, seed)
        if rnd % 2 == 0:
            for buf, new in zip(sets[name][i], fresh, strict=True):
                buf.copy_(new)
        else:
            sets[name][i] = fresh
        seeds[name] = seed
        if name == "candidate":
            outs[name].fill_(float("nan"))
            subject.bind(problem, sets[name][i], outs[name], prepare=False)

    def after(name: str, rnd: int) -> None:
        if name == "candidate" and rnd in chosen:
            if device == "cuda":
                torch.cuda.synchronize()
            spots.append(
                {
                    "seed": seeds[name],
                    "out": outs[name].to("cpu", copy=True),
                    "label": f"timed call {rnd}",
                }
            )

    fns = {"candidate": subject.call}
    for name, fn in base_fns.built.items():
        fns[name] = _bound_baseline(fn, sets, current, outs, name)
    started = time.perf_counter()
    samples = timing.time_interleaved(
        fns,
        regime=regime,
        min_samples=job["min_samples"],
        max_samples=job["max_samples"],
        target_rel_err=job["target_rel_err"],
        before=before,
        after=after,
        max_seconds=job.get("max_seconds", 120.0),
        server_gap_ms=job.get("server_gap_ms", 2.0),
    )
    interleaved_s = time.perf_counter() - started
    if device == "cuda":
        state_after = gpu_state.snapshot(uuid)  # before the GPU idles: the re-check follows
    # One more call on fresh inputs in fresh buffers after timing.
    seed = secrets.randbits(62)
    fresh = fresh_inputs("candidate", seed)
    out = poisoned_output(subject, spec.shape, spec.dtype)[1]
    subject.bind(problem, fresh, out, prepare=False)
    subject.call()
    if device == "cuda":
        torch.cuda.synchronize()
    spots.append(
        {"seed": seed, "out": out.to("cpu", copy=True), "label": "fresh call after timing"}
    )
    timed: dict[str, Any] = {
        "samples": {
            name: {"synced": s.synced_us, "plain": s.plain_us, "host": s.host_us}
            for name, s in samples.items()
        },
        "preroll": {
            name: {
                "us": s.preroll_us,
                "launch_us": s.launch_us,
                "table": s.preroll_table,
                "regrown": s.regrown,
            }
            for name, s in samples.items()
            if s.preroll_table
        },
        "baseline_errors": base_fns.errors,
        # Where the timing phase goes: building the baselines (torch.compile's autotuning, the
        # cuBLASLt search) and the interleaved loop with its calibration; samples per function.
        "phase_s": {
            "time_baselines_build": round(built_s, 3),
            **{f"time_build_{name}": s for name, s in base_fns.seconds.items()},
            **base_fns.parts,
            **_inductor_cache_counts(),
            "time_interleaved": round(interleaved_s, 3),
            "time_samples": max(
                (len(s.synced_us or s.host_us) for s in samples.values()), default=0
            ),
        },
        "spots": spots,
    }
    if device == "cuda":
        timed["clocks"] = _clocks()
        timed["gpu_state"] = {"before": state_before, "after": state_after}
    return timed


def _inductor_cache_counts() -> dict[str, int]:
    """Whether the compile baseline came from Inductor's caches (graph, autotuning) or was
    built again: what its build time depends on. Nothing without that baseline: importing
    Dynamo only to read its counters would take seconds."""
    if "torch._dynamo.utils" not in sys.modules:
        return {}
    from torch._dynamo.utils import counters

    wanted = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")
    return {f"inductor_{k}": int(counters["inductor"][k]) for k in wanted}


def spot_rounds(rounds: int, budget: int) -> set[int]:
    """Which timed rounds keep their output for the re-check: secret, and at least one even
    round (inputs refilled in place: same addresses, new values) and one odd round (fresh
    buffers). Purely random rounds missed an address-keyed cache about one run in eight
    (H200, 2026-11-22)."""
    chosen: set[int] = set()
    if budget <= 0:
        return chosen
    evens, odds = range(0, rounds, 2), range(1, rounds, 2)
    for parity in (evens, odds):
        if parity and len(chosen) < budget:
            chosen.add(parity[secrets.randbelow(len(parity))])
    while len(chosen) < min(budget, rounds):
        chosen.add(secrets.randbelow(rounds))
    return chosen


def _bound_baseline(fn, sets, current, outs, name):
    def call() -> None:
        fn(*sets[name][current[name]], out=outs[name])

    return call


def _clocks() -> dict:
    try:
        return {"sm_mhz": torch.cuda.clock_rate(), "temperature_c": torch.cuda.temperature()}
    except Exception as exc:  # noqa: BLE001  (NVML missing is not fatal)
        return {"error": str(exc)[:200]}
