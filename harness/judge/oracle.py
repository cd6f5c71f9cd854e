"""The correctness oracle: references and every value check, run after the candidate is done.

The judge (session.py) calls these only once the candidate will run no more: its host code
never ran in this process, and its last kernel has finished, so no reference exists while a
candidate kernel could read device memory. The cases' inputs and the outputs compared here
are host copies the judge made itself.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.compare import closeness, exact_mismatches, max_abs_error, vendor_limit
from harness.judge.cases import GUARD_ELEMENTS, Case, guard_pattern
from kernels.problem import Op, Problem


class _Stages:
    def __init__(self) -> None:
        self.stages: dict[str, dict[str, Any]] = {}

    def _get(self, stage: str) -> dict[str, Any]:
        return self.stages.setdefault(
            stage, {"passed": True, "worst": 0.0, "cases": 0, "detail": ""}
        )

    def fail(self, stage: str, detail: str, worst: float | None = None) -> None:
        s = self._get(stage)
        if s["passed"]:
            s["detail"] = detail
        s["passed"] = False
        if worst is not None:
            s["worst"] = max(s["worst"], worst)

    def note(self, stage: str, worst: float | None = None) -> None:
        s = self._get(stage)
        s["cases"] += 1
        if worst is not None and worst != float("inf"):
            s["worst"] = max(s["worst"], worst)


def check_cases(
    op: Op, cases: list[Case], outputs: list[dict], factor: float, device: str
) -> dict[str, Any]:
    """Every stage of every case: {"stages": {...}, "findings": [...]}."""
    st = _Stages()
    findings: list[dict] = []
    g = GUARD_ELEMENTS
    for case, result in zip(cases, outputs, strict=False):
        problem = case.problem
        spec = op.output_spec(problem)
        n = spec_numel(spec.shape)
        guard = guard_pattern(g, spec.dtype, case.guard_seed, "cpu")
        inputs = [t.to(device) for t in case.inputs]
        # References and comparisons stay on the case's device: on the H200, comparing an
        # 8192x8192 output in float64 on the CPU took 24-27 s of a 55 s evaluation.
        ref = op.reference(problem, *inputs)
        tol = op.tolerance(problem)
        runs = result["runs"]
        for i, padded in enumerate(runs):
            out = padded[g : g + n].view(spec.shape).to(ref.device)
            if padded.dtype != spec.dtype:
                st.fail(
                    "output_dtype", f"{case.name}: output buffer dtype changed to {padded.dtype}"
                )
            st.note("guard_bands")
            if not (torch.equal(padded[:g], guard[:g]) and torch.equal(padded[g + n :], guard[g:])):
                changed = int(
                    (padded[:g] != guard[:g]).sum() + (padded[g + n :] != guard[g:]).sum()
                )
                st.fail(
                    "guard_bands",
                    f"{case.name}: {changed} guard elements around the output changed",
                )
            if i > 0:
                continue
            _check_values(op, case, problem, inputs, out, ref, tol, factor, device, st, findings)
        if len(runs) > 1:
            _check_determinism(case, runs, spec, n, tol, st, findings)
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
    if len(outputs) < len(cases):
        st.fail("smoke", f"candidate produced {len(outputs)} of {len(cases)} case outputs")
    return {"stages": st.stages, "findings": findings}


def _check_values(op, case, problem, inputs, out, ref, tol, factor, device, st, findings) -> None:
    c = closeness(out, ref, tol)
    st.note("output_poison")
    if c.unwritten:
        st.fail("output_poison", f"{case.name}: {c.detail}")
    # The vendor library on the same inputs sets a floor on what "right" means: cuBLAS fp16
    # (reduced-precision split-K) misses the op's tolerance on some adversarial cases, and a
    # candidate as accurate as cuBLAS must not fail there.
    base_err = 0.0
    spec = op.output_spec(problem)
    if case.exact_limit is None:
        base = torch.empty(spec.shape, dtype=spec.dtype, device=device)
        base = op.baseline_output(problem, *inputs, out=base)
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
    st.note(case.stage, c.worst_error)
    if c.unwritten or c.worst_error > limit:
        st.fail(
            case.stage,
            f"{case.name}: {c.detail or f'error {c.worst_error:.3g}x tolerance'}",
            c.worst_error,
        )
    if case.exact_limit is not None:
        bad, total = exact_mismatches(out, ref, case.exact_limit)
        if bad:
            st.fail(
                case.stage, f"{case.name}: {bad} of {total} exactly representable entries differ"
            )
    # Deviation bound from the vendor baseline on the same inputs (precision lowering).
    if c.worst_error <= limit and case.exact_limit is None:
        bound = max(factor * base_err, 0.1)
        st.note("baseline_deviation", c.worst_error / bound if bound else 0.0)
        if c.worst_error > bound:
            st.fail(
                "baseline_deviation",
                f"{case.name}: error {c.worst_error:.3g} vs vendor {base_err:.3g} (bound {factor:g}x): "
                "lower precision than the library computes",
                c.worst_error,
            )


def _check_determinism(case, runs, spec, n, tol, st, findings) -> None:
    g = GUARD_ELEMENTS
    st.note("determinism")
    a, b = runs[0], runs[1]
    if torch.equal(a.nan_to_num(nan=0.0), b.nan_to_num(nan=0.0)):
        return
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
        st.fail("determinism", f"{case.name}: two runs differ by up to {diff:.3g}")


def recheck_spots(op: Op, problem: Problem, spots: list[dict], device: str) -> dict[str, Any]:
    """Outputs kept while timing, against references of their own inputs (from the seeds
    the judge kept in host memory)."""
    tol = op.tolerance(problem)
    checked, worst, detail = 0, 0.0, ""
    for spot in spots:
        inputs = op.make_inputs(problem, seed=int(spot["seed"]), device=device)
        ref = op.reference(problem, *inputs)
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


def spec_numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
