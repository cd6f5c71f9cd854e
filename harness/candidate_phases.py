"""Untrusted phases: everything that imports or calls a candidate runs here, in its sandbox.

candidate_cases      every correctness case, poisoned + guarded outputs -> outputs.pt
candidate_time       candidate and baselines interleaved; a few timed outputs kept (spots.pt)
candidate_sanitize   under compute-sanitizer (the parent reads the tool's log)
candidate_precompile import + compile-only calls, timing nothing (harness/precompile.py)
profile_target       one call inside an NVTX range for Nsight Compute

What these report is judged by the parent and the trusted oracle phases (oracle_phases.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from harness import cases as cases_mod
from harness.compiling import (
    call_at_shapes,
    compile_only_launches,
    is_compile_error,
    is_cuda_fault,
)
from harness.ops import VENDOR_ATEN_OPS, VENDOR_KERNEL_MARKERS, resolve_op
from harness.redact import candidate_traceback
from kernels.problem import Problem


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _prime() -> None:
    """Import what harness code and torch import lazily, so the identity snapshot taken next
    holds their final functions (torch.profiler's import rebinds torch.manual_seed, say)."""
    import torch.profiler  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401
    import triton.testing  # noqa: F401

    from harness import timing  # noqa: F401

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities):
        pass  # starting a profiler imports torch._dynamo, which rebinds torch.manual_seed


def load_candidate_module(job: dict, watch=None):
    """Import the candidate; returns (module, compile dict)."""
    from harness import cuda_ext, runtime

    t0 = time.perf_counter()
    threads = runtime.ThreadMark.now()
    try:
        module = runtime.load_candidate(job["source"], job["workdir"])
    except BaseException as exc:  # noqa: BLE001  (anything a module import can raise)
        return None, {
            "ok": False,
            "log": candidate_traceback(exc, job["workdir"], limit=6000),
            "seconds": time.perf_counter() - t0,
        }
    info = {"ok": True, "log": "", "seconds": time.perf_counter() - t0}
    info.update(cuda_ext.last_build_report())
    if watch is not None and watch.changed():
        info["import_patches"] = watch.changed()
    # A thread started at import is in every later call's "before" set: judge it here.
    started = threads.new_since()
    if started:
        info["import_threads"] = started
    return module, info


def _import_findings(info: dict) -> list[dict]:
    found = []
    patched = info.get("import_patches") or []
    if patched:
        found.append(
            {
                "check": "monkeypatch",
                "severity": "reject",
                "detail": f"replaced at import: {', '.join(patched[:8])}",
            }
        )
    threads = info.get("import_threads") or []
    if threads:
        found.append(
            {
                "check": "thread",
                "severity": "reject",
                "detail": f"threads started at import and still running: {', '.join(threads[:8])}",
            }
        )
    return found


def candidate_cases(job: dict) -> dict:
    from harness import runtime

    device = job["device"]
    sync = _sync(device)
    cases = cases_mod.load_tensors(Path(job["workdir"]) / "cases.pt")
    # Everything the checks compare against is captured before the candidate is imported.
    _prime()
    watch = runtime.PatchWatch()
    module, compile_info = load_candidate_module(job, watch)
    if module is None:
        return {"compile": compile_info}
    findings: list[dict] = _import_findings(compile_info)
    saved: list[dict] = []
    kernels: set[str] = set()
    op_name = job["problem"]["op"]
    error = None
    prepared: set[tuple] = set()
    for index, case in enumerate(cases):
        problem = Problem.from_dict(case["problem"])
        op = resolve_op(problem.op, job.get("op_ref", ""))
        spec = op.output_spec(problem)
        n = 1
        for s in spec.shape:
            n *= s
        g = cases_mod.GUARD_ELEMENTS
        guard = cases_mod.guard_pattern(g, spec.dtype, case["guard_seed"], device)
        runs = []
        after = None
        try:
            for rep in range(case["runs"]):
                if rep and device == "cuda":
                    # Other memory state for the determinism run: dirty the caching allocator.
                    scratch = torch.empty(64 * 2**20, dtype=torch.uint8, device=device).random_()
                    del scratch
                inputs = [t.to(device).clone() for t in case["inputs"]]
                padded = torch.full((2 * g + n,), float("nan"), dtype=spec.dtype, device=device)
                padded[:g] = guard[:g]
                padded[g + n :] = guard[g:]
                out = padded[g : g + n].view(spec.shape)
                key = (tuple(problem.shape), problem.dtype)
                if key not in prepared and callable(getattr(module, "prepare", None)):
                    module.prepare(*[t.clone() for t in inputs])
                    prepared.add(key)
                audit = index == 0 and rep == 0
                if audit:
                    check, names = _audited_call(runtime, module, inputs, out, watch, sync, device)
                    kernels |= names
                else:
                    check = runtime.guarded_call(module, inputs, out, watch, sync)
                findings += check.findings()
                runs.append(padded.cpu())
                if rep == 0:
                    after = [t.cpu() for t in inputs]
        except BaseException as exc:  # noqa: BLE001  (a candidate may raise anything)
            error = {
                "case": case["name"],
                "kind": "cuda_fault"
                if is_cuda_fault(exc)
                else ("compile" if is_compile_error(exc) else "raised"),
                "detail": candidate_traceback(exc, job["workdir"], limit=4000),
            }
            break
        saved.append({"runs": runs, "inputs_after": after})
    if error and error["kind"] != "raised":
        # A poisoned CUDA context cannot copy anything back; nothing more to check anyway.
        return {"compile": compile_info, "findings": _dedupe(findings), "error": error}
    torch.save(saved, Path(job["workdir"]) / "outputs.pt")
    forbidden = VENDOR_ATEN_OPS.get(op_name, frozenset())
    markers = VENDOR_KERNEL_MARKERS.get(op_name, ())
    used = sorted(k for k in kernels if k in forbidden or any(m in k.lower() for m in markers))
    if job.get("forbid_vendor_library") and used:
        findings.append(
            {
                "check": "vendor_library",
                "severity": "reject",
                "detail": f"the problem forbids the vendor library; run() called {', '.join(used)}",
            }
        )
    return {
        "compile": compile_info,
        "findings": _dedupe(findings),
        "error": error,
        "kernels": sorted(k for k in kernels if not k.startswith("aten::"))[:50],
        "aten_ops": sorted(k for k in kernels if k.startswith("aten::"))[:100],
    }


def _audited_call(runtime, module, inputs, out, watch, sync, device):
    """One call under torch.profiler: which aten ops and GPU kernels did run() use?"""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        check = runtime.guarded_call(module, inputs, out, watch, sync)
    names = {evt.name for evt in prof.events()}
    return check, names


def _dedupe(findings: list[dict]) -> list[dict]:
    seen, out = set(), []
    for f in findings:
        key = (f["check"], f["detail"])
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def candidate_time(job: dict) -> dict:
    """Time candidate and baselines interleaved; keep a few timed outputs for re-checking."""
    import secrets

    from harness import baselines, gpu_state, runtime, timing
    from harness.results import Regime

    device = job["device"]
    regime = Regime(job["regime"])
    problem = Problem.from_dict(job["problem"])
    op = resolve_op(problem.op, job.get("op_ref", ""))
    spec = op.output_spec(problem)
    # Baselines are built before the candidate is imported (trusted code, trusted state).
    # Baselines compile into a Triton cache the candidate never wrote to. Its own cache is
    # seeded from earlier evaluations of the same source (harness/precompile.py), so it could
    # hold a planted, slow kernel under the hash of Inductor's baseline kernel.
    own_cache = os.environ.get("TRITON_CACHE_DIR")
    if own_cache:
        os.environ["TRITON_CACHE_DIR"] = own_cache + "-baselines"  # never kept or seeded
    try:
        base_fns = baselines.make(job["baselines"], op, problem, device, job.get("cublaslt_dir"))
    finally:
        if own_cache:
            os.environ["TRITON_CACHE_DIR"] = own_cache
    _prime()
    watch = runtime.PatchWatch()
    module, compile_info = load_candidate_module(job, watch)
    if module is None:
        return {"compile": compile_info}
    sync = _sync(device)
    if device == "cuda":
        # Clocks and throttle reasons around timing (warn-only; harness/gpu_state.py).
        uuid = gpu_state.device_uuid()
        state_before = gpu_state.snapshot(uuid)
    n_sets = job.get("input_sets", 2)
    sets = {}
    for name in ["candidate", *base_fns.built]:
        sets[name] = [
            [t.clone() for t in op.make_inputs(problem, seed=secrets.randbits(62), device=device)]
            for _ in range(n_sets)
        ]
    outs = {name: torch.empty(spec.shape, dtype=spec.dtype, device=device) for name in sets}
    if callable(getattr(module, "prepare", None)):
        module.prepare(*[t.clone() for t in sets["candidate"][0]])
    current = dict.fromkeys(sets, 0)
    threads_before = runtime._active_count()
    seeds: dict[str, int] = {}
    findings: list[dict] = _import_findings(compile_info)
    spots: list[dict] = []
    spot_budget = job.get("spot_checks", 3)
    chosen_rounds = spot_rounds(max(job["min_samples"], 1), spot_budget)

    def before(name: str, rnd: int) -> None:
        # New values every call: in-place refill on even rounds, fresh buffers on odd ones.
        i = (current[name] + 1) % n_sets
        current[name] = i
        seed = secrets.randbits(62)
        fresh = op.make_inputs(problem, seed=seed, device=device)
        if rnd % 2 == 0:
            for buf, new in zip(sets[name][i], fresh, strict=True):
                buf.copy_(new)
        else:
            sets[name][i] = list(fresh)
        seeds[name] = seed
        if name == "candidate":
            outs[name].fill_(float("nan"))

    def after(name: str, rnd: int) -> None:
        if name != "candidate":
            return
        sync()
        now = runtime._active_count()
        extra = [f"{now - threads_before} new"] if now > threads_before else []
        check = runtime.CallCheck(
            0, now, extra, watch.changed(), "", runtime._type_name(outs[name]), False
        )
        findings.extend(check.findings())
        if rnd in chosen_rounds:
            spots.append(
                {
                    "seed": seeds[name],
                    "out": outs[name].to("cpu", copy=True),
                    "label": f"timed call {rnd}",
                }
            )

    def call_candidate() -> None:
        module.run(*sets["candidate"][current["candidate"]], out=outs["candidate"])

    fns = {"candidate": call_candidate}
    for name, fn in base_fns.built.items():
        fns[name] = _bind_baseline(fn, sets, current, outs, name)
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
    if device == "cuda":
        state_after = gpu_state.snapshot(uuid)  # before the GPU idles: the re-check follows
    if runtime._active_count() > threads_before:
        findings.append(
            {"check": "thread", "severity": "reject", "detail": "threads appeared while timing"}
        )
    # Re-check on fresh inputs after timing (fresh allocation, new seed).
    seed = secrets.randbits(62)
    fresh = op.make_inputs(problem, seed=seed, device=device)
    out = torch.full(spec.shape, float("nan"), dtype=spec.dtype, device=device)
    module.run(*fresh, out=out)
    sync()
    spots.append({"seed": seed, "out": out.cpu(), "label": "fresh call after timing"})
    torch.save(spots, Path(job["workdir"]) / "spots.pt")
    result = {
        "compile": compile_info,
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
        "findings": _dedupe(findings),
        "baseline_errors": base_fns.errors,
    }
    if device == "cuda":
        result["clocks"] = _clocks()
        result["gpu_state"] = {"before": state_before, "after": state_after}
    return result


def spot_rounds(rounds: int, budget: int) -> set[int]:
    """Which timed rounds keep their output for the re-check: secret, and at least one even
    round (inputs refilled in place: same addresses, new values, so a result cached by address
    is replayed stale and caught for certain) and one odd round (fresh buffers). Purely random
    rounds missed an address-keyed cache about one run in eight (H200, 2026-11-22)."""
    import secrets

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


def _bind_baseline(fn, sets, current, outs, name):
    def call() -> None:
        fn(*sets[name][current[name]], out=outs[name])

    return call


def _clocks() -> dict:
    try:
        return {"sm_mhz": torch.cuda.clock_rate(), "temperature_c": torch.cuda.temperature()}
    except Exception as exc:  # noqa: BLE001  (NVML missing is not fatal)
        return {"error": str(exc)[:200]}


def profile_target(job: dict) -> dict:
    """Warm up outside the NVTX range, then exactly one candidate call inside it (R6.1)."""
    device = job["device"]
    problem = Problem.from_dict(job["problem"])
    op = resolve_op(problem.op, job.get("op_ref", ""))
    spec = op.output_spec(problem)
    module, compile_info = load_candidate_module(job)
    if module is None:
        return {"compile": compile_info}
    inputs = op.make_inputs(problem, seed=job["seed"], device=device)
    out = torch.empty(spec.shape, dtype=spec.dtype, device=device)
    if callable(getattr(module, "prepare", None)):
        module.prepare(*[t.clone() for t in inputs])
    for _ in range(3):
        module.run(*inputs, out=out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(job["nvtx"])
    module.run(*inputs, out=out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return {"compile": compile_info}


def candidate_sanitize(job: dict) -> dict:
    """Run under compute-sanitizer (harness/sanitizer.py): the smoke shape and one odd sweep
    shape, prepare() and two calls each. The verdict comes from the tool's log, read by the
    parent; this only reports how many calls finished (a clean log of no calls proves nothing)."""
    problem = Problem.from_dict(job["problem"])
    op = resolve_op(problem.op, job.get("op_ref", ""))
    device = job["device"]  # "cuda"; "cpu" only in the CPU tests of the wrapper itself
    module, compile_info = load_candidate_module(job)
    if module is None:
        return {"compile": compile_info, "calls": 0, "error": compile_info["log"][-1000:]}
    odd = [p for p in op.sweep(problem) if p != problem and any(s % 2 for s in p.shape)]
    shapes = [problem, *odd[len(odd) // 2 :][:1]]  # a mid-sized odd shape
    calls = 0
    try:
        for i, p in enumerate(shapes):
            spec = op.output_spec(p)
            inputs = op.make_inputs(p, seed=job["seed"] + i, device=device)
            if callable(getattr(module, "prepare", None)):
                module.prepare(*[t.clone() for t in inputs])
            for _ in range(2):
                out = torch.full(spec.shape, float("nan"), dtype=spec.dtype, device=device)
                module.run(*[t.clone() for t in inputs], out=out)
                _sync(device)()
                calls += 1
    except BaseException as exc:  # noqa: BLE001  (the tool's log says what went wrong)
        return {"calls": calls, "error": candidate_traceback(exc, job["workdir"], limit=2000)}
    return {"calls": calls, "shapes": ["x".join(map(str, p.shape)) for p in shapes]}


def candidate_precompile(job: dict) -> dict:
    """Import the candidate and call it once per shape with kernel launches made compile-only
    (Triton; a CUDA C++ candidate is built by its import alone): harness/precompile.py."""
    device = job["device"]
    t0 = time.perf_counter()
    module, info = load_candidate_module(job)
    if module is None:
        return {**info, "failure": "compile"}
    if device == "cuda" and job["backend"] == "cuda":
        # CUDA C++ builds at import (harness/cuda_ext.py); a call would run the kernel on the
        # GPU that another candidate is being timed on.
        return {"ok": True, "seconds": time.perf_counter() - t0}
    if device == "cuda":
        compile_only_launches()
    try:
        problems = [Problem.from_dict(p) for p in job["shapes"]]
        op = resolve_op(problems[0].op, job.get("op_ref", ""))
        call_at_shapes(module, op, problems, device)
    except BaseException as exc:  # noqa: BLE001  (a candidate may raise anything)
        return {
            "ok": False,
            "failure": "compile" if is_compile_error(exc) else "raised",
            "log": candidate_traceback(exc, job["workdir"], limit=6000),
            "seconds": time.perf_counter() - t0,
        }
    return {"ok": True, "seconds": time.perf_counter() - t0}
