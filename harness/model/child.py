"""Inside the sandbox: build an uploaded model (untrusted), profile it, or run it with kernels
substituted. Reached through phases.run for phases named model_*; the parent side is
model_profile.py and model_verify.py.

Failures of the model's own code are results (stage + message), not harness errors, so the
parent can tell the user "get_inputs() raised ..." rather than "the sandbox failed".
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

from harness.model.trace import MODULE_PREFIX, STEP_PREFIX, record_to_dict, records_from_trace


class ModelStageError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def run_phase(phase: str, job: dict) -> dict:
    handler = {"model_profile": profile, "model_verify": verify}[phase]
    try:
        return handler(job)
    except ModelStageError as exc:
        return {"ok": False, "stage": exc.stage, "error": str(exc)}


def _tail(exc: BaseException) -> str:
    lines = traceback.format_exception(exc)
    return "".join(lines)[-3000:]


def _stage(stage: str, fn, *args):
    try:
        return fn(*args)
    except torch.cuda.OutOfMemoryError as exc:
        raise ModelStageError(
            stage, f"out of GPU memory (the cap is set by the job): {exc}"
        ) from exc
    except MemoryError as exc:
        raise ModelStageError(stage, "out of memory (the job's memory cap)") from exc
    except BaseException as exc:  # noqa: BLE001  (user code may raise anything, SystemExit too)
        raise ModelStageError(stage, _tail(exc)) from exc


def _import(path: str):
    spec = importlib.util.spec_from_file_location("kf_user_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kf_user_model"] = module
    spec.loader.exec_module(module)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise AttributeError(f"the model file does not define {', '.join(missing)}")
    return module


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(_to(v, device) for v in value)
    return value


def build(job: dict):
    """(model, inputs) on the job's device, seeded; each step's failure names its stage."""
    device = job["device"]
    if device == "cuda" and job.get("gpu_memory_bytes"):
        # No cgroup bounds GPU memory: cap the caching allocator at the job's memory cap.
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, job["gpu_memory_bytes"] / total))
    torch.manual_seed(int(job.get("seed", 0)))
    module = _stage("import", _import, job["model_path"])
    init = _stage("get_init_inputs", lambda: list(module.get_init_inputs()))
    model = _stage("init", lambda: module.Model(*init))
    if not isinstance(model, torch.nn.Module):
        raise ModelStageError("init", "Model(...) did not return a torch.nn.Module")
    model = _stage("init", lambda: model.to(device).eval())
    inputs = _stage("get_inputs", lambda: [_to(x, device) for x in module.get_inputs()])
    return model, inputs


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _forward(model, inputs, device):
    with torch.no_grad():
        out = model(*inputs)
    _sync(device)
    return out


def _shape_of(value):
    return list(value.shape) if isinstance(value, torch.Tensor) else None


def _annotate_modules(model) -> dict[str, dict]:
    """Wrap every submodule's forward in a record_function named after its path, and note what
    each one was called with (shapes, dtype, parameters) the first time."""
    table: dict[str, dict] = {}
    for path, mod in model.named_modules():
        if not path:
            continue

        def pre(m, args, path=path):
            if path not in table:
                first = next((a for a in args if isinstance(a, torch.Tensor)), None)
                table[path] = {
                    "cls": type(m).__name__,
                    "input": _shape_of(first),
                    "dtype": str(first.dtype).removeprefix("torch.") if first is not None else "",
                    "params": {n: list(p.shape) for n, p in m.named_parameters(recurse=False)},
                    "buffers": {n: list(b.shape) for n, b in m.named_buffers(recurse=False)},
                    "eps": _eps(m),
                    "dim": getattr(m, "dim", None)
                    if isinstance(getattr(m, "dim", None), int)
                    else None,
                }
            rf = torch.autograd.profiler.record_function(MODULE_PREFIX + path)
            rf.__enter__()
            m._kf_rf = rf

        def post(m, args, output):
            rf = getattr(m, "_kf_rf", None)
            if rf is not None:
                rf.__exit__(None, None, None)
                m._kf_rf = None

        mod.register_forward_pre_hook(pre)
        mod.register_forward_hook(post)
    return table


def _eps(m) -> float | None:
    for name in ("eps", "variance_epsilon", "epsilon"):
        value = getattr(m, name, None)
        if isinstance(value, float | int):
            return float(value)
    return None


def profile(job: dict) -> dict:
    """Warm up, then profile `steps` forward calls; records every kernel with its op stack."""
    device = job["device"]
    model, inputs = build(job)
    t0 = time.perf_counter()
    for _ in range(int(job.get("warmup", 3))):
        _stage("forward", _forward, model, inputs, device)
    warm_s = time.perf_counter() - t0
    # Plain forward wall time (no profiler): with the kernel time it says whether the GPU is
    # the bottleneck at all; a host-bound model gains little from faster kernels.
    plain = []
    for _ in range(int(job.get("plain_steps", 5))):
        s = time.perf_counter()
        _stage("forward", _forward, model, inputs, device)
        plain.append((time.perf_counter() - s) * 1e6)
    table = _annotate_modules(model)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    steps = int(job.get("steps", 3))
    wall = []
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for i in range(steps):
            s = time.perf_counter()
            with torch.autograd.profiler.record_function(f"{STEP_PREFIX}#{i}"):
                _stage("forward", _forward, model, inputs, device)
            wall.append((time.perf_counter() - s) * 1e6)
    trace_path = Path(job["workdir"]) / "trace.json"
    prof.export_chrome_trace(str(trace_path))
    trace = json.loads(trace_path.read_text())
    records, counted = records_from_trace(trace)
    if not job.get("keep_trace"):
        os.unlink(trace_path)
    return {
        "ok": True,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "steps": counted,
        "step_wall_us": wall,
        "forward_wall_us": sorted(plain)[len(plain) // 2] if plain else None,
        "warmup_s": warm_s,
        "modules": table,
        "records": [record_to_dict(r) for r in records],
    }


# ---------------------------------------------------------------- end-to-end verification


def verify(job: dict) -> dict:
    """Reference outputs, then the same model with the winning kernels substituted: compare,
    then time both interleaved with the harness protocol (kf-timing-v1)."""
    from harness import runtime, timing
    from harness.model import patch as model_patch
    from harness.results import Regime

    device = job["device"]
    model, inputs = build(job)
    ref = _stage("forward", _forward, model, [_clone(x) for x in inputs], device)
    kernels = {}
    for i, sub in enumerate(job["substitutions"]):
        try:
            kernels[sub["key"]] = runtime.load_candidate(
                sub["source"], job["workdir"], f"kf_sub_{i}"
            )
        except BaseException as exc:  # noqa: BLE001
            raise ModelStageError("load_kernel", f"{sub['key']}: {_tail(exc)}") from exc
    patcher = model_patch.patch(model, kernels)
    patcher.enabled = True
    got = _stage("forward_substituted", _forward, model, [_clone(x) for x in inputs], device)
    hits = dict(patcher.hits)
    compare = _compare(ref, got, job.get("tolerance"))
    regime = Regime.OFFLINE if device == "cuda" else Regime.INTERPRETER

    def original():
        patcher.enabled = False
        with torch.no_grad():
            model(*inputs)

    def substituted():
        patcher.enabled = True
        with torch.no_grad():
            model(*inputs)

    samples = timing.time_interleaved(
        {"original": original, "substituted": substituted},
        regime=regime,
        min_samples=int(job.get("min_samples", 10)),
        max_samples=int(job.get("max_samples", 50)),
        target_rel_err=0.01,
        warmup_calls=3,
        max_seconds=float(job.get("max_timing_s", 60)),
    )
    stats = {name: dataclasses.asdict(s.stats()) for name, s in samples.items()}
    lo, hi = timing.speedup_ci(
        samples["original"].synced_us or samples["original"].host_us,
        samples["substituted"].synced_us or samples["substituted"].host_us,
    )
    result = {
        "ok": True,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "hits": hits,
        "unused": sorted(set(kernels) - set(hits)),
        "skipped": patcher.skipped,
        "compare": compare,
        "timing": stats,
        "speedup_ci": [lo, hi],
        "regime": regime.value,
    }
    if device == "cuda" and job.get("extra_timings", True):
        # Two more views of the same pair, each with one protocol for both sides:
        # launch-bound eager (an idle GPU before every call, so the host's Python and kernel
        # launches are in the time, as for an eager caller that waits on each forward), and
        # CUDA-graph replay (no host work at all: what the kernels alone give end to end).
        result["launch_bound"] = _timed_pair(
            {"original": original, "substituted": substituted},
            Regime.SERVER,
            job,
        )
        result["graphed"] = _graphed(model, inputs, patcher, ref, job)
        patcher.enabled = True
    return result


def _timed_pair(fns: dict, regime, job: dict) -> dict:
    """original vs substituted under one protocol: medians, ratio and its bootstrap interval."""
    from harness import timing

    samples = timing.time_interleaved(
        fns,
        regime=regime,
        min_samples=int(job.get("min_samples", 10)),
        max_samples=int(job.get("max_samples", 50)),
        target_rel_err=0.01,
        warmup_calls=3,
        max_seconds=float(job.get("max_timing_s", 60)),
    )
    orig = samples["original"].synced_us
    sub = samples["substituted"].synced_us
    o_med, s_med = statistics.median(orig), statistics.median(sub)
    lo, hi = timing.speedup_ci(orig, sub)
    return {
        "regime": regime.value,
        "original_us": o_med,
        "substituted_us": s_med,
        "speedup": o_med / s_med if s_med > 0 else None,
        "speedup_ci": [lo, hi],
        "samples": len(orig),
        "timing": {name: dataclasses.asdict(s.stats()) for name, s in samples.items()},
    }


def _capture(model, inputs, patcher, enabled: bool):
    """One forward, kernels substituted or not, captured in a CUDA graph: (graph, output).

    Warm-up on a side stream first (as torch.cuda.graphs asks: lazy init, cuBLAS workspaces,
    Triton compiles happen outside the capture). The graph reads `inputs` in place."""
    patcher.enabled = enabled
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            model(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: a harness thread's CUDA call (heartbeat, clocks) must not void the capture.
    with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = model(*inputs)
    return graph, out


def _graphed(model, inputs, patcher, ref, job: dict) -> dict:
    """Both forwards as CUDA graphs, checked against the eager reference, then timed with the
    same OFFLINE protocol. A model (or kernel) that cannot be captured is reported, not fatal:
    the eager numbers stand on their own."""
    from harness.results import Regime

    try:
        static = [_clone(x) for x in inputs]
        graphs, outs = {}, {}
        for name, enabled in (("original", False), ("substituted", True)):
            graphs[name], outs[name] = _capture(model, static, patcher, enabled)
        compare = {}
        for name, graph in graphs.items():
            graph.replay()
            torch.cuda.synchronize()
            compare[name] = _compare(ref, outs[name], job.get("tolerance"))
        result = _timed_pair({n: g.replay for n, g in graphs.items()}, Regime.OFFLINE, job)
        del graphs, outs
        passed = all(c.get("passed") for c in compare.values())
        return result | {"ok": passed, "compare": compare}
    except Exception as exc:  # noqa: BLE001  (a capture failure is a finding, not a crash)
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        return {"ok": False, "error": _tail(exc)}


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _flatten(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _flatten(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flatten(v)]
    return []


# End-to-end tolerance: relative L2 error of each output (errors add up across layers, so an
# elementwise bound tuned for one op would be too strict or meaningless here).
REL_L2_TOL = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4}


def _compare(ref, got, tolerance: float | None) -> dict:
    refs, gots = _flatten(ref), _flatten(got)
    if len(refs) != len(gots):
        return {"passed": False, "reason": f"{len(gots)} outputs, expected {len(refs)}"}
    outputs = []
    passed = True
    for r, g in zip(refs, gots, strict=True):
        if r.shape != g.shape or r.dtype != g.dtype:
            outputs.append({"shape": list(g.shape), "reason": "shape or dtype differs"})
            passed = False
            continue
        rf, gf = r.double(), g.double()
        finite = bool(torch.isfinite(gf).all()) or not bool(torch.isfinite(rf).all())
        rel = float((gf - rf).norm() / rf.norm().clamp_min(1e-30))
        tol = tolerance or REL_L2_TOL.get(str(r.dtype).removeprefix("torch."), 1e-4)
        ok = finite and rel <= tol
        passed = passed and ok
        outputs.append(
            {
                "shape": list(r.shape),
                "dtype": str(r.dtype).removeprefix("torch."),
                "rel_l2": rel,
                "max_abs": float((gf - rf).abs().max()) if r.numel() else 0.0,
                "tolerance": tol,
                "finite": finite,
                "passed": ok,
            }
        )
    return {"passed": passed, "outputs": outputs}
