"""Compile a candidate ahead of its evaluation, and keep compiled kernels by source hash.

An optimizer compiles the next candidates on the CPU cores while the GPU times another. A
precompile is one sandboxed child (phase "candidate_precompile", the same lock-down as every
candidate phase) that imports the candidate and triggers its JIT at the shapes the quick
correctness stage will call, without timing anything. On a GPU every Triton launch is turned
into a compile-only warmup, so a precompile puts no kernel on the GPU that another process is
timing; under the CPU interpreter there is nothing to compile and the call simply runs.

The compile cache is keyed by sha256 of the candidate's source, backend, device kind and the
torch/triton versions. A child only ever writes its own scratch folder (Landlock): the parent
seeds `<workdir>/triton-cache` from the candidate's own key before the child starts and copies
new files back to that key after the child exits, so a candidate can reach no other key's
cache, and a source compiled once (by a precompile or an evaluation) is not compiled again.
CUDA C++ candidates already have such a cache (harness/cuda_ext.py, `cuda-ext/`); a precompile
fills it the same way an evaluation does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config import EvalConfig
from harness.results import Backend, Candidate

if TYPE_CHECKING:
    from kernels.problem import Problem

CACHE_VERSION = "kf-compile-v1"
TRITON_DIR = "triton-cache"  # the child's TRITON_CACHE_DIR under its workdir (sandbox.child_env)
_MAX_KEY_BYTES = 512 * 2**20  # what one key may keep: a candidate cannot fill the disk
_MAX_FILE_BYTES = 64 * 2**20
_MAX_GROUP_BYTES = 2**20
_OK_MARKER = "precompiled.json"


@dataclass(frozen=True)
class PrecompileResult:
    ok: bool
    seconds: float  # wall time of the precompile (the child's start-up included); 0 when cached
    error: str = ""  # why it failed: the import or compile traceback, or the sandbox's reason
    cache_key: str = ""
    cached: bool = False  # this source was precompiled before: no child ran
    # "" when ok; "compile": the candidate failed to import or a kernel failed to compile (an
    # evaluation would fail the same way); "raised": run() raised something else during the
    # compile-only call (not conclusive); "timeout", "crash", "forged", "infra": the sandbox's.
    failure: str = ""
    compile_s: float = 0.0  # import + compile-only calls inside the child: JIT work done ahead
    files: int = 0  # compile-cache files kept under the key after this precompile

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def cache_key(candidate: Candidate, *, gpu: bool) -> str:
    """sha256 of what decides the compiled code: source, backend, device kind and versions."""
    parts = [
        CACHE_VERSION,
        str(candidate.backend),
        "cuda" if gpu else "interpreter",
        _version("torch"),
        _version("triton"),
        candidate.source,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def key_dir(key: str) -> Path:
    from harness import device as device_mod

    return device_mod.cache_dir() / "compile" / key


def seed_cache(workdir: Path, candidate: Candidate, *, gpu: bool) -> int:
    """Copy the candidate's own cached kernels into its scratch Triton cache; returns files.
    A cache that cannot be read is a cache miss, never a failed evaluation."""
    try:
        return _seed(workdir, candidate, gpu)
    except OSError:
        return 0


def keep_cache(workdir: Path, candidate: Candidate, *, gpu: bool) -> int:
    """After the child exited: add the files it compiled to its key; returns the key's files."""
    try:
        return _keep(workdir, candidate, gpu)
    except OSError:
        return 0


def _seed(workdir: Path, candidate: Candidate, gpu: bool) -> int:
    src = key_dir(cache_key(candidate, gpu=gpu)) / "triton"
    if not src.is_dir():
        return 0
    dest = Path(workdir) / TRITON_DIR
    count = 0
    for path, rel in _regular_files(src):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(path, target)
            count += 1
    _rewrite_groups(dest)
    return count


def _keep(workdir: Path, candidate: Candidate, gpu: bool) -> int:
    src = Path(workdir) / TRITON_DIR
    dest = key_dir(cache_key(candidate, gpu=gpu)) / "triton"
    if src.is_dir():
        total = sum(p.stat().st_size for p, _ in _regular_files(dest)) if dest.is_dir() else 0
        # Triton's group files last: a concurrent seed never sees a group before its files.
        files = sorted(_regular_files(src), key=lambda f: f[1].name.startswith("__grp__"))
        for path, rel in files:
            target = dest / rel
            if target.exists() or rel.parts[0].startswith("tmp."):
                continue
            size = path.lstat().st_size
            if size > _MAX_FILE_BYTES or total + size > _MAX_KEY_BYTES:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # Written aside and renamed: a concurrent seed of the same key sees whole files only.
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}")
            try:
                _copy_no_follow(path, tmp)
                os.replace(tmp, target)
                total += size
            except OSError:
                with contextlib.suppress(OSError):
                    tmp.unlink()
    return sum(1 for _ in _regular_files(dest)) if dest.is_dir() else 0


def precompile(
    candidate: Candidate, problem: Problem, *, config: EvalConfig | None = None
) -> PrecompileResult:
    """Import the candidate and compile its kernels in a sandbox, timing nothing."""
    from harness import device as device_mod
    from harness.cases import _fits_interpreter, _pick_sweep, shrink
    from harness.ops import resolve_op
    from harness.sandbox import ChildStatus, run_child, scratch
    from kernels.problem import Problem

    config = config or EvalConfig(quick=True)
    started = time.monotonic()
    gpu = config.device != "cpu" and device_mod.gpu_visible()
    key = cache_key(candidate, gpu=gpu)
    marker = key_dir(key) / _OK_MARKER
    if marker.is_file():
        return PrecompileResult(True, 0.0, cache_key=key, cached=True, files=_count(key))
    if not gpu and candidate.backend is Backend.CUDA:
        return PrecompileResult(
            False,
            0.0,
            "CUDA C++ candidates need a GPU; none is visible",
            key,
            failure="compile",
        )
    op = resolve_op(problem.op, config.op_ref)
    run_problem = problem
    if not gpu:
        if problem.dtype == "bf16":  # as evaluate(): the interpreter gets bf16 wrong
            run_problem = Problem(problem.op, problem.shape, "fp16", problem.layout)
        if not _fits_interpreter(run_problem):
            run_problem = shrink(run_problem)
    shapes = [run_problem, *_pick_sweep(op, run_problem, quick=True, interpreter=not gpu)]
    root = Path(scratch.make("pre"))
    try:
        workdir = root / "sandbox"
        workdir.mkdir()
        seed_cache(workdir, candidate, gpu=gpu)
        job = {
            "problem": run_problem.to_dict(),
            "shapes": [p.to_dict() for p in shapes],
            "op_ref": config.op_ref,
            "device": "cuda" if gpu else "cpu",
            "interpreter": not gpu,
            "source": candidate.source,
            "backend": str(candidate.backend),
            "workdir": str(workdir),
        }
        env = {"KF_COMPILE_CACHE": str(device_mod.cache_dir() / "cuda-ext")}
        if not gpu:
            env["TRITON_INTERPRET"] = "1"
        wall = config.limits.wall_s + (
            config.compile_wall_s if candidate.backend is Backend.CUDA else 0
        )
        res = run_child(
            "candidate_precompile",
            job,
            str(workdir),
            limits=config.limits,
            wall_s=wall,
            cuda=gpu,
            isolate_net=config.network_isolation,
            isolate_fs=config.fs_isolation,
            env_extra=env,
        )
        files = keep_cache(workdir, candidate, gpu=gpu)
        if gpu:
            from harness.evaluation import _keep_cuda_builds

            with contextlib.suppress(OSError):  # another thread kept the same build first
                _keep_cuda_builds(workdir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = time.monotonic() - started
    if res.status is not ChildStatus.OK:
        why = {
            ChildStatus.TIMEOUT: "timeout",
            ChildStatus.CRASH: "crash",
            ChildStatus.FORGED: "forged",
            ChildStatus.INFRA: "infra",
        }[res.status]
        return PrecompileResult(
            False, seconds, f"precompile: {res.error}\n{res.output[-1500:]}", key, failure=why
        )
    info = res.result
    if not info.get("ok"):
        return PrecompileResult(
            False,
            seconds,
            str(info.get("log", ""))[-6000:],
            key,
            failure=str(info.get("failure") or "compile"),
            compile_s=float(info.get("seconds", 0.0)),
            files=files,
        )
    key_dir(key).mkdir(parents=True, exist_ok=True)
    compile_s = float(info.get("seconds", 0.0))
    marker.write_text(json.dumps({"compile_s": compile_s, "problem": problem.key}))
    return PrecompileResult(True, seconds, "", key, compile_s=compile_s, files=files)


# ---------------------------------------------------------------- inside the sandboxed child


def child_phase(job: dict) -> dict:
    """Import the candidate and call it once per shape with kernel launches made compile-only
    (Triton; a CUDA C++ candidate is built by its import alone).

    Inputs are uninitialised tensors of the right shapes, dtypes and strides: compiling depends
    on those (and on the integer arguments), not on values, and writing none costs no GPU time.
    """
    import torch

    from harness.ops import resolve_op
    from harness.phases import _is_compile_error, _load_candidate
    from harness.redact import candidate_traceback
    from kernels.problem import Problem

    device = job["device"]
    t0 = time.perf_counter()
    module, info = _load_candidate(job)
    if module is None:
        return {**info, "failure": "compile"}
    if device == "cuda" and job["backend"] == "cuda":
        # CUDA C++ builds at import (harness/cuda_ext.py); a call would run the kernel on the
        # GPU that another candidate is being timed on.
        return {"ok": True, "seconds": time.perf_counter() - t0}
    if device == "cuda":
        _compile_only_launches()
    try:
        for p in job["shapes"]:
            problem = Problem.from_dict(p)
            op = resolve_op(problem.op, job.get("op_ref", ""))
            inputs = [_empty_like(t, device) for t in _example_inputs(op, problem)]
            spec = op.output_spec(problem)
            out = torch.empty(spec.shape, dtype=spec.dtype, device=device)
            if callable(getattr(module, "prepare", None)):
                module.prepare(*inputs)
            module.run(*inputs, out=out)
        if device == "cuda":
            torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001  (a candidate may raise anything)
        return {
            "ok": False,
            "failure": "compile" if _is_compile_error(exc) else "raised",
            "log": candidate_traceback(exc, job["workdir"], limit=6000),
            "seconds": time.perf_counter() - t0,
        }
    return {"ok": True, "seconds": time.perf_counter() - t0}


def _compile_only_launches() -> None:
    """Every `kernel[grid](...)` compiles (or loads from the cache) and returns, launching
    nothing: Triton's own warmup path. Autotuned kernels compile every config this way."""
    from triton.runtime.jit import JITFunction

    launch = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        return launch(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = compile_only


def _example_inputs(op, problem):
    try:  # shapes, dtypes and strides without materialising data
        return op.make_inputs(problem, seed=0, device="meta")
    except Exception:  # noqa: BLE001  (an op whose input maker needs real tensors)
        return op.make_inputs(problem, seed=0, device="cpu")


def _empty_like(t, device: str):
    import torch

    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)


# ---------------------------------------------------------------- files


def _regular_files(root: Path):
    """(path, relative path) of regular files under root; links and specials are skipped, so
    a child cannot make the parent copy something from outside its scratch folder."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not (base / d).is_symlink()]
        for name in filenames:
            path = base / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if not path.is_symlink() and _is_regular(st.st_mode) and not name.startswith("."):
                yield path, path.relative_to(root)


def _is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)


def _copy_no_follow(src: Path, dest: Path) -> None:
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fin, open(dest, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    finally:
        os.close(fd)


def _rewrite_groups(dest: Path) -> None:
    """Triton's group files hold absolute paths to the kernel's files; point them here."""
    for group in dest.glob("*/__grp__*"):
        try:
            if group.is_symlink() or group.stat().st_size > _MAX_GROUP_BYTES:
                continue
            data = json.loads(group.read_text())
            paths = data.get("child_paths")
            if not isinstance(paths, dict):
                continue
            fixed = {}
            for name, path in paths.items():
                base = os.path.basename(str(path))
                if not base or base in (".", "..") or not (group.parent / base).is_file():
                    raise ValueError(f"group names a missing file {base!r}")
                fixed[str(name)] = str(group.parent / base)
            group.write_text(json.dumps({"child_paths": fixed}))
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                group.unlink()  # a broken group is a cache miss, never an error


def _count(key: str) -> int:
    root = key_dir(key) / "triton"
    return sum(1 for _ in _regular_files(root)) if root.is_dir() else 0


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""
