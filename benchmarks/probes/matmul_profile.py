"""Run the benchmark's matmul winners and torch.matmul once each inside NVTX ranges, for ncu.

    ncu --set full --nvtx --nvtx-include "deep_k_cand/" --nvtx-include "deep_k_torch/" \\
        --clock-control none -o out python -m benchmarks.probes.matmul_profile \\
        --results benchmarks/results/matmul_bf16_h200.json --names deep_k

Each problem's winner (family and point from the results JSON) and torch.matmul are warmed
up outside any range, then called once inside a range named <short name>_cand / _torch.
"""

from __future__ import annotations

import argparse
import json

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", required=True)
    parser.add_argument("--names", required=True, help="comma-separated short names (deep_k,...)")
    args = parser.parse_args(argv)

    from kernels import get_op
    from kernels.candidate import load_module
    from kernels.problem import Problem

    with open(args.results) as f:
        results = {r["name"].split("/", 1)[1]: r for r in json.load(f)["results"]}
    op = get_op("matmul")
    families = {f.name: f for f in op.families()}
    for short in args.names.split(","):
        r = results[short]
        problem = Problem.from_dict(r["problem"])
        module = load_module(families[r["family"]].render(problem, r["params"]))
        inputs = op.make_inputs(problem, seed=0, device="cuda")
        out = torch.empty(problem.shape[0], problem.shape[1], dtype=torch.bfloat16, device="cuda")
        run_in_ranges(short, module, inputs, out, r["family"])
    return 0


def run_in_ranges(name: str, module, inputs, out, what: str) -> None:
    """The candidate and torch.matmul, each warmed up outside any range, then called once
    inside the NVTX range <name>_cand / <name>_torch (what ncu --nvtx-include selects)."""
    calls = {
        "cand": lambda: module.run(*inputs, out=out),
        "torch": lambda: torch.matmul(inputs[0], inputs[1], out=out),
    }
    for who, fn in calls.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(f"{name}_{who}")
        fn()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        print(f"# profiled {name}_{who}: {what if who == 'cand' else 'torch.matmul'}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
