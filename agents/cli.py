"""`python -m agents optimize ...`: a whole optimization from a shell (how benchmarks are taken).

JSON lines go to stdout (one per event, then a summary), a progress bar to stderr. This is an
edge: it is the one place besides the Celery worker that reads the environment (API keys).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from agents.config import Budget, LLMSettings, OptimizeConfig, Provider, parse_duration
from agents.reporting import IterationEvent, SearchStats
from kernels import get_op, parse_problem
from kernels.problem import Problem, ProblemError


def process_started_at() -> float:
    """When this process started, on the time.monotonic() clock: `--budget` caps the whole
    command (interpreter start and imports included), not just the search."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.monotonic() - max(0.0, age)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()


class CliReporter:
    """Reporter for a terminal: JSON lines to `out`, a tqdm bar over the wall budget to stderr."""

    def __init__(self, out: TextIO, *, wall_s: float | None, progress: bool) -> None:
        self.out = out
        self.best: float | None = None
        self.attempts = 0
        self.bar = (
            tqdm(
                total=round(wall_s) if wall_s else None,
                unit="s",
                file=sys.stderr,
                dynamic_ncols=True,
            )
            if progress
            else None
        )

    def _write(self, kind: str, data: dict[str, Any]) -> None:
        self.out.write(json.dumps({"event": kind, **data}, default=str) + "\n")
        self.out.flush()

    def started(self, *, problem: Problem, budget: dict[str, Any]) -> None:
        self._write("started", {"problem": problem.to_dict(), "budget": budget})

    def iteration(self, event: IterationEvent) -> None:
        self.attempts += 1
        self.best = event.best_speedup
        self._write("iteration", event.to_dict())
        if self.bar is not None:
            self.bar.n = min(round(event.elapsed_s), self.bar.total or round(event.elapsed_s))
            best = f"{self.best:.3f}x" if self.best is not None else "-"
            self.bar.set_postfix_str(f"#{event.index} {event.verdict.value} best {best}")

    def search(self, stats: SearchStats) -> None:
        self._write("search", stats.to_dict())
        if self.bar is not None:
            self.bar.n = min(round(stats.elapsed_s), self.bar.total or round(stats.elapsed_s))
            self.bar.set_postfix_str(
                f"screened {stats.screen.candidates} verified {stats.verify.candidates}"
            )

    def profile(self, *, index: int, profile: dict[str, Any]) -> None:
        self._write("profile", {"index": index, "profile": profile})

    def finished(self, *, best: IterationEvent | None, stop_reason: str) -> None:
        if self.bar is not None:
            self.bar.close()
        self._write(
            "finished", {"stop_reason": stop_reason, "best": best.to_dict() if best else None}
        )

    def failed(self, *, error: str) -> None:
        if self.bar is not None:
            self.bar.close()
        self._write("failed", {"error": error})

    def cancel_requested(self) -> bool:
        return False  # Ctrl-C raises KeyboardInterrupt; the checkpoint lets a rerun resume


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agents")
    sub = parser.add_subparsers(dest="command", required=True)
    opt = sub.add_parser("optimize", help="optimize one op at one shape and dtype")
    opt.add_argument("--op", required=True)
    opt.add_argument(
        "--shape", required=True, help="sizes in the op's dims order, e.g. 4096x4096x4096"
    )
    opt.add_argument("--dtype", default="bf16")
    opt.add_argument(
        "--layout", default=None, help="op variant, e.g. NN for matmul (default: the op's first)"
    )
    opt.add_argument(
        "--budget", default="10m", help="wall time cap, e.g. 10m, 90s (across resumes)"
    )
    opt.add_argument("--gpu-budget", default=None, help="harness time cap, e.g. 8m")
    opt.add_argument("--max-attempts", type=int, default=None)
    opt.add_argument("--max-tokens", type=int, default=None, help="LLM token cap")
    opt.add_argument("--max-cost", type=float, default=None, help="LLM cost cap in USD")
    opt.add_argument("--planner", choices=[p.value for p in Provider], default="offline")
    opt.add_argument("--coder", choices=[p.value for p in Provider], default="offline")
    opt.add_argument("--model", default=LLMSettings.model, help="any litellm provider string")
    opt.add_argument("--api-base", default=None)
    opt.add_argument(
        "--api-key-env", default=None, help="variable holding the key (default: provider's)"
    )
    opt.add_argument("--llm-timeout", type=float, default=LLMSettings.timeout_s)
    opt.add_argument("--baseline", default="torch", help="harness baseline the speedup is against")
    opt.add_argument(
        "--plateau", type=int, default=12, help="stop after N attempts in a row not kept (0: never)"
    )
    opt.add_argument("--target-speedup", type=float, default=None)
    opt.add_argument("--roof-pct", type=float, default=None)
    opt.add_argument("--batch-size", type=int, default=4, help="points an LLM plan may name")
    opt.add_argument(
        "--screen-batch", type=int, default=48, help="points handed to the screen per step"
    )
    opt.add_argument("--finalists", type=int, default=2, help="screen finalists verified per round")
    opt.add_argument(
        "--verify-estimate",
        type=float,
        default=None,
        help="seconds one full verification takes, until the run has measured one",
    )
    opt.add_argument("--seed", type=int, default=0)
    opt.add_argument("--no-profile", action="store_true", help="skip Nsight Compute profiling")
    opt.add_argument(
        "--full", action="store_true", help="the harness's full protocol, not quick mode"
    )
    opt.add_argument(
        "--quick-verify",
        action="store_true",
        help="tier two with the quick protocol against --baseline only (not every baseline)",
    )
    opt.add_argument("--max-profiles", type=int, default=None, help="profile at most N candidates")
    opt.add_argument(
        "--no-sanitize", action="store_true", help="verify without compute-sanitizer memcheck"
    )
    opt.add_argument(
        "--precompile",
        choices=("auto", "on", "off"),
        default="auto",
        help="compile next candidates on the CPU while the GPU times one (auto: with a GPU)",
    )
    opt.add_argument("--precompile-workers", type=int, default=None, help="default: cores - 2")
    opt.add_argument(
        "--checkpoint",
        default="sqlite:///var/agents-checkpoints.sqlite3",
        help="DB URL or '' for none",
    )
    opt.add_argument("--thread-id", default=None, help="resume this run if it has checkpoints")
    opt.add_argument("--out-dir", default=None, help="write best.py and result.json here")
    opt.add_argument("--no-progress", action="store_true")
    return parser


def config_from_args(args: argparse.Namespace, environ: dict[str, str]) -> OptimizeConfig:
    key = environ.get(args.api_key_env) if args.api_key_env else None
    base = OptimizeConfig.from_env(environ)
    llm = LLMSettings(
        model=args.model,
        api_base=args.api_base,
        api_key=key or base.llm.api_key,
        timeout_s=args.llm_timeout,
    )
    return OptimizeConfig(
        budget=Budget(
            wall_s=parse_duration(args.budget) if args.budget else None,
            gpu_s=parse_duration(args.gpu_budget) if args.gpu_budget else None,
            llm_tokens=args.max_tokens,
            llm_cost_usd=args.max_cost,
            max_attempts=args.max_attempts,
        ),
        planner=Provider(args.planner),
        coder=Provider(args.coder),
        llm=llm,
        seed=args.seed,
        baseline=args.baseline,
        plateau=args.plateau or None,
        target_speedup=args.target_speedup,
        roof_pct=args.roof_pct,
        batch_size=args.batch_size,
        screen_batch=args.screen_batch,
        finalists=args.finalists,
        verify_estimate_s=args.verify_estimate,
        profile=not args.no_profile,
        max_profiles=args.max_profiles,
        quick=not args.full,
        full_protocol=not args.quick_verify,
        sanitize_final=not args.no_sanitize,
        precompile={"auto": None, "on": True, "off": False}[args.precompile],
        precompile_workers=args.precompile_workers,
    )


def main(argv: list[str] | None = None, *, environ: dict[str, str] | None = None) -> int:
    started_at = process_started_at()
    from agents.optimize import optimize

    args = build_parser().parse_args(argv)
    env = dict(os.environ if environ is None else environ)
    try:
        layout = args.layout if args.layout is not None else get_op(args.op).layouts[0]
        problem = parse_problem(args.op, args.shape, args.dtype, layout)
        config = config_from_args(args, env)
    except (ProblemError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.checkpoint.startswith("sqlite:///") and not args.checkpoint.startswith("sqlite:////"):
        Path(args.checkpoint.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    reporter = CliReporter(sys.stdout, wall_s=config.budget.wall_s, progress=not args.no_progress)
    try:
        result = optimize(
            problem,
            config,
            reporter,
            thread_id=args.thread_id,
            checkpointer_url=args.checkpoint or None,
            started_at=started_at,
        )
    except Exception as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    summary = result.to_dict()
    reporter._write("summary", summary)
    print(summary_text(result), file=sys.stderr)
    if args.out_dir:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps(summary, indent=2, default=str))
        if result.best is not None:
            (out / "best.py").write_text(result.best.source)
    return 0


def summary_text(result: Any) -> str:
    """The run in a few lines for a person: outcome, tiers and their throughput, time."""
    s = result.search

    def rate(tier: Any) -> str:
        per = tier.per_gpu_hour
        return f"{per:,.0f}/GPU-h" if per is not None else "-"

    t = s.time_breakdown()
    lines = [
        f"outcome: {result.outcome}: {result.outcome_reason}",
        f"screened {s.screen.candidates} ({s.screen.passed} passed, {rate(s.screen)}) -> "
        f"fully verified {s.verify.candidates} ({s.verify.passed} passed, {rate(s.verify)})"
        + (
            f"; LLM code checked {s.check.candidates} ({rate(s.check)})"
            if s.check.candidates
            else ""
        ),
        f"time: compile {t['compile']:.0f} s on the CPU (screen waited {t['compile_wait']:.0f} s), "
        f"screen {t['screen']:.0f} s, verify {t['verify']:.0f} s, profile {t['profile']:.0f} s "
        f"of GPU; wall {result.elapsed_s:.0f} s; stop: {result.stop_reason}",
    ]
    if s.families:
        seen = [
            f"{name} {f['passed']}/{f['screened']}"
            + (f" best {f['best_speedup']:.3f}x" if f["best_speedup"] else "")
            + (f" (not passed: {f['why_not']})" if f.get("why_not") else "")
            for name, f in s.families.items()
        ]
        lines.append("screen by family (passed/screened, best vs baseline): " + ", ".join(seen))
    return "\n".join(lines)
