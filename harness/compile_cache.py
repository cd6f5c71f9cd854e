"""Where trusted code keeps what it compiles: one Triton cache and one CUDA build cache.

Only trusted processes write here: the judge running a render of our own families, and the
screen's children (harness/screen.py), which only ever import such renders. Both share the
caches, so a point the screen compiled is not compiled again when the judge verifies it. An
untrusted candidate never sees these folders (its sandbox binds none of them): what it
compiles dies with its private tmpfs, and its recorded plans and cubins are kept, hashed by
the parent, in the artifact store (harness/judge/artifacts.py).

Used by evaluation, precompile and the screen (parent side only; no torch import).
"""

from __future__ import annotations

from pathlib import Path


def root() -> Path:
    from harness import device as device_mod

    return device_mod.cache_dir()


def cuda_ext_dir() -> Path:
    """CUDA C++ builds of our renders (KF_COMPILE_CACHE and TORCH_EXTENSIONS_DIR of trusted
    children: harness/cuda_ext.py looks there first and builds there)."""
    return root() / "cuda-ext"


def trusted_triton_dir() -> Path:
    """The Triton cache of trusted children (the judge, the screen)."""
    return root() / "trusted-triton"


def trusted_inductor_dir() -> Path:
    """Inductor's caches for the judge's torch.compile baseline on a GPU: its compiled graph
    and its max-autotune choices, kept across evaluations (in a child's workdir they died with
    it, so every full verification compiled and autotuned the baseline again)."""
    return root() / "trusted-inductor"


def trusted_dirs() -> tuple[str, ...]:
    """The folders a trusted child writes besides its workdir (made here)."""
    base = trusted_triton_dir()
    folders = (
        cuda_ext_dir(),
        base,
        base.with_name(base.name + "-baselines"),
        trusted_inductor_dir(),
    )
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return tuple(str(f) for f in folders)


def trusted_env(gpu: bool) -> dict[str, str]:
    env = {
        "KF_COMPILE_CACHE": str(cuda_ext_dir()),
        "TORCH_EXTENSIONS_DIR": str(cuda_ext_dir()),
        "TRITON_CACHE_DIR": str(trusted_triton_dir()),
    }
    if gpu:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(trusted_inductor_dir())
    else:
        env["TRITON_INTERPRET"] = "1"
    return env
