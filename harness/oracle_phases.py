"""Trusted phases: the correctness oracle and the device facts. Never imports candidate code.

oracle_prepare  inputs from secret seeds -> cases.pt (the candidate sees values, never seeds)
oracle_check    references computed only now, after the candidate exited, against its outputs
oracle_recheck  outputs captured while timing, against references of their own inputs
ceilings, build_cublaslt  what the device can do; the cuBLASLt baseline's extension

Tensors written by a candidate's process are loaded with weights_only=True
(cases.load_tensors), so a tampered file cannot run code here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness import cases as cases_mod
from harness.compare import closeness, exact_mismatches, max_abs_error, vendor_limit
from harness.ops import resolve_op
from kernels.problem import Problem


def _build(job: dict):
    op = resolve_op(job["problem"]["op"], job.get("op_ref", ""))
    problem = Problem.from_dict(job["problem"])
    built = cases_mod.build_cases(
        op,
        problem,
        job["seeds"],
        job["device"],
        quick=job["quick"],
        interpreter=job["interpreter"],
        dtypes=tuple(job.get("dtypes", ())),
    )
    return op, problem, built


def oracle_prepare(job: dict) -> dict:
    _, _, built = _build(job)
    payload = [
        {
            "name": c.name,
            "problem": c.problem.to_dict(),
            "inputs": [t.cpu() for t in c.inputs],
            "guard_seed": c.guard_seed,
            "runs": c.runs,
        }
        for c in built
    ]
    torch.save(payload, Path(job["workdir"]) / "cases.pt")
    return {"cases": [c.name for c in built]}


def oracle_check(job: dict) -> dict:
    op, _, built = _build(job)
    outputs = cases_mod.load_tensors(job["outputs_path"])
    factor = job["baseline_error_factor"]
    stages: dict[str, dict] = {}
    findings: list[dict] = []
    device = job["device"]

    def fail(stage: str, detail: str, worst: float | None = None) -> None:
        s = stages.setdefault(stage, {"passed": True, "worst": 0.0, "cases": 0, "detail": ""})
        if s["passed"]:
            s["detail"] = detail
        s["passed"] = False
        if worst is not None:
            s["worst"] = max(s["worst"], worst)

    def note(stage: str, worst: float | None = None) -> None:
        s = stages.setdefault(stage, {"passed": True, "worst": 0.0, "cases": 0, "detail": ""})
        s["cases"] += 1
        if worst is not None and worst != float("inf"):
            s["worst"] = max(s["worst"], worst)

    for case, result in zip(built, outputs, strict=False):
        problem = case.problem
        spec = op.output_spec(problem)
        n = 1
        for s in spec.shape:
            n *= s
        g = cases_mod.GUARD_ELEMENTS
        guard = cases_mod.guard_pattern(g, spec.dtype, case.guard_seed, "cpu")
        # References and comparisons stay on the case's device: on the H200, comparing a
        # 8192x8192 output in float64 on the CPU made this phase 24-27 s of a 55 s evaluation.
        ref = op.reference(problem, *case.inputs)
        tol = op.tolerance(problem)
        runs = result["runs"]
        for i, padded in enumerate(runs):
            out = padded[g : g + n].view(spec.shape).to(ref.device)
            if padded.dtype != spec.dtype:
                fail("output_dtype", f"{case.name}: output buffer dtype changed to {padded.dtype}")
            note("guard_bands")
            if not (torch.equal(padded[:g], guard[:g]) and torch.equal(padded[g + n :], guard[g:])):
                changed = int(
                    (padded[:g] != guard[:g]).sum() + (padded[g + n :] != guard[g:]).sum()
                )
                fail(
                    "guard_bands",
                    f"{case.name}: {changed} guard elements around the output changed",
                )
            if i > 0:
                continue
            c = closeness(out, ref, tol)
            note("output_poison")
            if c.unwritten:
                fail("output_poison", f"{case.name}: {c.detail}")
            # The vendor library on the same inputs sets a floor on what "right" means: cuBLAS
            # fp16 (reduced-precision split-K) misses the op's tolerance on some adversarial
            # cases, and a candidate as accurate as cuBLAS must not fail there.
            base_err = 0.0
            if case.exact_limit is None:
                base = torch.empty(spec.shape, dtype=spec.dtype, device=device)
                op.baseline(problem, *[t.to(device) for t in case.inputs], out=base)
                base_err = closeness(base, ref, tol).worst_error
                if base_err > 1.0 and base_err != float("inf"):
                    findings.append(
                        {
                            "check": "vendor_exceeds_tolerance",
                            "severity": "warn",
                            "detail": f"{case.name}: the vendor library itself is {base_err:.3g}x the tolerance",
                        }
                    )
            limit = vendor_limit(base_err)
            note(case.stage, c.worst_error)
            if c.unwritten or c.worst_error > limit:
                fail(
                    case.stage,
                    f"{case.name}: {c.detail or f'error {c.worst_error:.3g}x tolerance'}",
                    c.worst_error,
                )
            if case.exact_limit is not None:
                bad, total = exact_mismatches(out, ref, case.exact_limit)
                if bad:
                    fail(
                        case.stage,
                        f"{case.name}: {bad} of {total} exactly representable entries differ",
                    )
            # Deviation bound from the vendor baseline on the same inputs (precision lowering).
            if c.worst_error <= limit and case.exact_limit is None:
                bound = max(factor * base_err, 0.1)
                note("baseline_deviation", c.worst_error / bound if bound else 0.0)
                if c.worst_error > bound:
                    fail(
                        "baseline_deviation",
                        f"{case.name}: error {c.worst_error:.3g} vs vendor {base_err:.3g} (bound {factor:g}x): "
                        "lower precision than the library computes",
                        c.worst_error,
                    )
        if len(runs) > 1:
            note("determinism")
            a, b = runs[0], runs[1]
            if not torch.equal(a.nan_to_num(nan=0.0), b.nan_to_num(nan=0.0)):
                diff = max_abs_error(a[g : g + n], b[g : g + n])
                out_a = a[g : g + n].view(spec.shape)
                out_b = b[g : g + n].view(spec.shape)
                if closeness(out_b, out_a.to(torch.float64), tol).passed:
                    findings.append(
                        {
                            "check": "nondeterministic",
                            "severity": "warn",
                            "detail": f"{case.name}: two runs differ by up to {diff:.3g} (within tolerance)",
                        }
                    )
                else:
                    fail("determinism", f"{case.name}: two runs differ by up to {diff:.3g}")
        after = result.get("inputs_after")
        if after is not None:
            for k, (before_t, after_t) in enumerate(zip(case.inputs, after, strict=True)):
                same = torch.equal(before_t.cpu().nan_to_num(nan=0.0), after_t.nan_to_num(nan=0.0))
                if not same:
                    findings.append(
                        {
                            "check": "input_mutation",
                            "severity": "reject",
                            "detail": f"{case.name}: input {k} was modified by run()",
                        }
                    )
    if len(outputs) < len(built):
        fail("smoke", f"candidate produced {len(outputs)} of {len(built)} case outputs")
    return {"stages": stages, "findings": findings}


def oracle_recheck(job: dict) -> dict:
    """Re-check outputs captured during timing against references of their own inputs."""
    op = resolve_op(job["problem"]["op"], job.get("op_ref", ""))
    problem = Problem.from_dict(job["problem"])
    spots = cases_mod.load_tensors(job["spots_path"])
    tol = op.tolerance(problem)
    checked, worst, detail = 0, 0.0, ""
    for spot in spots:
        inputs = op.make_inputs(problem, seed=int(spot["seed"]), device=job["device"])
        ref = op.reference(problem, *inputs)  # compared on the device, as in oracle_check
        c = closeness(spot["out"].to(ref.device), ref, tol)
        checked += 1
        worst = max(worst, c.worst_error)
        if not c.passed and not detail:
            detail = f"{spot['label']}: {c.detail}"
    return {
        "checked": checked,
        "worst": worst,
        "detail": detail,
        "passed": checked > 0 and not detail,
    }


def ceilings(job: dict) -> dict:
    from harness import ceilings as ceil

    return ceil.measure(job)


def build_cublaslt(job: dict) -> dict:
    from harness import cublaslt

    return cublaslt.build(job["build_dir"])
