"""How far over the matmul tolerance a GEMM's fp32 accumulation alone lands on the deep-K
dynamic_range case (issue 24, item 5), and whether the vendor library lands there too.

    python -m benchmarks.accumulation_probe --out benchmarks/results/deep_k_accumulation_cpu.json
    python -m benchmarks.accumulation_probe --device cuda --out ...   # on a GPU: cuBLAS too

On any machine: the op's own dynamic_range inputs (a row and column subset of the full shape,
so the CPU can hold it) summed in IEEE fp32 in K order, 64 at a time, as a tile loop does.
On a GPU, at the full shape: torch.matmul (cuBLAS) and the tiled Triton family. Each line is
the worst element's error as a multiple of the tolerance (<= 1 passes), its absolute error and
its reference value.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time

import torch

from kernels import get_op
from kernels.candidate import load_module
from kernels.checking import compare
from kernels.problem import Problem

SHAPES = ((4096, 3584, 18944), (2048, 8192, 28672), (512, 512, 32768), (8192, 8192, 8192))
STRIDE = 8  # every 8th row and column on the CPU


def _measure(label: str, out: torch.Tensor, ref: torch.Tensor, tol) -> dict:
    """The worst element as the check sees it: its error in tolerances, and there the
    absolute error and the reference value."""
    err = (out.double() - ref).abs()
    ratio = err / (tol.atol + tol.rtol * ref.abs())
    worst = int(ratio.argmax())
    return {
        "how": label,
        "worst_x_tolerance": compare(out, ref, tol).worst_error,
        "abs_error_there": float(err.flatten()[worst]),
        "reference_there": float(ref.flatten()[worst]),
    }


def probe(shape: tuple[int, int, int], device: str) -> dict:
    op = get_op("matmul")
    problem = Problem("matmul", shape, "bf16", "NN")
    tol = op.tolerance(problem)
    a, b = op.adversarial_inputs(problem, seed=7, device=device)["dynamic_range"]
    rows: list[dict] = []
    if device == "cpu":
        a, b = a[::STRIDE], b[:, ::STRIDE]
    ref = (a.double() @ b.double()).to(device)
    acc = torch.zeros(a.shape[0], b.shape[1], device=device)
    for k0 in range(0, a.shape[1], 64):
        acc += a[:, k0 : k0 + 64].float() @ b[k0 : k0 + 64].float()
    rows.append(_measure("IEEE fp32, K in order by 64", acc.to(torch.bfloat16), ref, tol))
    if device == "cuda":
        out = torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=device)
        torch.matmul(a, b, out=out)
        rows.append(_measure("torch.matmul (cuBLAS)", out, ref, tol))
        family = next(f for f in op.families() if f.name == "matmul_tiled")
        module = load_module(family.render(problem, family.default(problem)))
        module.run(a, b, out=out)
        rows.append(_measure("matmul_tiled (tensor cores, K in order)", out, ref, tol))
    subset = f"every {STRIDE}th row and column" if device == "cpu" else "all"
    return {"shape": list(shape), "elements": subset, "results": rows}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return f"CPU: {names[0] if names else platform.machine()} ({torch.get_num_threads()} threads)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    started = time.monotonic()
    found = [probe(s, args.device) for s in SHAPES]
    for f in found:
        for r in f["results"]:
            print(f"{f['shape']} {r['how']}: {r['worst_x_tolerance']:.3g}x tolerance "
                  f"(error {r['abs_error_there']:.3g} at {r['reference_there']:.3g})")  # fmt: skip
    record = {
        "what": "deep-K dynamic_range: fp32 accumulation error against the matmul tolerance",
        "date": datetime.date.today().isoformat(),
        "command": "python -m benchmarks.accumulation_probe " + " ".join(sys.argv[1:]),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else _cpu_name(),
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "seconds": round(time.monotonic() - started, 1),
        "probes": found,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
