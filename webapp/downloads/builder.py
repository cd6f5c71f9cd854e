"""Winning kernels as a zip that is an installable Python package (the API and the pages use this).

Only winners go in (webapp.jobs.selectors.package_winners: kernels verified faster than every
baseline they were timed against, on a GPU; a model job's only once the model with them beat
its best baseline end to end); the caller says "nothing to download" when there is none. The
README names the device, timing regime and baseline of every number, says why each other
problem is left to PyTorch, and for a model shows every baseline it ran against end to end.

    <root>/pyproject.toml, README.md, manifest.json (the API's provenance manifest)
    <root>/<pkg>/__init__.py      registers torch.ops.<pkg>.<op>, then patching.enable()
    <root>/<pkg>/dispatch.py      exact-shape table -> kernel, else fallbacks.py (PyTorch)
    <root>/<pkg>/adapters.py      a public PyTorch call (F.rms_norm, F.linear, ...) -> an op
    <root>/<pkg>/patching.py      wraps those public functions; disable() restores them
    <root>/<pkg>/kernels/*.py     the candidate sources exactly as the harness evaluated them
    <root>/<pkg>/dispatch.json, benchmark.json, provenance.json
    <root>/<pkg>/tests/           each kernel vs PyTorch at small shapes; the dispatch choices;
                                  the replacement (won shapes -> kernel, every other call -> PyTorch)

Test cases and each winner's input description are computed here from kernels/ (each op's
correctness sweep, kept small), so the package itself needs only torch and triton.
"""

from __future__ import annotations

import io
import json
import math
import re
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from django.utils.text import slugify

import kernels
from webapp.downloads.manifest import kernel_module, manifest
from webapp.jobs.models import Job, Problem
from webapp.jobs.selectors import (
    EndToEndView,
    Rewrite,
    Winner,
    best_baseline,
    end_to_end_view,
    model_left_out,
    model_run_for_job,
    model_unbeaten,
    no_winner_reasons,
)

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"
MAX_TEST_ELEMENTS = 1 << 15  # per input: small enough for Triton's CPU interpreter
MAX_TEST_CASES = 4  # per kernel
MAX_DESCRIBED_ELEMENTS = 1 << 24  # won shapes up to this are sampled whole to describe inputs


@dataclass(frozen=True)
class Package:
    filename: str
    data: bytes
    name: str  # the import name


def package_name(title: str) -> str:
    base = re.sub(r"[^a-z0-9_]", "_", slugify(title).replace("-", "_")) or "kernels"
    return f"kf_{base}"[:60].rstrip("_")


def op_name(problem: Problem) -> str:
    """The registered op's name: op plus layout, e.g. matmul_nt_bias_gelu."""
    layout = re.sub(r"[^a-z0-9]+", "_", problem.layout.lower()).strip("_")
    return f"{problem.op}_{layout}" if layout else problem.op


def _torch_dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(inputs: tuple[torch.Tensor, ...]) -> list[dict[str, Any]]:
    """How the package's tests remake these inputs: shape, dtype and the values' spread."""
    described = []
    for t in inputs:
        entry: dict[str, Any] = {"shape": list(t.shape), "dtype": _torch_dtype(t.dtype)}
        if t.is_floating_point():
            std = float(t.float().std()) if t.numel() > 1 else 1.0
            entry["scale"] = round(std if math.isfinite(std) and std > 0 else 1.0, 4)
            entry["shift"] = round(float(t.float().mean()), 4)
        else:
            entry["high"] = int(t.max()) + 1
        described.append(entry)
    return described


def _won_inputs(spec: kernels.Problem) -> list[dict[str, Any]]:
    """The winner's own inputs, described (a huge shape borrows the spread of the largest shape of
    its sweep that is cheap to make: building a zip must not allocate gigabytes)."""
    op = kernels.get_op(spec.op)
    shapes = op.input_shapes(spec)
    sample = spec

    def size(p: kernels.Problem) -> int:
        return sum(math.prod(s) for s in op.input_shapes(p))

    if size(spec) > MAX_DESCRIBED_ELEMENTS:
        small = sorted((p for p in op.sweep(spec) if p != spec), key=size)
        fits = [p for p in small if size(p) <= MAX_DESCRIBED_ELEMENTS // 4]
        sample = fits[-1] if fits else small[0]
    described = _describe(op.make_inputs(sample, seed=0, device="cpu"))
    for entry, shape in zip(described, shapes, strict=True):
        entry["shape"] = list(shape)
    return described


def _contract(problem: Problem) -> dict[str, Any]:
    """Constants a kernel computes with that a public PyTorch call passes as an argument: a
    norm's eps, the problem's own (its layout names it when it is not the op's)."""
    op = kernels.get_op(problem.op)
    eps = getattr(op, "eps", None)
    return {"eps": eps(kernels.Problem.from_dict(problem.to_dict()))} if callable(eps) else {}


def _test_cases(problem: Problem, module: str) -> list[dict[str, Any]]:
    spec = kernels.Problem.from_dict(problem.to_dict())
    op = kernels.get_op(spec.op)
    cases = []
    for small in op.sweep(spec):
        if small == spec or any(math.prod(s) > MAX_TEST_ELEMENTS for s in op.input_shapes(small)):
            continue  # the won shape is tested by the package's replacement tests
        inputs = op.make_inputs(small, seed=0, device="cpu")
        out = op.output_spec(small)
        tol = op.tolerance(small)
        described = _describe(inputs)
        cases.append(
            {
                "id": f"{module}-{'x'.join(map(str, small.shape))}",
                "module": module,
                "name": op_name(problem),
                "op": spec.op,
                "layout": spec.layout,
                "dtype": _torch_dtype(spec.torch_dtype),
                "inputs": described,
                "out_shape": list(out.shape),
                "out_dtype": _torch_dtype(out.dtype),
                "rtol": tol.rtol,
                "atol": tol.atol,
            }
        )
        if len(cases) >= MAX_TEST_CASES:
            break
    return cases


def _entry(winner: Winner, module: str) -> dict[str, Any]:
    problem = winner.task.problem
    spec = kernels.Problem.from_dict(problem.to_dict())
    op = kernels.get_op(spec.op)
    out = op.output_spec(spec)
    tol = op.tolerance(spec)
    return {
        "name": op_name(problem),
        "module": module,
        "problem": problem.key,
        "op": spec.op,
        "layout": spec.layout,
        "input_shapes": [list(s) for s in op.input_shapes(spec)],
        "torch_dtype": _torch_dtype(spec.torch_dtype),
        "out_shape": list(out.shape),
        "out_dtype": _torch_dtype(out.dtype),
        "inputs": _won_inputs(spec),
        "rtol": tol.rtol,
        "atol": tol.atol,
        "speedup": winner.iteration.speedup,
    }


def _benchmark(winners: list[Winner]) -> dict[str, Any]:
    results = []
    for w in winners:
        evaluation = w.iteration.measurement
        best = best_baseline(evaluation)
        results.append(
            {
                "problem": w.task.problem.key,
                "speedup": w.iteration.speedup,
                "best_baseline": best.baseline if best else None,
                "best_baseline_speedup": best.speedup if best else None,
                "timings": evaluation.get("timings"),
                "tflops": evaluation.get("tflops"),
                "gbps": evaluation.get("gbps"),
                "pct_of_roof": evaluation.get("pct_of_roof"),
                "device": evaluation.get("device"),
            }
        )
    return {"results": results}


def _provenance(job: Job, winners: list[Winner], job_url: str) -> dict[str, Any]:
    devices = []
    for w in winners:
        device = w.iteration.measurement.get("device") or {}
        devices.append(
            {
                "problem": w.task.problem.key,
                "gpu": device.get("name"),
                "kind": device.get("kind"),
                "driver": device.get("driver"),
                "cuda": device.get("cuda"),
                "torch": device.get("torch"),
                "triton": device.get("triton"),
                "measured_at": w.iteration.created_at.isoformat(),
                "iteration_seq": w.iteration.seq,
                "candidate_id": w.iteration.candidate_id,
            }
        )
    return {
        "generated_at": datetime.now(UTC).isoformat(),
        "job": {"id": str(job.id), "title": job.title, "team": job.team.slug, "url": job_url},
        "kernels": devices,
    }


def requirement(package: str, versions: list[str | None]) -> str:
    """`package` within the minor releases its kernels were verified with, e.g. "triton>=3.6,
    <3.7" (a kernel written for one Triton can fail to compile, or be slower, on the next: an
    unpinned package pulled triton 3.9 for kernels measured with 3.6, issue 27); the bare name
    when no version was recorded."""
    minors = sorted(
        {tuple(int(n) for n in m.groups()) for v in versions if v and (m := _MINOR.match(v))}
    )
    if not minors:
        return package
    (low_major, low_minor), (high_major, high_minor) = minors[0], minors[-1]
    return f"{package}>={low_major}.{low_minor},<{high_major}.{high_minor + 1}"


_MINOR = re.compile(r"(\d+)\.(\d+)")


def _pyproject(name: str, job: Job, winners: list[Winner]) -> str:
    devices = [w.iteration.measurement.get("device") or {} for w in winners]
    deps = [requirement(p, [d.get(p) for d in devices]) for p in ("torch", "triton")]
    return (
        "[build-system]\n"
        'requires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        f'name = "{name.replace("_", "-")}"\n'
        'version = "1.0.0"\n'
        f'description = "Kernels found by KernelForge for job {job.id}"\n'
        'requires-python = ">=3.10"\n'
        f"dependencies = {json.dumps(deps)}\n\n"
        "[project.optional-dependencies]\n"
        "# The self-test: pytest, and numpy for Triton's CPU interpreter (TRITON_INTERPRET=1).\n"
        'test = ["pytest", "numpy"]\n\n'
        "[tool.setuptools]\n"
        f'packages = ["{name}", "{name}.kernels", "{name}.tests"]\n\n'
        "[tool.setuptools.package-data]\n"
        '"*" = ["*.json"]\n'
    )


def _end_to_end_lines(view: EndToEndView) -> list[str]:
    """A model's end-to-end table for the README: every baseline and every way with the
    kernels, compile times, and the speedup over the best baseline (a model's package exists
    only when the model with its kernels beat that baseline: selectors.package_winners)."""
    change = " with the change to your code below" if view.rewrites else ""
    verdict = (
        f"**{view.speedup:.3f}x faster than the best baseline**{change} "
        f"({view.best_baseline.label}, {view.best_baseline.offline_us:.1f} us per forward) run "
        f"as: {view.best_ours.label}, {view.best_ours.offline_us:.1f} us; 95 % interval "
        f"{view.speedup_ci[0]:.3f}-{view.speedup_ci[1]:.3f}x."
    )
    if view.package:  # with rewrites: the package ships only if the kernels alone won
        verdict += (
            f" The package alone (the kernels, no change to your code): "
            f"{view.package.speedup:.3f}x, 95 % interval {view.package.speedup_ci[0]:.3f}-"
            f"{view.package.speedup_ci[1]:.3f}x."
        )
    rows = [
        f"| {r.label} | {'with the kernels' if r.side == 'ours' else 'PyTorch only'} | "
        + (
            "failed | | | |"
            if r.error
            else f"{r.offline_us:.1f} | {r.compile_s or 0:.1f} | "
            f"{(r.vs_best_baseline or 0):.3f}x | {'match' if r.ok else 'DIFFER'} |"
        )
        for r in view.rows
    ]
    return [
        "",
        f"## The model end to end ({view.device_name})",
        "",
        verdict,
        "",
        view.provenance,
        "",
        "| run as | kernels | us per forward | compile (s) | vs best baseline | outputs |",
        "|---|---|---|---|---|---|",
        *rows,
        *_rewrite_lines(view.rewrites),
    ]


def _rewrite_lines(rewrites: list[Rewrite]) -> list[str]:
    """The changes to the model's code that the ways with the kernels were timed with: the
    package cannot make them, so the README says where and what each saves."""
    if not rewrites:
        return []
    return [
        "",
        "## Change in your code",
        "",
        "PyTorch's own call does less here than the model's code. The package cannot change "
        "your code: the ways with the kernels above ran with these changes made for them.",
        "",
        *(
            f"- `{w.where}`: {w.saves}"
            + (f"; its effect on the model {w.effect:.3f}x" if w.effect else "")
            for w in rewrites
        ),
    ]


@dataclass(frozen=True)
class ReadmeRow:
    """One number of the README with what it was measured on and against."""

    op: str
    problem: str
    speedup: float  # over the best baseline
    baseline: str
    vs_torch: float | None
    device: str
    regime: str


def _readme_row(winner: Winner) -> ReadmeRow:
    it = winner.iteration
    evaluation = it.measurement
    best = best_baseline(evaluation)
    return ReadmeRow(
        op=op_name(winner.task.problem),
        problem=winner.task.problem.key,
        speedup=best.speedup if best else it.speedup,
        baseline=best.baseline if best else "torch",
        vs_torch=((evaluation.get("timings") or {}).get("speedups") or {}).get("torch"),
        device=str((evaluation.get("device") or {}).get("name", "")),
        regime=str((evaluation.get("timings") or {}).get("regime", "")),
    )


def _readme(
    name: str,
    job: Job,
    job_url: str,
    rows: list[ReadmeRow],
    missing: dict[str, str],
    model: EndToEndView | None,
) -> str:
    lines = [
        f"# {name}",
        "",
        f"Kernels found by KernelForge for “{job.title}” ({job_url}).",
        "",
        "    pip install <this zip>",
        f"    python -c 'import {name}, torch; print(torch.ops.{name})'",
        "    pip install pytest numpy   # the self-test's needs (its `test` extra)",
        f"    python -m pytest --pyargs {name}",
        f"    TRITON_INTERPRET=1 python -m pytest --pyargs {name}   # without a GPU",
        "",
        "The package requires the torch and triton releases its kernels were verified with",
        "(their minor versions; see provenance.json): a kernel written for one Triton release",
        "can fail to compile, or run slower, on another.",
        "",
        "Every kernel here passed every correctness check and was timed faster than every",
        "baseline it was measured against, on a GPU. Each number below is its speedup over the",
        "fastest of those baselines (torch: eager PyTorch; compile: torch.compile; cublaslt:",
        "cuBLASLt's best algorithm), on the device and in the timing regime named beside it.",
        "On another GPU the kernels still serve these shapes, but their speed there was not",
        "measured; every other shape or dtype runs PyTorch.",
        "",
        "| op | problem | speedup | over (fastest baseline) | vs eager PyTorch | device | timing regime |",
        "|---|---|---|---|---|---|---|",
        *[
            f"| {r.op} | {r.problem} | {r.speedup:.2f}x | {r.baseline} | "
            f"{f'{r.vs_torch:.2f}x' if r.vs_torch is not None else '-'} | {r.device} | {r.regime} |"
            for r in rows
        ],
        "",
        f"`import {name}` replaces the public PyTorch functions of the ops above",
        "(torch.nn.functional.rms_norm, layer_norm, softmax, cross_entropy, linear,",
        "scaled_dot_product_attention; torch.matmul, torch.softmax, torch.sum): a call with a",
        "winning kernel's exact shape (leading dims of row-wise ops count as rows), dtype,",
        "contiguous layout, device and arguments (eps, no mask, no dtype cast) runs the kernel;",
        "every other call, and every call autograd must record, runs PyTorch unchanged.",
        "swiglu, rotary, fused matmul activations and residuals have no single PyTorch",
        "function: call",
        f"`{name}.<op>(...)` or `torch.ops.{name}.<op>(...)` (swiglu_gate_i8 takes the gate and",
        f"up weights as one, `{name}.interleave(w_gate, w_up)`, made once; the `_rowscale` ops",
        "take the RMSNorm before them folded in: its weight g in theirs (`w * g` before the",
        "interleave) and x's row scale rsqrt(mean(x^2) + eps), float32, last; qkv_rotary_i8_* the",
        f"q/k/v weights, `{name}.interleave_heads(torch.cat([w_q, w_k, w_v]), head_dim)`, and",
        "biases likewise; qkv_rotary_pairs_* GPT-J's, `torch.cat([w_q, w_k, w_v])` as it is).",
        "A name imported before the",
        "package (`from torch.nn.functional import linear`) and the `@` operator keep PyTorch.",
        "Under torch.compile the same calls trace to the package's ops (each has a fake",
        "implementation), so Inductor compiles the model around the kernels.",
        "",
        f"    {name}.disable() / {name}.enable()   PyTorch's originals back / kernels again",
        f"    {name}.stats()                       kernel runs and PyTorch fallbacks so far",
        f"    {name.upper()}_NO_PATCH=1 (or KERNELFORGE_NO_PATCH=1)   import without replacing",
    ]
    if missing:
        lines += ["", "PyTorch serves these problems unchanged (no verified win):", ""]
        lines += [f"- {key}: {why}." for key, why in missing.items()]
    if model is not None:
        lines += _end_to_end_lines(model)
    return "\n".join(lines) + "\n"


def build_package(
    *, job: Job, winners: list[Winner], problems: list[Problem], job_url: str = ""
) -> Package:
    """The zip for these winners (all of a job's, or one problem's); only ranked iterations
    (verified wins on a GPU) may be packaged, and a model job's only once the model with them
    beat its best baseline end to end (selectors.package_winners)."""
    if not winners or not all(w.iteration.ranked for w in winners):
        raise ValueError("a package holds only verified wins on a GPU, and at least one")
    if model_unbeaten(job_id=job.id):
        raise ValueError("a model job's kernels ship only when the model beat its best baseline")
    left_out = model_left_out(job_id=job.id)  # once, not a query per winner
    if any(w.task.problem.key in left_out for w in winners):
        raise ValueError("a kernel the model ran slower with does not ship")
    name = package_name(job.title)
    root = name.replace("_", "-")
    run = model_run_for_job(job_id=job.id) if job.kind == Job.Kind.MODEL else None
    model = end_to_end_view(run) if run is not None else None
    entries, cases, ops = [], [], {}
    modules: dict[str, str] = {}
    for winner in winners:
        module = kernel_module(winner.task.problem)
        modules[module] = winner.iteration.source
        entries.append(_entry(winner, module))
        cases += _test_cases(winner.task.problem, module)
        p = winner.task.problem
        ops[op_name(p)] = {"op": p.op, "layout": p.layout, **_contract(p)}
    won = {w.task.problem_id for w in winners}
    missing = [p.key for p in problems if p.id not in won]
    reasons = no_winner_reasons(job_id=job.id) if missing else {}
    for p in problems:  # problems with no winner still get their op registered (PyTorch only)
        ops.setdefault(op_name(p), {"op": p.op, "layout": p.layout, **_contract(p)})
    table = {"ops": ops, "entries": entries, "fallback_for": missing}
    templates = {t.name.removesuffix(".tmpl"): t.read_text() for t in TEMPLATE_DIR.glob("*.tmpl")}

    def fill(text: str) -> str:
        title = job.title.replace('"', "'")
        env = f"{name.upper()}_NO_PATCH"
        return text.replace("__PKG__", name).replace("__TITLE__", title).replace("__ENV__", env)

    files = {
        "pyproject.toml": _pyproject(name, job, winners),
        "README.md": _readme(
            name,
            job,
            job_url,
            [_readme_row(w) for w in winners],
            {key: reasons.get(key, "no verified win") for key in missing},
            model,
        ),
        "manifest.json": json.dumps(manifest(job, winners, problems), indent=2, sort_keys=True),
        f"{name}/__init__.py": fill(templates["__init__.py"]),
        f"{name}/dispatch.py": fill(templates["dispatch.py"]),
        f"{name}/adapters.py": fill(templates["adapters.py"]),
        f"{name}/patching.py": fill(templates["patching.py"]),
        f"{name}/fallbacks.py": templates["fallbacks.py"],
        f"{name}/dispatch.json": json.dumps(table, indent=2),
        f"{name}/benchmark.json": json.dumps(_benchmark(winners), indent=2),
        f"{name}/provenance.json": json.dumps(_provenance(job, winners, job_url), indent=2),
        f"{name}/kernels/__init__.py": "",
        f"{name}/tests/__init__.py": "",
        f"{name}/tests/helpers.py": templates["helpers.py"],
        f"{name}/tests/test_kernels.py": templates["test_kernels.py"],
        f"{name}/tests/test_replacement.py": templates["test_replacement.py"],
        f"{name}/tests/cases.json": json.dumps(cases, indent=2),
    }
    files.update({f"{name}/kernels/{m}.py": src for m, src in modules.items()})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            archive.writestr(f"{root}/{path}", text)
    return Package(filename=f"{root}.zip", data=buffer.getvalue(), name=name)
