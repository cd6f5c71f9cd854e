"""A shared memory arena: the judge's buffers that an untrusted CPU executor may write.

Without a GPU an untrusted candidate's kernels are Python (Triton's interpreter), which the
judge must not run in its own process. So the judge allocates every input and every poisoned,
guard-banded output in a memfd that both processes map, asks the executor (a sandboxed child:
harness/child/serve.py) to replay the plan on views of it, and reads the results itself. The
memfd is sealed against growing and shrinking: neither side can change its size.
"""

from __future__ import annotations

import fcntl
import mmap
import os

import torch

ALIGN = 256  # every allocation starts on this many bytes (what the CUDA allocator gives)
_F_ADD_SEALS = 1033
_F_SEAL_SEAL, _F_SEAL_SHRINK, _F_SEAL_GROW = 0x1, 0x2, 0x4


def create(size: int) -> int:
    """A sealed memfd of `size` bytes (sparse: pages exist once written); returns its fd."""
    fd = os.memfd_create("kf-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, _F_ADD_SEALS, _F_SEAL_SHRINK | _F_SEAL_GROW | _F_SEAL_SEAL)
    return fd


class Arena:
    def __init__(self, fd: int) -> None:
        self.size = os.fstat(fd).st_size
        self._map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        self._next = 0

    def tensor(
        self, offset: int, dtype: torch.dtype, shape: tuple[int, ...], strides: tuple[int, ...]
    ) -> torch.Tensor:
        """The tensor at `offset`; its elements must lie inside the arena."""
        itemsize = dtype.itemsize
        span = (
            1 + sum((s - 1) * st for s, st in zip(shape, strides, strict=True)) if all(shape) else 0
        )
        if offset < 0 or offset % itemsize or offset + span * itemsize > self.size:
            raise ValueError(f"a tensor at byte {offset} does not fit the arena")
        if any(st < 0 for st in strides):
            raise ValueError("negative strides")
        flat = self.bytes[offset : offset + max(span, 1) * itemsize].view(dtype)
        return flat.as_strided(shape, strides)

    def empty_strided(
        self, shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[torch.Tensor, int]:
        """A new tensor in the arena (the judge's side allocates; bump, never freed)."""
        itemsize = dtype.itemsize
        span = (
            1 + sum((s - 1) * st for s, st in zip(shape, strides, strict=True)) if all(shape) else 1
        )
        offset = -(-self._next // ALIGN) * ALIGN
        end = offset + span * itemsize
        if end > self.size:
            raise MemoryError(f"the shared arena ({self.size >> 20} MiB) is full")
        self._next = end
        return self.tensor(offset, dtype, shape, strides), offset

    def offset_of(self, t: torch.Tensor) -> int:
        return t.data_ptr() - self.bytes.data_ptr()

    def close(self) -> None:
        del self.bytes
        self._map.close()


def describe(arena: Arena, t: torch.Tensor) -> list:
    """[offset, dtype, shape, strides]: how a tensor of the arena travels in a request."""
    return [
        arena.offset_of(t),
        str(t.dtype).removeprefix("torch."),
        list(t.shape),
        list(t.stride()),
    ]


def from_description(arena: Arena, desc: list) -> torch.Tensor:
    from harness.plan import DTYPES

    offset, dtype, shape, strides = desc
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}")
    return arena.tensor(int(offset), getattr(torch, dtype), tuple(shape), tuple(strides))
