"""What the harness sandbox costs: per-phase wall times of honest evaluations, before vs after.

Each side (this checkout, and `--base`: another checkout of the repo, e.g. `git archive main`)
runs in its own interpreter; the sides alternate round by round so a drifting machine load
(2 shared CPU cores here) hits both alike. Per round and side: one warm-up evaluation (cold
spares, first imports), then `--n` measured ones; the medians of `checks["phase_wall_s"]` and of
the whole evaluate() call are reported, and the mean CPU seconds per evaluation (the sandbox's
cost without the machine's load in it).

Every measured evaluation of an untrusted fixture gets a source of its own (a comment with a
fresh id): nothing it records is reused, so the numbers include the recording every new
candidate pays. `render_rmsnorm` is a render of our own family, the agent's usual tier-two
candidate (the judge runs it in-process; the base side evaluates the same source its way).

    python -m benchmarks.sandbox_cost --base /tmp/kf-base --rounds 3 --n 3 \
        --out benchmarks/results/sandbox_cost_cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
FIXTURES = ("honest_torch_matmul", "honest_triton_rmsnorm", "render_rmsnorm")

_SIDE = r"""
import json, resource, sys, time, uuid
sys.path.insert(0, {repo!r})
import kernels
from harness import Backend, Candidate, EvalConfig, evaluate
from harness.device import gpu_visible

gpu = gpu_visible()
problems = {{
    "honest_torch_matmul": kernels.parse_problem("matmul", "64x48x32", "fp16", "NN"),
    "honest_triton_rmsnorm": kernels.parse_problem("rmsnorm", "64x256", "fp16", ""),
    "render_rmsnorm": kernels.parse_problem("rmsnorm", "64x256", "fp16", ""),
}}
if gpu:
    problems = {{
        "honest_torch_matmul": kernels.parse_problem("matmul", "2048x2048x2048", "bf16", "NN"),
        "honest_triton_rmsnorm": kernels.parse_problem("rmsnorm", "4096x4096", "bf16", ""),
        "render_rmsnorm": kernels.parse_problem("rmsnorm", "4096x4096", "bf16", ""),
    }}
def candidate(name):
    if name == "render_rmsnorm":
        family = kernels.get_op("rmsnorm").families()[0]
        params = family.default(problems[name])
        src = family.render(problems[name], params)
        of_render = getattr(Candidate, "of_render", None)  # the base side may not have it
        return of_render(src, Backend.TRITON, family.name, params) if of_render else Candidate(src)
    src = open({repo!r} + f"/harness/tests/exploits/{{name}}.py").read()
    return Candidate(src + f"\n# {{uuid.uuid4().hex}}\n")
def cpu():  # this process and every child it reaped (spares: when reaped, maybe one run later)
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
out = []
for name in {fixtures!r}:
    for i in range({n} + 1):
        t0, c0 = time.monotonic(), cpu()
        ev = evaluate(candidate(name), problems[name], config=EvalConfig(quick=True))
        wall, cpu_s = time.monotonic() - t0, cpu() - c0
        if i == 0:
            continue  # warm-up: cold spares and first imports
        out.append({{"fixture": name, "verdict": ev.verdict.value, "total_s": wall, "cpu_s": cpu_s,
                     "phases": ev.checks.get("phase_wall_s", {{}})}})
print("RESULT " + json.dumps(out))
"""


def _side(repo: str, fixtures: tuple[str, ...], n: int) -> list[dict]:
    code = _SIDE.format(repo=repo, fixtures=fixtures, n=n)
    extra = os.environ.get("PYTHONPATH", "")  # e.g. carried wheels on a GPU box
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (repo, extra) if p)}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=repo, capture_output=True, text=True
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"side {repo} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


def _medians(runs: list[dict]) -> dict:
    summary: dict = {}
    for fixture in sorted({r["fixture"] for r in runs}):
        mine = [r for r in runs if r["fixture"] == fixture]
        phases = sorted({p for r in mine for p in r["phases"]})
        summary[fixture] = {
            "runs": len(mine),
            "verdicts": sorted({r["verdict"] for r in mine}),
            "total_s": round(statistics.median(r["total_s"] for r in mine), 3),
            # CPU seconds per evaluation (all processes): robust to a loaded machine's
            # scheduling, which dominates wall times on 2 shared cores; mean, not median,
            # because a spare's CPU is counted when it is reaped, often one run later.
            "cpu_s_mean": round(statistics.mean(r.get("cpu_s", 0.0) for r in mine), 3),
            "phase_wall_s": {
                p: round(statistics.median(r["phases"][p] for r in mine if p in r["phases"]), 3)
                for p in phases
            },
        }
        summary[fixture]["sum_of_phases_s"] = round(
            sum(summary[fixture]["phase_wall_s"].values()), 3
        )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", help="another checkout to compare with (runs alternate)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=3, help="measured evaluations per round")
    parser.add_argument("--fixtures", default=",".join(FIXTURES))
    parser.add_argument("--out")
    args = parser.parse_args()
    fixtures = tuple(args.fixtures.split(","))
    sides = {"after": str(HERE)} | ({"before": os.path.abspath(args.base)} if args.base else {})
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for rnd in range(args.rounds):
        order = list(sides) if rnd % 2 == 0 else list(reversed(sides))
        for name in order:
            runs[name] += _side(sides[name], fixtures, args.n)
            print(f"round {rnd + 1}/{args.rounds} {name} done", file=sys.stderr, flush=True)
    import torch  # versions for the record only

    record = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "what": "per-phase wall times of quick honest evaluations (evaluate(), spares on)",
        "command": "python -m benchmarks.sandbox_cost " + " ".join(sys.argv[1:]),
        "host": {
            "machine": platform.machine(),
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
        },
        "device": torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else "cpu (interpreter)",
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "sides": {name: _medians(r) for name, r in runs.items()},
        "runs": runs,
    }
    text = json.dumps(record, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps(record["sides"], indent=1))


if __name__ == "__main__":
    main()
