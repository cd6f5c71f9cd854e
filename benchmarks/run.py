"""One benchmark pass over named problems: search, gate, time, and summarize.

Everything runs in this one process on one GPU (trusted code: our own families). All timing is
the harness's protocol (harness.timing.time_interleaved, kf-timing-v2): the quick ranking during
the search reads its plain end events (GPU time, no sync round trip; Samples.plain_stats), the
finalists, winners and baselines its reported times.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.pools import family_of, pool_for, valid_points
from benchmarks.verdict import Verdict, decide, no_kernel
from harness.compare import as_far_as_the_vendor
from harness.results import Regime
from harness.timing import reported_us, summarize, time_interleaved
from kernels import get_op
from kernels.candidate import load_module
from kernels.checking import check_source, compare
from kernels.problem import Problem
from kernels.shapes import NamedProblem


@dataclass
class Tried:
    family: str
    params: dict
    us: float | None = None
    error: str = ""
    gate: list[str] | None = None  # None: not gated (only finalists are, fastest first)


@dataclass
class Outcome:
    name: str
    problem: dict
    family: str = ""
    params: dict = field(default_factory=dict)
    gate: list[str] = field(default_factory=list)  # correctness failures of the kernel timed
    timings: dict[str, dict] = field(default_factory=dict)  # regime -> who -> stats
    speedups: dict[str, dict] = field(default_factory=dict)  # regime -> baseline -> x
    tflops: float | None = None
    gbps: float | None = None
    pct_of_roof: float | None = None
    tried: list[Tried] = field(default_factory=list)
    baseline_errors: dict[str, str] = field(default_factory=dict)
    host_overhead_us: dict[str, float] = field(default_factory=dict)  # host time per call
    pct_of_copy_roof: float | None = None  # bytes_moved at the candidate's time vs copy GB/s
    verdict: Verdict = field(default_factory=lambda: no_kernel("not run"))
    error: str = ""


def search(
    entry: NamedProblem,
    inputs,
    ref,
    out,
    *,
    top: int = 3,
    fixed: dict | None = None,
    max_points: int | None = None,
    library: bool = False,
) -> list[Tried]:
    """Try each pool point (or the one fixed point): correct on the workload, then quick time.
    With `library`, every built point of this machine's kernel library that fits the shape
    too (harness/library.py: the brute force the agent's outcome is held to, issue 24)."""
    problem = entry.problem
    op = get_op(problem.op)
    tol = op.tolerance(problem)
    if fixed:
        points = [(fixed["family"], fixed["params"])]
    else:
        points = pool_for(problem.op, problem, max_points, library=library)
    tried: list[Tried] = []
    for family, params in valid_points(problem, points):
        t = Tried(family.name, params)
        tried.append(t)
        try:
            module = load_module(family.render(problem, params))
            for _ in range(2):  # the second call takes the cached-launch path
                out.fill_(float("nan"))
                module.run(*inputs, out=out)
            torch.cuda.synchronize()
            result = compare(out, ref, tol)
            if not result.passed:
                t.error = f"incorrect: worst {result.worst_error:.3g} {result.detail}"
                continue
            samples = time_interleaved(
                {"c": lambda m=module: m.run(*inputs, out=out)},
                regime=Regime.OFFLINE,
                min_samples=10,
                max_samples=60,
                target_rel_err=0.01,
                max_seconds=1.0,
            )
            t.us = samples["c"].plain_stats().median_us  # flushed, pre-rolled: GPU time
        except Exception as exc:  # noqa: BLE001  (a point that fails to compile is data)
            t.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    ok = sorted((t for t in tried if t.us is not None), key=lambda t: t.us)
    return ok[:top] + [t for t in tried if t not in ok[:top]]


def first_verified(ranked: list[Tried], gate_fn) -> Tried | None:
    """The fastest finalist that passes the whole gate (each gated in turn, its failures kept
    on it); None when all fail. A failed one is never timed as ours, let alone a winner."""
    for t in ranked:
        t.gate = gate_fn(t)
        if not t.gate:
            return t
    return None


def host_overhead_us(fn, calls: int = 50) -> float:
    """Host time per call with the GPU left to run behind (no sync inside the loop)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


GATE_SEEDS = (7, 8)  # fresh seeds (the search checked seed 0); every one must pass


def gate(entry: NamedProblem, family_name: str, params: dict) -> list[str]:
    """A finalist on the op's sweep (tiny, odd, workload) and, at the workload itself, on
    adversarial inputs and every seed of GATE_SEEDS. Empty when it passed every stage."""
    problem = entry.problem
    op = get_op(problem.op)
    family = family_of(op, family_name)
    failures = []
    for p in op.sweep(problem):
        source = family.render(p, params)
        at_workload = p == problem
        for seed in GATE_SEEDS if at_workload else GATE_SEEDS[:1]:
            adversarial = at_workload and seed == GATE_SEEDS[0]
            failures += check_source(
                op,
                p,
                source,
                seed=seed,
                device="cuda",
                adversarial=adversarial,
                limit=as_far_as_the_vendor(op, p),
            )
    return failures


def bench_one(
    entry: NamedProblem,
    baselines: dict,
    regimes: list[str],
    roofs: dict,
    fixed: dict | None = None,
    max_points: int | None = None,
    library: bool = False,
) -> Outcome:
    problem = entry.problem
    op = get_op(problem.op)
    outcome = Outcome(entry.name, problem.to_dict())
    inputs = op.make_inputs(problem, seed=0, device="cuda")
    ref = op.reference(problem, *inputs)
    spec = op.output_spec(problem)
    out = torch.empty(spec.shape, dtype=spec.dtype, device="cuda")
    ranked = search(entry, inputs, ref, out, fixed=fixed, max_points=max_points, library=library)
    outcome.tried = ranked
    finalists = [t for t in ranked if t.us is not None]
    if not finalists:
        outcome.error = "no correct candidate"
        outcome.verdict = no_kernel("no correct candidate")
        return outcome
    # Re-time the finalists against each other with more samples (harness protocol).
    modules = {
        f"{i}": load_module(family_of(op, t.family).render(problem, t.params))
        for i, t in enumerate(finalists)
    }
    order = list(modules)
    if len(modules) > 1:
        samples = time_interleaved(
            {k: (lambda m=m: m.run(*inputs, out=out)) for k, m in modules.items()},
            regime=Regime.OFFLINE,
            min_samples=30,
            max_samples=100,
            target_rel_err=0.01,
            max_seconds=3.0,
        )
        order.sort(key=lambda k: samples[k].stats().median_us)
    ranked_finalists = [finalists[int(k)] for k in order]
    best = first_verified(ranked_finalists, lambda t: gate(entry, t.family, t.params))
    if best is None:
        fastest = ranked_finalists[0]
        outcome.family, outcome.params, outcome.gate = fastest.family, fastest.params, fastest.gate
        outcome.verdict = no_kernel("failed gate")
        return outcome
    outcome.family, outcome.params = best.family, best.params
    module = modules[order[ranked_finalists.index(best)]]
    outcome.host_overhead_us["candidate"] = host_overhead_us(lambda: module.run(*inputs, out=out))

    built, errors = baselines_for(problem, op, baselines)
    outcome.baseline_errors = errors
    outs = {name: torch.empty_like(out) for name in ["candidate", *built]}
    fns = {"candidate": lambda: module.run(*inputs, out=outs["candidate"])}
    for name, fn in built.items():
        fns[name] = lambda fn=fn, name=name: fn(*inputs, out=outs[name])
    for name, fn in built.items():
        outcome.host_overhead_us[name] = host_overhead_us(lambda fn=fn: fn(*inputs, out=out))
    reported: dict[str, dict[str, list[float]]] = {}
    for regime_name in regimes:
        regime = Regime(regime_name)
        samples = time_interleaved(
            fns,
            regime=regime,
            min_samples=20,
            max_samples=200,
            target_rel_err=0.01,
            max_seconds=8.0,
        )
        outcome.timings[regime_name] = {}
        # The harness's rule (harness.timing.reported_us): plain events plus each function's
        # median tail beyond the sync round trip measured on the trusted baselines.
        corrected, tails = reported_us(
            {who: s.synced_us for who, s in samples.items()},
            {who: s.plain_us for who, s in samples.items()},
            [who for who in samples if who != "candidate"],
        )
        reported[regime_name] = corrected
        for who, s in samples.items():
            raw = s.stats()
            st = summarize(corrected.get(who) or s.host_us)
            plain = sorted(s.plain_us)[len(s.plain_us) // 2] if s.plain_us else None
            outcome.timings[regime_name][who] = {
                "median_us": st.median_us,
                "iqr_us": st.iqr_us,
                "samples": st.samples,
                "plain_median_us": plain,
                "raw_synced_median_us": raw.median_us,
                "sync_round_trip_us": tails.get("sync_round_trip_us", 0.0),
                "tail_charged_us": tails.get(who, 0.0),
            }
        cand = outcome.timings[regime_name]["candidate"]
        outcome.speedups[regime_name] = {
            who: {
                "synced": t["median_us"] / cand["median_us"],
                "plain": (t["plain_median_us"] / cand["plain_median_us"])
                if t["plain_median_us"] and cand["plain_median_us"]
                else None,
            }
            for who, t in outcome.timings[regime_name].items()
            if who != "candidate"
        }
    # The verdict is taken in the first regime (offline: back-to-back calls, kernel time).
    outcome.verdict = decide(outcome.gate, reported[regimes[0]])
    cand_us = outcome.timings[regimes[0]]["candidate"]["plain_median_us"]
    if problem.op in ("matmul", "attention", "swiglu"):
        outcome.tflops = op.flops(problem) / (cand_us * 1e-6) / 1e12
        outcome.pct_of_roof = 100 * outcome.tflops / roofs["peak_tflops"]
    outcome.gbps = op.bytes_moved(problem) / (cand_us * 1e-6) / 1e9
    outcome.pct_of_copy_roof = 100 * outcome.gbps / roofs["copy_gbps"]
    if problem.op not in ("matmul", "attention", "swiglu"):
        outcome.pct_of_roof = outcome.pct_of_copy_roof
    return outcome


def _compile_task(task) -> str:
    """Worker process: render one point and run it once (fills Triton's on-disk cache)."""
    problem_dict, family_name, params = task
    try:
        problem = Problem.from_dict(problem_dict)
        op = get_op(problem.op)
        module = load_module(family_of(op, family_name).render(problem, params))
        inputs = op.make_inputs(problem, seed=0, device="cuda")
        spec = op.output_spec(problem)
        module.run(*inputs, out=torch.empty(spec.shape, dtype=spec.dtype, device="cuda"))
        torch.cuda.synchronize()
        return ""
    except Exception as exc:  # noqa: BLE001  (the main process reports it where it matters)
        return f"{type(exc).__name__}: {exc}"[:200]


def precompile(entries: list[NamedProblem], workers: int, max_points: int | None = None) -> int:
    """Compile every pool point for each problem and its gate sweep in parallel processes.

    Triton specializes integer arguments on ==1 and %16 only, so one compile per point and
    per such signature of the shape serves all; the single-process search and gate then
    find their kernels in the cache instead of compiling them one after another.
    """
    import multiprocessing as mp

    tasks, seen = [], set()
    for entry in entries:
        op = get_op(entry.problem.op)
        for family_name, partial in pool_for(entry.problem.op, entry.problem, max_points):
            family = family_of(op, family_name)
            for p in [entry.problem, *op.sweep(entry.problem)]:
                params = {**family.default(entry.problem), **partial}
                if family.check(p, params) is not None:
                    continue
                signature = tuple((d == 1, d % 16 == 0) for d in p.shape)
                key = (family.name, p.layout, p.dtype, signature, tuple(sorted(params.items())))
                if key not in seen:
                    seen.add(key)
                    tasks.append((p.to_dict(), family.name, params))
    t0 = time.time()
    with mp.get_context("spawn").Pool(workers) as pool:
        failed = sum(bool(err) for err in pool.imap_unordered(_compile_task, tasks))
    print(
        f"# precompiled {len(tasks)} points in {time.time() - t0:.0f}s ({failed} failed)",
        flush=True,
    )
    return len(tasks)


_BASELINE_CACHE: dict[str, Any] = {}


def baselines_for(problem: Problem, op, names: list[str]):
    """torch / compile / cublaslt callables (destination passing), built by harness.judge.baselines."""
    from harness.judge import baselines as hb

    wanted = [n for n in names if n in hb.applicable(problem.op, problem.layout, "cuda")]
    # The judge's own builds, compile included (one compile thread), so both ways time one
    # baseline: built apart from it (Inductor's parallel workers), compile timed 39.1 us against
    # 30.7 us in the agent's judge on moe_mixtral_w1_m32 (H200, 2026-12-03,
    # results/both_ways_h200_5shapes_e.json), which flattered the brute force's 1.039x.
    if "compile" in wanted:
        import torch._dynamo

        torch._dynamo.reset()  # one process times many problems: no guard reuse across them
    result = hb.make(wanted, op, problem, "cuda", _BASELINE_CACHE.get("cublaslt_dir"))
    return result.built, result.errors


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def safe_bench(*args, **kwargs) -> Outcome:
    entry = args[0]
    t0 = time.time()
    try:
        outcome = bench_one(*args, **kwargs)
    except Exception:  # noqa: BLE001
        outcome = Outcome(entry.name, entry.problem.to_dict(), error=traceback.format_exc()[-2000:])
    print(f"# {entry.name}: {time.time() - t0:.1f}s {outcome.error[:200]}", flush=True)
    return outcome
