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
import statistics
import sys
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.model.classify import allows_tf32, describe
from harness.model.trace import MODULE_PREFIX, STEP_PREFIX, record_to_dict, records_from_trace


class ModelStageError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def run_phase(phase: str, job: dict) -> dict:
    handler = {"model_profile": profile, "model_verify": verify, "model_screen": screen}[phase]
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
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the model file {path}")
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
    # The uploaded file travels in the job (the child sees no host folder of ours) and is
    # written into its own scratch.
    path = Path(job["workdir"]) / "model.py"
    path.write_text(job["model_source"])
    module = _stage("import", _import, str(path))
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


def _annotate_modules(model) -> dict[str, dict]:
    """Wrap every submodule's forward in a record_function named after its path, and note what
    each one was called with (model_classify.describe) the first time."""
    table: dict[str, dict] = {}
    for path, mod in model.named_modules():
        if not path:
            continue

        def pre(m, args, path=path):
            if path not in table:
                first = next((a for a in args if isinstance(a, torch.Tensor)), None)
                table[path] = describe(m, first)
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


def profile(job: dict) -> dict:
    """Warm up; time plain forwards; find the sites (where fusions could go); compile and
    profile the compiled model (GPU by default); then profile `steps` eager forward calls with
    every kernel tied to its op stack and module."""
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
    try:
        sites: list[dict] | dict = find_sites(model, inputs)
    except Exception as exc:  # noqa: BLE001  (no capture: no fusions, the rest still works)
        sites = {"error": _tail(exc)}
    compiled = None
    if job.get("compiled", device == "cuda"):
        compiled = _compiled_profile(model, inputs, job)
    table = _annotate_modules(model)  # after the captures: Dynamo must not trace the hooks
    records, counted, wall = _profiled(model, inputs, job, "trace.json")
    return {
        "ok": True,
        "trace": _kept_trace(job, "trace.json"),
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "steps": counted,
        "step_wall_us": wall,
        "forward_wall_us": sorted(plain)[len(plain) // 2] if plain else None,
        "warmup_s": warm_s,
        "modules": table,
        "records": [record_to_dict(r) for r in records],
        "sites": sites if isinstance(sites, list) else [],
        "sites_error": sites.get("error", "") if isinstance(sites, dict) else "",
        "compiled": compiled,
    }


# ---------------------------------------------------------------- screening our families


def screen(job: dict) -> dict:
    """Each problem's points (our own families' renders: trusted) on the problem's inputs:
    correct against the reference, then timed interleaved with the op's PyTorch baseline; the
    fastest correct one is gated on the op's sweep and adversarial inputs (screen.py)."""
    device = job["device"]
    if device == "cuda" and job.get("gpu_memory_bytes"):
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, job["gpu_memory_bytes"] / total))
    problems = [_screen_one(i, item, job) for i, item in enumerate(job["problems"])]
    return {"ok": True, "problems": problems}


def _screen_one(index: int, item: dict, job: dict) -> dict:
    import kernels
    from harness import runtime, timing
    from harness.results import Regime
    from kernels.checking import check_source, compare
    from kernels.problem import Problem

    device = job["device"]
    problem = Problem.from_dict(item["problem"])
    op = kernels.get_op(problem.op)
    families = {f.name: f for f in op.families()}
    result: dict[str, Any] = {"key": problem.key, "problem": problem.to_dict(), "tried": []}
    try:
        inputs = op.make_inputs(problem, seed=int(job.get("seed", 0)), device=device)
        ref = op.reference(problem, *inputs)
        spec = op.output_spec(problem)
        out = torch.empty(spec.shape, dtype=spec.dtype, device=device)
        base_out = torch.empty_like(out)
    except Exception as exc:  # noqa: BLE001  (too large for the device, say)
        return result | {"error": _tail(exc)}
    tol = op.tolerance(problem)
    regime = Regime.OFFLINE if device == "cuda" else Regime.INTERPRETER
    best = None
    for i, point in enumerate(item["points"]):
        tried = dict(point)
        result["tried"].append(tried)
        try:
            source = families[point["family"]].render(problem, point["params"])
            module = runtime.load_candidate(source, job["workdir"], f"kf_screen_{index}_{i}")
            for _ in range(2):  # the second call takes the cached-launch path
                out.fill_(float("nan"))
                module.run(*inputs, out=out)
            _sync(device)
            closeness = compare(out, ref, tol)
            if not closeness.passed:
                tried["error"] = f"incorrect: worst {closeness.worst_error:.3g} {closeness.detail}"
                continue

            def kernel(m: types.ModuleType = module) -> None:  # bound now: the loop moves on
                m.run(*inputs, out=out)

            def eager() -> None:  # a def: what the baseline may return, timing drops
                op.baseline(problem, *inputs, out=base_out)

            fns: dict[str, Callable[[], None]] = {"kernel": kernel, "torch": eager}
            samples = timing.time_interleaved(
                fns, regime=regime, min_samples=5, max_samples=30, target_rel_err=0.02,
                warmup_calls=3, max_seconds=3.0,
            )  # fmt: skip
            if device == "cuda":
                reported, _ = timing.reported_us(
                    {n: s.synced_us for n, s in samples.items()},
                    {n: s.plain_us for n, s in samples.items()},
                    ["torch"],
                )
            else:
                reported = {n: s.host_us for n, s in samples.items()}
            k_us = timing.summarize(reported["kernel"]).median_us
            t_us = timing.summarize(reported["torch"]).median_us
            tried |= {"kernel_us": k_us, "torch_us": t_us, "speedup": t_us / k_us}
            if best is None or tried["speedup"] > best[0]["speedup"]:
                best = (tried, source)
        except Exception as exc:  # noqa: BLE001  (a point that fails to compile is data)
            tried["error"] = _tail(exc)[-600:]
    if best is None:
        return result | {"error": "no point was correct"}
    tried, source = best
    family = families[tried["family"]]
    gate = []
    for small in op.sweep(problem):
        rendered = family.render(small, tried["params"])
        gate += check_source(op, small, rendered, seed=7, device=device, adversarial=True)
    return result | {
        "family": tried["family"],
        "params": tried["params"],
        "source": source,
        "speedup": tried["speedup"],
        "kernel_us": tried["kernel_us"],
        "torch_us": tried["torch_us"],
        "gate": gate,
    }


# ---------------------------------------------------------------- where fusions could go


def find_sites(model, inputs) -> list[dict]:
    """Capture the model with Dynamo and list every site (sites.py) without changing it."""
    from harness.model.substitute import Substituting, compile_options

    compile_options()
    finder = Substituting(model)
    with torch.no_grad():
        torch.compile(model, backend=finder, dynamic=False)(*inputs)
    return [s.to_dict() for s in finder.sites]


def _inductor_threads(job: dict) -> None:
    import torch._inductor.config as inductor_config

    # Inductor's subprocess compile pool failed inside the sandbox on the H100 (harness/
    # baselines.py); the job may ask for it again (`compile_threads`), else one thread.
    inductor_config.compile_threads = int(job.get("compile_threads", 1))


def _compiled_profile(model, inputs, job: dict) -> dict:
    """torch.compile(model) (default mode) timed to compile, then profiled like the eager model:
    what the compiler leaves slow is what the plan should spend the budget on."""
    device = job["device"]
    try:
        _inductor_threads(job)
        compiled, compile_s = _compiled(lambda: torch.compile(model, dynamic=False), inputs)
        for _ in range(2):
            _forward(compiled, inputs, device)
        plain = []
        for _ in range(int(job.get("plain_steps", 5))):
            s = time.perf_counter()
            _forward(compiled, inputs, device)
            plain.append((time.perf_counter() - s) * 1e6)
        records, counted, wall = _profiled(compiled, inputs, job, "trace_compiled.json")
    except Exception as exc:  # noqa: BLE001  (a model the compiler rejects is a finding)
        return {"ok": False, "error": _tail(exc)}
    return {
        "ok": True,
        "compile_s": compile_s,
        "steps": counted,
        "step_wall_us": wall,
        "forward_wall_us": sorted(plain)[len(plain) // 2],
        "records": [record_to_dict(r) for r in records],
    }


def _profiled(fn, inputs, job: dict, trace_name: str):
    """(kernel records, steps counted, wall us per step) of `steps` profiled forward calls."""
    device = job["device"]
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    wall = []
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for i in range(int(job.get("steps", 3))):
            s = time.perf_counter()
            with torch.autograd.profiler.record_function(f"{STEP_PREFIX}#{i}"):
                _stage("forward", _forward, fn, inputs, device)
            wall.append((time.perf_counter() - s) * 1e6)
    trace_path = Path(job["workdir"]) / trace_name
    prof.export_chrome_trace(str(trace_path))
    records, counted = records_from_trace(json.loads(trace_path.read_text()))
    return records, counted, wall


MAX_TRACE_BYTES = 32 * 2**20


def _kept_trace(job: dict, name: str) -> str | None:
    """The Chrome trace, when the caller keeps it: it travels back in the result (the parent
    writes it where it wants it), capped; the file itself dies with the child's scratch."""
    if not job.get("keep_trace"):
        return None
    text = (Path(job["workdir"]) / name).read_text()
    return text if len(text) <= MAX_TRACE_BYTES else None


# ---------------------------------------------------------------- end-to-end verification

# The ways a user could run the model without us (baselines) and with our kernels (ours):
# name -> (side, how it is built, label). CUDA graphs need a GPU; "compile" variants need
# job["compile"] (on by default on a GPU: a CPU compile takes minutes).
VARIANTS = {
    "eager": ("baseline", "eager", "eager PyTorch"),
    "cuda_graphs": ("baseline", "graph:eager", "CUDA graphs"),
    "compile": ("baseline", "compile", "torch.compile (default)"),
    "compile_max_autotune": (
        "baseline",
        "compile:max-autotune-no-cudagraphs",
        "torch.compile max-autotune-no-cudagraphs",
    ),
    "compile_cuda_graphs": ("baseline", "graph:compile", "torch.compile + CUDA graphs"),
    "ours": ("ours", "ours", "kernels substituted, eager"),
    "ours_cuda_graphs": ("ours", "graph:ours", "kernels substituted + CUDA graphs"),
    "ours_compile": ("ours", "ours_compile", "kernels substituted + torch.compile"),
    "ours_compile_cuda_graphs": (
        "ours",
        "graph:ours_compile",
        "kernels substituted + torch.compile + CUDA graphs",
    ),
}


def _wanted(job: dict, ours: bool) -> list[str]:
    device = job["device"]
    compile_ = bool(job.get("compile", device == "cuda"))
    names = []
    for name, (side, how, _label) in VARIANTS.items():
        if how.startswith("graph:") and device != "cuda":
            continue
        if "compile" in how and not compile_:
            continue
        if how.startswith("compile:max-autotune") and not job.get("max_autotune", True):
            continue
        if side == "ours" and not ours:
            continue  # no kernel won: the model runs unchanged, nothing of ours to time
        names.append(name)
    return [n for n in names if n in job.get("variants", names)]


def verify(job: dict) -> dict:
    """The model run every way in VARIANTS: each output checked against eager PyTorch's, each
    compile timed, then all of them timed interleaved (kf-timing-v2), back to back (OFFLINE)
    and one call at a time (SERVER, GPU only). The result names the best baseline, the best
    way to run the model with the kernels, and the speedup of one over the other."""
    from harness import runtime
    from harness.model import ops as kernel_ops
    from harness.model.substitute import Substituting, compile_options
    from kernels.problem import Problem

    device = job["device"]
    model, inputs = build(job)
    ref = _stage("forward", _forward, model, [_clone(x) for x in inputs], device)
    ops = {}
    for i, sub in enumerate(job["substitutions"]):
        try:
            module = runtime.load_candidate(sub["source"], job["workdir"], f"kf_sub_{i}")
            problem = Problem.from_dict(sub["problem"])
            ops[problem.key] = kernel_ops.kernel_op(problem, module)
        except BaseException as exc:  # noqa: BLE001
            raise ModelStageError("load_kernel", f"{sub['key']}: {_tail(exc)}") from exc
    compile_options()
    _inductor_threads(job)
    rewrites = {}
    if job.get("baseline_rewrites"):
        rewrites = {s.key: s for s in _rewritable(model, inputs) if s.key not in ops}
        ops |= {key: kernel_ops.baseline_op(s.problem) for key, s in rewrites.items()}
    ablation: list[dict] = []
    if job.get("ablate", True) and len(ops) > 1:
        ops, ablation = _ablate(model, inputs, ops, job)
    backends = {
        "ours": Substituting(model, ops),
        "ours_compile": Substituting(model, ops, inner="inductor"),
    }
    built: dict[str, Any] = {}
    report: dict[str, dict] = {}
    for name in _wanted(job, bool(ops)):
        side, how, label = VARIANTS[name]
        entry = report[name] = {"side": side, "label": label, "ok": False}
        made = _build_or_report(how, model, inputs, built, backends, entry, device)
        if made is None:
            continue
        fn, compile_s = made
        built[how] = fn
        entry["compile_s"] = compile_s
        entry["compare"] = _compare(ref, _output(fn, inputs, device), job.get("tolerance"))
        entry["ok"] = bool(entry["compare"]["passed"])
    hits, unused = _hits(built, ops, inputs, device)
    timeable = {n: e for n, e in report.items() if "compare" in e}
    fns = {n: _timed_call(built[VARIANTS[n][1]], inputs) for n in timeable}
    timing = _time_all(fns, job)
    result = {
        "ok": True,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "variants": report,
        "timing": {regime: stats for regime, (stats, _samples) in timing.items()},
        "sites": [s.to_dict() for s in backends["ours"].sites],
        "replaced": [s.to_dict() for s in backends["ours"].replaced],
        "hits": hits,
        "unused": unused,
        "ablation": ablation,
        # The sites that took the op's PyTorch baseline in place of the model's code, no kernel
        "rewrites": [
            {"key": s.key, "where": list(s.where), "saves": s.baseline_saves}
            for s in backends["ours"].replaced
            if s.key in rewrites and s.key in ops
        ],
    }
    first = next(iter(timing))
    if hits:
        result |= headline(report, *timing[first])
    else:  # no kernel ran: "ours" is the model unchanged, and any ratio to it is noise
        result |= headline(
            {n: e for n, e in report.items() if e["side"] == "baseline"}, *timing[first]
        )
    kernels_only = {k: v for k, v in ops.items() if k not in rewrites}
    if result["rewrites"] and kernels_only and result.get("best_ours"):
        try:
            result["package"] = _package(model, inputs, ref, kernels_only, result, built, job)
        except Exception as exc:  # noqa: BLE001 - reported: without this run nothing ships
            _settle(device)
            result["package"] = {"way": result["best_ours"], "ok": False, "error": _tail(exc)}
    result["kernels"] = {
        name: _kernel_table(built, VARIANTS[name][1], inputs, job)
        for name in (result.get("best_baseline"), result.get("best_ours"))
        if name
    }
    return result | {"regime": first}


KERNEL_TABLE_ROWS = 40


def _package(model, inputs, ref, kernels: dict, result: dict, built: dict, job: dict) -> dict:
    """The model as the download package alone runs it: the kernels without the rewrites (a
    rewrite changes the model's own code, which the user does: the package cannot), the best
    way with the kernels again, its output checked and timed interleaved against the best
    baseline. What ships is judged on this, so that no kernel ships on a rewrite's gain."""
    from harness import timing
    from harness.model import ops as kernel_ops
    from harness.model.substitute import Substituting

    device, way, base = job["device"], result["best_ours"], result["best_baseline"]
    how = VARIANTS[way][1]
    inner = how.removeprefix("graph:")
    compiler = "inductor" if inner == "ours_compile" else None
    backends = {inner: Substituting(model, kernels, inner=compiler)}
    made: dict[str, Any] = {}
    kernel_ops.hits.clear()  # the first call (one forward) counts what ran
    made[inner], _ = _build_variant(inner, model, inputs, made, backends)
    entry: dict[str, Any] = {"way": way, "hits": dict(kernel_ops.hits)}
    fn = made[inner] if how == inner else _build_variant(how, model, inputs, made, backends)[0]
    entry["compare"] = _compare(ref, _output(fn, inputs, device), job.get("tolerance"))
    entry["ok"] = bool(entry["compare"]["passed"])
    fns = {base: _timed_call(built[VARIANTS[base][1]], inputs), "package": _timed_call(fn, inputs)}
    stats, samples = next(iter(_time_all(fns, job).values()))  # the headline's regime
    b_us, p_us = stats[base]["median_us"], stats["package"]["median_us"]
    return entry | {
        "baseline": base,
        "baseline_us": b_us,
        "us": p_us,
        "speedup": b_us / p_us if p_us > 0 else None,
        "speedup_ci": list(timing.speedup_ci(samples[base], samples["package"])),
    }


def _output(fn, inputs, device: str):
    """One forward's output: a CUDA graph's own tensor after a replay, else a call's."""
    if isinstance(fn, _Graphed):
        fn()
        _sync(device)
        return fn.output
    return _forward(fn, inputs, device)


def _rewritable(model, inputs) -> list:
    """The model's sites where the op's own PyTorch baseline does less than the model's code
    (sites.Site.baseline_saves), from one capture of its graphs with nothing substituted."""
    from harness.model.substitute import Substituting

    probe = Substituting(model)
    with torch.no_grad():
        torch.compile(model, backend=probe, dynamic=False)(*inputs)
    return [s for s in probe.sites if s.baseline_saves]


def _kernel_table(built: dict, how: str, inputs, job: dict) -> list[dict]:
    """The GPU kernels of one forward of a way of running, slowest first: where the best
    baseline and the best way with our kernels spend their time, side by side (what a fusion
    saved, and what is left). A CUDA graph's way is profiled as the way it captured: the
    same kernels, each one visible to the profiler."""
    fn = built[how.removeprefix("graph:")]
    records, steps, _wall = _profiled(fn, inputs, job, "trace_kernels.json")
    totals: dict[str, list[float]] = {}
    for r in records:
        t = totals.setdefault(r.name, [0.0, 0])
        t[0] += r.duration_us
        t[1] += 1
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])[:KERNEL_TABLE_ROWS]
    return [
        {"name": name, "us_per_step": us / steps, "calls_per_step": calls / steps}
        for name, (us, calls) in rows
    ]


def _ablate(model, inputs, ops: dict, job: dict) -> tuple[dict, list[dict]]:
    """Each kernel's own effect on the whole model: the model with every kernel against the
    model with all but that one, timed interleaved. A kernel verified faster alone can still
    slow the model down: torch.compile may already fuse the work it saves into a neighbour
    (a residual add into the next norm) at no cost. Such a kernel is left out (never ship a
    loss, per kernel); one whose effect is within noise stays. Returns (the kernels kept,
    one row per kernel that ran)."""
    from harness import timing
    from harness.model import ops as kernel_ops
    from harness.model.substitute import Substituting
    from harness.results import Regime

    device = job["device"]
    how = "ours_compile" if job.get("compile", device == "cuda") else "ours"
    inner = "inductor" if how == "ours_compile" else None

    def way(subset: dict):
        fn, _compile_s = _build_variant(
            how, model, inputs, {}, {how: Substituting(model, subset, inner=inner)}
        )
        return _timed_call(fn, inputs)

    kernel_ops.hits.clear()
    fns = {"": way(ops)}  # its first call (the compile) counts the kernels that ran
    ran = [key for key in ops if kernel_ops.hits[key]]
    if len(ran) < 2:  # one kernel: "without it" is the model unchanged, the check's baseline
        return ops, []
    for key in ran:
        fns[key] = way({k: v for k, v in ops.items() if k != key})
    samples = _interleaved(fns, Regime.OFFLINE if device == "cuda" else Regime.INTERPRETER, job)
    us = {n: s.plain_us if device == "cuda" else s.host_us for n, s in samples.items()}
    rows = []
    for key in ran:
        # > 1: the model is faster with this kernel than without it.
        lo, hi = timing.speedup_ci(us[key], us[""])
        with_us, without_us = statistics.median(us[""]), statistics.median(us[key])
        rows.append(
            {
                "key": key,
                "with_us": with_us,
                "without_us": without_us,
                "effect": without_us / with_us,
                "effect_ci": [lo, hi],
                "kept": hi >= 1.0,
            }
        )
    dropped = {r["key"] for r in rows if not r["kept"]}
    return {k: v for k, v in ops.items() if k not in dropped}, rows


class _Graphed:
    """A CUDA graph of one forward: replay() runs it; output is the graph's own tensor."""

    def __init__(self, graph, output) -> None:
        self.graph, self.output = graph, output

    def __call__(self):
        self.graph.replay()


def _build_variant(how: str, model, inputs, built: dict, backends: dict):
    """(callable, seconds its first call took: the compile) for one way of running."""
    if how.startswith("graph:"):
        base = built[how.removeprefix("graph:")]  # KeyError: that way failed, so does this
        t0 = time.perf_counter()
        graph, output = _capture(base, inputs)
        return _Graphed(graph, output), time.perf_counter() - t0
    if how == "eager":
        return model, 0.0
    if how.startswith("compile"):
        mode = how.partition(":")[2] or None
        return _compiled(lambda: torch.compile(model, mode=mode, dynamic=False), inputs)
    return _compiled(lambda: torch.compile(model, backend=backends[how], dynamic=False), inputs)


# The errors of compiles that Inductor's worker pool failed and one thread then made (its
# workers found no GPU backend inside the sandbox on an H100: model_llama_decode_h100_v2.json).
pool_failures: list[str] = []


def _compiled(make: Callable[[], Any], inputs) -> tuple[Any, float]:
    """(make(), seconds its first call took: the compile). Every way this process compiles the
    model to run it (the profile, the variants, the ablation, the package's run) goes through
    here, so that one rule covers them all: a first call that fails while Inductor may
    compile with a pool of workers (compile_threads not 1) is made again, with a fresh compile,
    at one thread from then on (recorded in `pool_failures`); a failure at one thread is
    raised."""
    import torch._inductor.config as inductor_config

    while True:
        fn = make()
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                fn(*inputs)
            return fn, time.perf_counter() - t0
        except Exception as exc:
            threads = inductor_config.compile_threads  # None: Inductor picks (a pool)
            if threads is not None and threads <= 1:
                raise
            if torch.cuda.is_initialized():
                with contextlib.suppress(Exception):  # the failed call's error is what counts
                    torch.cuda.synchronize()
            inductor_config.compile_threads = 1
            pool_failures.append(_tail(exc)[-600:])


def _build_or_report(how, model, inputs, built, backends, entry: dict, device: str):
    """_build_variant, or None with the error in `entry` (a way that fails is reported, not
    fatal)."""
    failures = len(pool_failures)
    try:
        return _build_variant(how, model, inputs, built, backends)
    except Exception as exc:  # noqa: BLE001
        _settle(device)
        entry["error"] = _tail(exc)
        return None
    finally:
        if len(pool_failures) > failures:
            entry["compile_threads_fallback"] = pool_failures[-1]


def _timed_call(fn, inputs):
    if isinstance(fn, _Graphed):
        return fn

    def call():
        with torch.no_grad():
            fn(*inputs)

    return call


def _settle(device: str) -> None:
    with contextlib.suppress(Exception):
        _sync(device)


def _hits(built: dict, ops: dict, inputs, device: str) -> tuple[dict, list[str]]:
    """Kernel calls of one forward with the kernels substituted (eager), and winners no site
    of the model used."""
    from harness.model import ops as kernel_ops

    fn = built.get("ours")
    if fn is None:
        return {}, sorted(ops)
    kernel_ops.hits.clear()
    _forward(fn, inputs, device)
    hits = dict(kernel_ops.hits)
    return hits, sorted(set(ops) - set(hits))


def _interleaved(fns: dict, regime, job: dict) -> dict:
    """Every way's samples in one regime, interleaved (kf-timing-v2), within the job's caps."""
    from harness import timing

    return timing.time_interleaved(
        fns,
        regime=regime,
        min_samples=int(job.get("min_samples", 10)),
        max_samples=int(job.get("max_samples", 50)),
        target_rel_err=0.01,
        warmup_calls=3,
        max_seconds=float(job.get("max_timing_s", 60)),
    )


def _time_all(fns: dict, job: dict) -> dict[str, tuple[dict, dict]]:
    """regime -> (stats per name, reported samples per name)."""
    from harness import timing
    from harness.results import Regime

    device = job["device"]
    regimes = [Regime.OFFLINE, Regime.SERVER] if device == "cuda" else [Regime.INTERPRETER]
    baselines = [n for n in fns if n in VARIANTS and VARIANTS[n][0] == "baseline"]
    out = {}
    for regime in regimes:
        samples = _interleaved(fns, regime, job)
        if device == "cuda":
            reported, tails = timing.reported_us(
                {n: s.synced_us for n, s in samples.items()},
                {n: s.plain_us for n, s in samples.items()},
                baselines,
            )
        else:
            reported, tails = {n: s.host_us for n, s in samples.items()}, {}
        stats = {
            n: dataclasses.asdict(timing.summarize(v)) | {"tail_charged_us": tails.get(n, 0.0)}
            for n, v in reported.items()
        }
        out[regime.value] = (stats, reported)
    return out


def headline(report: dict, stats: dict, samples: dict) -> dict:
    """Best baseline (any way PyTorch alone ran) vs best way with the kernels (outputs within
    tolerance only): their medians, the ratio and its bootstrap interval."""
    from harness import timing

    def best(side: str, need_ok: bool):
        names = [
            n
            for n in stats
            if n in report and VARIANTS[n][0] == side and (report[n]["ok"] or not need_ok)
        ]
        return min(names, key=lambda n: stats[n]["median_us"]) if names else None

    base, ours = best("baseline", False), best("ours", True)
    if base is None or ours is None:
        return {"best_baseline": base, "best_ours": ours, "speedup": None, "speedup_ci": None}
    b_us, o_us = stats[base]["median_us"], stats[ours]["median_us"]
    lo, hi = timing.speedup_ci(samples[base], samples[ours])
    return {
        "best_baseline": base,
        "best_ours": ours,
        "baseline_us": b_us,
        "ours_us": o_us,
        "speedup": b_us / o_us if o_us > 0 else None,
        "speedup_ci": [lo, hi],
    }


def _capture(fn, inputs):
    """One forward of `fn` captured in a CUDA graph: (graph, output).

    Warm-up on a side stream first (as torch.cuda.graphs asks: lazy init, cuBLAS workspaces,
    Triton compiles happen outside the capture). The graph reads `inputs` in place."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # thread_local: a harness thread's CUDA call (heartbeat, clocks) must not void the capture.
    with torch.no_grad(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
        out = fn(*inputs)
    return graph, out


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
# fp32 whose GEMMs run as TF32 (the model allows it): fp16's 10 mantissa bits per operand,
# so any two ways of running it (eager, Inductor, our kernels) differ by fp16's margin.
REL_L2_TOL_TF32 = REL_L2_TOL["float16"]


def _rel_l2_tol(dtype: torch.dtype) -> float:
    name = str(dtype).removeprefix("torch.")
    if name == "float32" and allows_tf32():
        return REL_L2_TOL_TF32
    return REL_L2_TOL.get(name, REL_L2_TOL["float32"])


def _compare(ref, got, tolerance: float | None) -> dict:
    refs, gots = _flatten(ref), _flatten(got)
    if len(refs) != len(gots):
        return {"passed": False, "reason": f"{len(gots)} outputs, expected {len(refs)}"}
    outputs: list[dict[str, Any]] = []
    passed = True
    for r, g in zip(refs, gots, strict=True):
        if r.shape != g.shape or r.dtype != g.dtype:
            outputs.append({"shape": list(g.shape), "reason": "shape or dtype differs"})
            passed = False
            continue
        rf, gf = r.double(), g.double()
        finite = bool(torch.isfinite(gf).all()) or not bool(torch.isfinite(rf).all())
        rel = float((gf - rf).norm() / rf.norm().clamp_min(1e-30))
        tol = tolerance or _rel_l2_tol(r.dtype)
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
