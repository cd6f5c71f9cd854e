"""Re-plan recorded model jobs with today's Amdahl plan: what each would fund now.

A model job's result (`benchmarks.model_job --record`) keeps the profile it was planned from
(the compiled model's kernel groups and the fusion sites) and the plan it got. This makes the
plan again from that profile, with and without the GPU's measured ceilings (the roof the plan
reads each problem's headroom from: the profile's own where it recorded one, else --roof), at
the recorded budget and each problem's recorded least slice, so a change to the plan's rule can
be read against real profiles without a GPU (`--budget`: at another budget than the recorded):

    python -m benchmarks.replan benchmarks/results/model_*_h200*.json \\
        --roof benchmarks/results/model_gptj_block_h200_roofplan.json [--budget S] --out F.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agents.amdahl import MinimumSlice, Plan, make_plan
from benchmarks import results_record
from harness.model.classify import plan_groups
from harness.results import DeviceInfo
from kernels.problem import Problem

DEFAULT_LEAST_S = 198.0  # a GEMM's least slice on an H200 with no library (the recorded plans)


def recorded_roof(result: dict[str, Any]) -> DeviceInfo | None:
    roof = result.get("profile", {}).get("roof")
    return DeviceInfo(**roof) if roof else None


def replan(result: dict[str, Any], roof: DeviceInfo | None, budget_s: float | None = None) -> Plan:
    """The plan today's rule makes from a recorded job's profile, budget (or `budget_s`) and
    least slices."""
    profile, recorded = result["profile"], result["plan"]
    compiled = profile.get("compiled") or {}
    groups = compiled["groups"] if profile.get("basis") == "torch.compile" else profile["groups"]
    least = {i["key"]: i.get("least_s") or DEFAULT_LEAST_S for i in recorded["items"]}
    return make_plan(
        plan_groups(groups, profile["sites"], roof),
        budget_s=budget_s or recorded["budget_s"],
        least=lambda p: MinimumSlice(least.get(Problem.from_dict(dict(p)).key, DEFAULT_LEAST_S)),
    )


def rows(plan: Plan) -> list[dict[str, Any]]:
    return [
        {
            "key": i.key,
            "share": round(i.share, 4),
            "expected_gain": round(i.expected_gain, 4),
            "budget_s": i.budget_s,
        }
        for i in plan.items
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replan")
    parser.add_argument("results", nargs="+", help="model_job --record files")
    parser.add_argument("--roof", help="a model_job result whose profile recorded the ceilings")
    parser.add_argument("--budget", type=float, help="plan at this budget, not the recorded one")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    fallback = (
        recorded_roof(json.loads(Path(args.roof).read_text())["result"]) if args.roof else None
    )
    jobs = {}
    for path in args.results:
        result = json.loads(Path(path).read_text())["result"]
        roof = recorded_roof(result) or fallback
        jobs[Path(path).name] = {
            "recorded": [
                {k: i[k] for k in ("key", "share", "budget_s")} for i in result["plan"]["items"]
            ],
            "no_roof": rows(replan(result, None, args.budget)),
            "roof": rows(replan(result, roof, args.budget)) if roof else None,
            "roof_from": None if roof is None else roof.name,
        }
        print(Path(path).name, file=sys.stderr)
        for name in ("recorded", "roof"):
            funded = [f"{r['key']} ({r['budget_s']:.0f} s)" for r in jobs[Path(path).name][name] or []
                      if r["budget_s"]]  # fmt: skip
            print(f"  {name}: {', '.join(funded) or 'nothing'}", file=sys.stderr)
    stamp = results_record.stamp("benchmarks.replan", argv if argv is not None else sys.argv[1:])
    results_record.write(stamp | {"jobs": jobs}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
