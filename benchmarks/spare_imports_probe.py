"""Which imports a judge's warm spare could make ahead without starting a thread or CUDA.

A spare is refused if it has a second thread when claimed (harness/sandbox/boot.py
_warm_up: Landlock would not restrict it). The judge's torch.compile baseline still spends
seconds in imports a spare does not make (compile_setup: torch.compile() imports
torch._inductor.compile_fx, 642 modules). This prints, per import in the order
torch.compile() needs them, its seconds, the thread count after it and whether CUDA is
initialized, as JSON lines (on the H200 image, torch 2.11: functorch.compile keeps one
thread, torch._inductor.lowering starts a second; results/spare_imports_probe_h200.json):

    OPENBLAS_NUM_THREADS=1 python -m benchmarks.spare_imports_probe

Run it as its own process (nothing imported before it), on the device.
"""

from __future__ import annotations

import importlib
import json
import os
import time

STEPS = (
    "torch",
    "triton",
    "triton.language",
    "harness.phases",
    "torch._dynamo",
    "torch._inductor.config",
    "functorch.compile",
    "torch._inductor.codecache",
    "torch._inductor.lowering",
    "torch._inductor.select_algorithm",
    "torch._inductor.compile_fx",
)


def _row(step: str, seconds: float, error: str = "") -> str:
    import torch

    return json.dumps(
        {
            "import": step,
            "s": round(seconds, 3),
            "threads": len(os.listdir("/proc/self/task")),
            "cuda_initialized": torch.cuda.is_initialized(),
            "error": error,
        }
    )


def main() -> None:
    for name in STEPS:
        started = time.perf_counter()
        error = ""
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001  (reported, and the next step still runs)
            error = repr(exc)[:200]
        print(_row(name, time.perf_counter() - started, error), flush=True)
    import torch

    started = time.perf_counter()
    torch.compile(lambda x: x + 1, mode="max-autotune-no-cudagraphs", dynamic=False)
    print(_row("torch.compile(fn) (no call)", time.perf_counter() - started), flush=True)


if __name__ == "__main__":
    main()
