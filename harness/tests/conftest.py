"""Shared helpers for the harness tests: evaluate a fixture candidate by file name."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import kernels
from harness import Backend, Candidate, EvalConfig, evaluate
from harness.device import gpu_visible

EXPLOITS = Path(__file__).parent / "exploits"
FIXTURES = Path(__file__).parent / "fixtures"


def pytest_collection_modifyitems(config, items):
    if gpu_visible():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def interpreter_broken() -> bool:
    """Triton 3.6's interpreter fails under numpy >= 2.5 (the GPU image); CI pins 2.2."""
    import numpy

    major, minor = (int(x) for x in numpy.__version__.split(".")[:2])
    return (major, minor) >= (2, 5)


needs_interpreter = pytest.mark.skipif(
    interpreter_broken(), reason="Triton 3.6 interpreter is broken under numpy>=2.5 (GPU image)"
)


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def source(name: str, **replace: object) -> str:
    text = (EXPLOITS / f"{name}.py").read_text()
    for key, value in replace.items():
        text = text.replace(f"{key} = 0", f"{key} = {value!r}", 1)
    return text


def fresh(name: str, **replace: object) -> str:
    """The fixture's source made unique: its recording is not in the artifact store, so it
    runs (and prints) in its sandbox now rather than being replayed from an earlier run."""
    return source(name, **replace) + f"\n# run {uuid.uuid4().hex}\n"


def run_fixture(name: str, problem=None, *, source_text: str | None = None, **config):
    problem = problem or kernels.parse_problem("matmul", "64x48x32", "fp16", "NN")
    config.setdefault("quick", True)
    if not gpu_visible():
        config.setdefault("time_candidate", False)
    return evaluate(Candidate(source_text or source(name)), problem, config=EvalConfig(**config))


def tiled_render(shape: str = "64x48x32"):
    """Our own matmul_tiled render at its default point (a trusted render: no recording) and
    its fp16 NN problem."""
    problem = kernels.parse_problem("matmul", shape, "fp16", "NN")
    family = next(f for f in kernels.get_op("matmul").families() if f.name == "matmul_tiled")
    params = family.default(problem)
    render = Candidate.of_render(
        family.render(problem, params), Backend.TRITON, family.name, params
    )
    return render, problem


def checks(evaluation) -> set[str]:
    return {f.check for f in evaluation.findings}


def failed_stages(evaluation) -> set[str]:
    return {s.name for s in evaluation.stages if not s.passed}


@pytest.fixture
def secret_env(monkeypatch):
    """Secrets as a Celery worker would hold them; the sandbox must not pass them on."""
    values = {
        "OPENAI_API_KEY": "sk-kf-test-not-a-real-key",
        "DATABASE_URL": "postgres://kf:hunter2@127.0.0.1/kf",
        "REDIS_URL": "redis://:hunter2@127.0.0.1:6379/0",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    assert os.environ["OPENAI_API_KEY"] == values["OPENAI_API_KEY"]
    return values
