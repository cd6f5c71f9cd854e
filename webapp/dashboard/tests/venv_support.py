"""Install a downloaded package into a throwaway venv and run its own tests, as a user would.

The new venv is made without pip and sees our venv's packages (pip, torch, triton, pytest, a
setuptools with bdist_wheel) through a .pth file: `--system-site-packages` alone would point at
the base interpreter's. The package is installed with --no-deps, without build isolation and
without an index (no network).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackageRun:
    returncode: int
    output: str


def install_and_test(
    zip_path: Path, package: str, workdir: Path, pytest_args: tuple[str, ...] = ()
) -> PackageRun:
    venv = workdir / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
    )
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "_kernelforge_parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", str(zip_path)],
        capture_output=True, text=True, cwd=workdir,
    )  # fmt: skip
    if install.returncode:
        return PackageRun(install.returncode, install.stdout + install.stderr)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "PYTHONPATH"))}
    env["TRITON_INTERPRET"] = "1"
    # Run from an empty folder, so `import <package>` finds the installed copy only.
    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", package,
         "-o", "addopts=", "--rootdir", str(workdir), *pytest_args],
        capture_output=True, text=True, cwd=workdir, env=env, timeout=600,
    )  # fmt: skip
    return PackageRun(tests.returncode, tests.stdout + tests.stderr)
