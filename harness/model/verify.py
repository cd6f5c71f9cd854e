"""verify_model(source, winners) -> EndToEnd: the model run every way a user could run it, with
and without the winning kernels, each output checked against eager PyTorch's and all of them
timed interleaved in one sandboxed process (model_child.verify).

Baselines: eager, CUDA graphs, torch.compile (default; max-autotune-no-cudagraphs) and
torch.compile + CUDA graphs, each with its compile time. Ours: the kernels substituted
(substitute.py: a Dynamo backend that rewrites the captured graphs to call the kernels'
custom ops), run eager, as CUDA graphs, compiled by Inductor around the kernels, and both.
The headline is the best way with the kernels against the best baseline, back to back
(OFFLINE); one call at a time (SERVER) is timed too. Only a speedup whose 95 % interval is
above 1 counts as faster: otherwise the model runs unchanged and nothing is shipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.config import Limits
from harness.model.sandbox import (
    MODEL_VERIFY_LIMITS,
    ModelFailure,
    default_device,
    run_model_phase,
)
from kernels.problem import Problem


@dataclass(frozen=True)
class Winner:
    problem_key: str  # kernels.Problem.key the kernel was verified on
    source: str  # the candidate module: run(*inputs, out)

    @property
    def problem(self) -> Problem:
        op, dims, dtype, *layout = self.problem_key.split("/", 3)
        shape = tuple(int(d) for d in dims.split("x"))
        return Problem(op, shape, dtype, layout[0] if layout else "")


@dataclass
class EndToEnd:
    ok: bool  # the check ran and the best way with the kernels gives matching outputs
    device: str = ""
    device_name: str = ""
    # name -> {side: baseline|ours, label, ok, compile_s, compare, error, offline, server}
    variants: dict = field(default_factory=dict)
    best_baseline: str | None = None
    best_ours: str | None = None
    baseline_us: float | None = None  # median forward, best baseline (OFFLINE)
    ours_us: float | None = None  # median forward, best way with the kernels
    speedup: float | None = None  # baseline_us / ours_us
    speedup_ci: tuple[float, float] | None = None  # bootstrap 95 % interval
    hits: dict[str, int] = field(default_factory=dict)  # problem key -> kernel calls per forward
    unused: list[str] = field(default_factory=list)  # winners no site of the model used
    replaced: list[dict] = field(default_factory=list)  # the sites that call a kernel
    # best baseline's and best way's names -> their GPU kernels per forward, slowest first
    kernels: dict[str, list[dict]] = field(default_factory=dict)
    # per kernel that ran: the model's time with every kernel and without this one (child.py)
    ablation: list[dict] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # kernels the model was slower with
    # sites that took the op's PyTorch baseline in place of the model's code (no kernel):
    # {key, where, saves}; a change to the model's code that its user makes (the download
    # package cannot), weighed by the ablation like a kernel
    rewrites: list[dict] = field(default_factory=list)
    # with rewrites: the model with the kernels alone, as the package runs it (child._package):
    # {way, ok, us, baseline, baseline_us, speedup, speedup_ci, hits}; None without rewrites or kernels
    package: dict | None = None
    regime: str = ""
    failure: ModelFailure | None = None
    message: str = ""

    @property
    def faster(self) -> bool:
        """Verified faster than the best baseline beyond noise: the only case that ships."""
        return bool(self.ok and self.speedup_ci and self.speedup_ci[0] > 1.0)

    @property
    def package_faster(self) -> bool:
        """The download package alone (the kernels, no change to the model's code) is verified
        faster than the best baseline: what decides whether a kernel ships. Without rewrites
        that is `faster`; with them, the kernels-only run of `package`."""
        if not self.rewrites:
            return self.faster
        p = self.package or {}
        ci = p.get("speedup_ci")
        return bool(self.faster and p.get("ok") and ci and ci[0] > 1.0)

    @property
    def outputs_match(self) -> bool:
        return self.ok

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "faster": self.faster,
            "package_faster": self.package_faster,
            "device": self.device,
            "device_name": self.device_name,
            "variants": self.variants,
            "best_baseline": self.best_baseline,
            "best_ours": self.best_ours,
            "baseline_us": self.baseline_us,
            "ours_us": self.ours_us,
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None,
            "hits": self.hits,
            "unused": self.unused,
            "replaced": self.replaced,
            "kernels": self.kernels,
            "ablation": self.ablation,
            "rewrites": self.rewrites,
            "package": self.package,
            "left_out": self.left_out,
            "regime": self.regime,
            "failure": self.failure.value if self.failure else None,
            "message": self.message,
        }


def verify_model(
    source: str,
    winners: list[Winner],
    *,
    device: str | None = None,
    limits: Limits = MODEL_VERIFY_LIMITS,
    seed: int = 0,
    max_samples: int = 50,
    compile: bool | None = None,
    max_autotune: bool | None = None,
    compile_threads: int = 1,
    ablate: bool = True,
    baseline_rewrites: bool = True,
) -> EndToEnd:
    """compile: time the torch.compile variants (default: on a GPU only; a CPU compile takes
    minutes). max_autotune adds the max-autotune-no-cudagraphs baseline (slow to compile;
    default: on a GPU). ablate: weigh each kernel's own effect and leave out one the model is
    slower with (child._ablate); off only where a check is of the substitution alone.
    baseline_rewrites: also give each site where the op's own PyTorch baseline does less than
    the model's code (sites.Site.baseline_saves: SDPA grouping the k/v heads the model
    repeated) that baseline, weighed like a kernel. That is a change to the user's code, which
    the download package cannot make: the kernels alone are then timed too (`package`), and
    only they decide what ships (`package_faster`)."""
    device = device or default_device()
    job = {
        "seed": seed,
        "substitutions": [
            {"key": w.problem_key, "problem": w.problem.to_dict(), "source": w.source}
            for w in winners
        ],
        "max_samples": max_samples,
        "min_samples": min(10, max_samples),
        "compile": device == "cuda" if compile is None else compile,
        "max_autotune": device == "cuda" if max_autotune is None else max_autotune,
        "compile_threads": compile_threads,
        "ablate": ablate,
        "baseline_rewrites": baseline_rewrites,
    }
    outcome = run_model_phase("model_verify", source, job, device=device, limits=limits)
    if not outcome.ok:
        return EndToEnd(False, device=device, failure=outcome.failure, message=outcome.message)
    r = outcome.result
    variants = r["variants"]
    for regime, stats in r["timing"].items():
        for name, st in stats.items():
            variants[name][regime] = st
    ablation = r.get("ablation", [])
    left_out = [a["key"] for a in ablation if not a["kept"]]
    every_one_slower = bool(left_out) and not r["hits"]
    # no site matched a winner (a rewrite's hits are not a winner's)
    unused = winners and not {w.problem_key for w in winners} & set(r["hits"]) and not left_out
    rewrites = r.get("rewrites", [])
    ok = r.get("best_ours") is not None or not winners or bool(unused) or every_one_slower
    e2e = EndToEnd(
        ok=ok,
        device=r["device"],
        device_name=r["device_name"],
        variants=variants,
        best_baseline=r.get("best_baseline"),
        best_ours=r.get("best_ours"),
        baseline_us=r.get("baseline_us"),
        ours_us=r.get("ours_us"),
        speedup=r.get("speedup"),
        speedup_ci=tuple(r["speedup_ci"]) if r.get("speedup_ci") else None,
        hits=r["hits"],
        unused=r["unused"],
        replaced=r["replaced"],
        kernels=r.get("kernels", {}),
        ablation=ablation,
        left_out=left_out,
        rewrites=rewrites,
        package=r.get("package"),
        regime=r["regime"],
    )
    if not winners and rewrites and e2e.faster:
        e2e.message = (
            "No kernel beat PyTorch on this model's problems; the model is faster with a "
            "change to its code at "
            + _rewrite_sites(rewrites)
            + ", and the package replaces no PyTorch op."
        )
    elif not winners:
        e2e.message = (
            "No kernel beat PyTorch on this model's problems: the model runs unchanged and the "
            "package replaces no PyTorch op."
        )
    elif every_one_slower:
        e2e.message = (
            "Each kernel made the model slower end to end than it runs without that kernel "
            "(torch.compile already does the work it saves), so every one was left out: the "
            "model runs unchanged and the package replaces no PyTorch op."
        )
    elif unused:
        e2e.message = (
            "No winning kernel matched a site of this model (shape, dtype or arguments differ): "
            "the model runs unchanged and the package replaces no PyTorch op."
        )
    elif not ok:
        e2e.failure = ModelFailure.KERNEL
        e2e.message = (
            "With the kernels substituted, no way of running the model gave outputs within "
            "tolerance of the unmodified model's: the kernels are not used."
        )
    elif not e2e.faster:
        e2e.message = (
            f"Nothing beats the best baseline ({variants[e2e.best_baseline]['label']}, "
            f"{e2e.baseline_us:.1f} µs per forward): with the kernels the best was "
            f"{e2e.ours_us:.1f} µs ({e2e.speedup:.3f}x). The model runs unchanged and the "
            "package replaces no PyTorch op."
        )
    elif rewrites and not e2e.package_faster:
        alone = e2e.package or {}
        e2e.message = (
            f"Faster ({e2e.speedup:.3f}x) only with the change to the model's code at "
            + _rewrite_sites(rewrites)
            + ": the kernels alone, as the package would run them, were not verified faster "
            "than the best baseline"
            + (f" ({alone['speedup']:.3f}x)" if alone.get("speedup") else "")
            + (f" (their run failed: {alone['error'][-300:]})" if alone.get("error") else "")
            + ", and the package replaces no PyTorch op."
        )
    return e2e


def _rewrite_sites(rewrites: list[dict]) -> str:
    return "; ".join(f"{', '.join(w['where']) or w['key']} ({w['saves']})" for w in rewrites)
