"""Parent side of a recording: run candidate_record in the candidate's sandbox, keep its plans.

Used by evaluate() (just before judging), precompile() (ahead of time, on the CPU cores) and
profile(). The child's result is untrusted data: every field is type-checked here, every blob
hashed by us before it is stored (artifacts.py), every plan decoded (plan.py) before it is
filed under the key computed from the source we sent.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import plan as P
from harness.config import EvalConfig
from harness.judge import artifacts
from harness.results import Backend, Candidate, CompileResult
from harness.sandbox import ChildResult, ChildStatus, run_child


@dataclass
class Recorded:
    key: str
    plans: list[dict] | None = None  # encoded and checked; None when there are none
    compile: CompileResult = field(default_factory=lambda: CompileResult(ok=False))
    # {"case", "kind", "detail"}: kind "raised" (run() raised: the candidate is wrong),
    # "contract" (it did something a plan cannot hold), "compile"
    error: dict[str, str] | None = None
    cached: bool = False
    child: ChildResult | None = None  # the sandbox's outcome (None when cached)


def record(
    candidate: Candidate,
    shapes: list[dict[str, Any]],
    config: EvalConfig,
    gpu: bool,
    *,
    wall_s: float | None = None,
    background: bool = False,
) -> Recorded:
    """The candidate's plans at `shapes`: from the store, else recorded now in its sandbox
    (`background`: ahead of its evaluation, below the timing children's priority)."""
    device = "cuda" if gpu else "cpu"
    key = artifacts.plans_key(candidate.source, shapes, device)
    store = artifacts.store()
    cached = artifacts.load_plans(store, key)
    if cached is not None:
        return Recorded(key, cached, CompileResult(ok=True, cached=True), cached=True)
    job = {
        "source": candidate.source,
        "problems": shapes,
        "op_ref": config.op_ref,
        "device": device,
        "interpreter": not gpu,
    }
    child = run_child(
        "candidate_record",
        job,
        "",
        limits=config.limits,
        wall_s=wall_s if wall_s is not None else record_wall(candidate, config),
        cuda=gpu,
        isolate_net=config.network_isolation,
        env_extra={} if gpu else {"TRITON_INTERPRET": "1"},
        prestart=True,  # the next recording (the agent makes many) starts warm
        background=background,
    )
    out = Recorded(key, child=child)
    if child.status is not ChildStatus.OK:
        return out
    result = child.result
    info = result.get("compile")
    info = info if isinstance(info, dict) else {}
    out.compile = CompileResult(
        ok=bool(info.get("ok")),
        log=str(info.get("log", ""))[-6000:],
        seconds=_number(info.get("seconds")),
    )
    if not out.compile.ok:
        return out
    error = result.get("error")
    if error is not None:
        error = error if isinstance(error, dict) else {}
        out.error = {
            "case": str(error.get("case", ""))[:200],
            "kind": str(error.get("kind", "contract"))[:20],
            "detail": str(error.get("detail", ""))[-6000:],
        }
        return out
    out.plans = keep(result, store, key)
    if out.plans is None:
        out.error = {"case": "", "kind": "contract", "detail": "the recording sent no usable plans"}
    return out


def record_wall(candidate: Candidate, config: EvalConfig) -> float:
    """A recording's wall-clock limit: a CUDA candidate builds its kernels while recorded."""
    return config.limits.wall_s + (
        config.compile_wall_s if candidate.backend is Backend.CUDA else 0
    )


def keep(result: dict, store: Path, key: str) -> list[dict] | None:
    """File a recording's blobs by their hash (computed here) and its plans under `key`; the
    plans are decoded once to prove they are plans. None when the result holds none."""
    raw_plans = result.get("plans")
    blobs = result.get("blobs")
    if not isinstance(raw_plans, list) or not isinstance(blobs, dict):
        return None
    try:
        plans = [P.Plan.from_json(p) for p in raw_plans]
    except P.PlanError:
        return None
    needed = set().union(*(p.binaries() for p in plans)) if plans else set()
    for sha in needed:  # only what a plan names is kept
        try:
            data = base64.b64decode(str(blobs.get(sha, "")), validate=True)
        except (binascii.Error, ValueError):
            return None
        if not data or artifacts.put(store, data) != sha:
            return None  # a blob that is not what its name says: the recording is refused
    encoded = [p.to_json() for p in plans]
    artifacts.save_plans(store, key, encoded)
    return encoded


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
