"""Install a downloaded kernel package on a GPU machine and run its own tests; write a JSON record.

Standalone (no Django): the GPU machine has torch and triton, not the web app. The zip comes
from webapp/downloads/tests/test_gpu_package.py, which builds a bf16 sample into
.cache/kf_package_gpu/ on the web app's machine.

    python3 webapp/downloads/gpu_check.py .cache/kf_package_gpu/*.zip --out result.json

The package's tests there run every kernel on CUDA (bf16 included, which Triton's CPU
interpreter cannot check) and call the public PyTorch functions at the won shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def package_name_from(archive: zipfile.ZipFile) -> str:
    """The import name: the folder beside pyproject.toml that holds dispatch.json."""
    return next(n.split("/")[1] for n in archive.namelist() if n.endswith("/dispatch.json"))


def package_name(zip_path: Path) -> str:
    with zipfile.ZipFile(zip_path) as archive:
        return package_name_from(archive)


def device_info() -> dict[str, Any]:
    import torch
    import triton

    driver = ""
    if shutil.which("nvidia-smi"):
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "capability": list(torch.cuda.get_device_capability())
        if torch.cuda.is_available()
        else None,
        "driver": driver or None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": sys.version.split()[0],
    }


def outcomes(junit: Path) -> list[dict[str, str]]:
    """Each test case's name and outcome from pytest's JUnit XML."""
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                detail = (found.get("message") or "")[:300]
        cases.append({"test": case.get("name", ""), "outcome": outcome, "detail": detail})
    return cases


def from_log(log: str) -> list[dict[str, str]]:
    """Outcomes from pytest -v lines (what a run stopped by the timeout left)."""
    found = re.findall(r"::(\S+) (PASSED|FAILED|SKIPPED|ERROR)", log)
    return [{"test": test, "outcome": outcome.lower(), "detail": ""} for test, outcome in found]


def check(zip_path: Path, workdir: Path, timeout_s: float) -> dict[str, Any]:
    name = package_name(zip_path)
    target = workdir / "site"
    started = time.monotonic()
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(zip_path)],
        capture_output=True, text=True,
    )  # fmt: skip
    if install.returncode:
        return {
            "package": name,
            "installed": False,
            "log": (install.stdout + install.stderr)[-4000:],
        }
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the real GPU, not the interpreter
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(target), env.get("PYTHONPATH")) if p)
    junit = workdir / "junit.xml"
    command = [sys.executable, "-m", "pytest", "-v", "-rA", "-p", "no:cacheprovider", "--pyargs",
               name, "-o", "addopts=", "--rootdir", str(workdir), f"--junitxml={junit}"]  # fmt: skip
    try:
        run = subprocess.run(command, capture_output=True, text=True, cwd=workdir, env=env,
                             timeout=timeout_s)  # fmt: skip
        returncode, log = run.returncode, run.stdout + run.stderr
    except subprocess.TimeoutExpired as stopped:  # keep what ran: -v prints each test's outcome
        out = stopped.stdout or b""
        returncode, log = -1, (out.decode() if isinstance(out, bytes) else out) + "\n[timed out]"
    cases = outcomes(junit) if junit.exists() else from_log(log)
    table = json.loads((target / name / "dispatch.json").read_text())
    count = {
        o: sum(c["outcome"] == o for c in cases) for o in ("passed", "failed", "error", "skipped")
    }
    won = "test_a_public_call_at_the_won_shape_runs_the_kernel_and_matches"
    return {
        "package": name,
        "installed": True,
        "pytest_returncode": returncode,
        "timed_out": returncode == -1,
        "counts": count,
        "entries": [{"module": e["module"], "problem": e["problem"]} for e in table["entries"]],
        "bf16_tests_passed": sum(c["outcome"] == "passed" and "bf16" in c["test"] for c in cases),
        "public_calls_at_won_shapes_passed": [
            c["test"] for c in cases if c["test"].startswith(won) and c["outcome"] == "passed"
        ],
        "not_passed": [c for c in cases if c["outcome"] != "passed"],
        "tests": [f"{c['outcome']} {c['test']}" for c in cases],
        "seconds": round(time.monotonic() - started, 1),
        "log_tail": log[-6000:] if returncode else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("zip", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--command", default="", help="the command line to record")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for the tests")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = check(args.zip.resolve(), Path(tmp), args.timeout)
    record = {
        "what": "a downloaded kernel package (bf16 sample) installed with pip and its own tests "
        "run on the GPU: kernels vs PyTorch, and import-time replacement of the PyTorch "
        "functions (won shape -> kernel, every other call -> PyTorch unchanged)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": args.command or " ".join([Path(sys.executable).name, *sys.argv]),
        "device": device_info(),
        "zip": args.zip.name,
        **result,
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    ok = result.get("installed") and result.get("pytest_returncode") == 0
    print(json.dumps({k: record[k] for k in ("device", "counts") if k in record}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
