"""Row-wise families with a persistent grid and streaming stores (rmsnorm, layernorm, softmax,
cross-entropy). Extends kernels/rowwise.py's space with two levers:

  PROGRAMS_PER_SM   0: one program per ROWS rows (the hardware schedules row blocks).
                    k > 0: a persistent grid of k programs per SM, each looping over row
                    blocks and, in one-pass mode, loading the next block before it reduces
                    and writes the current one (two tiles in registers: more bytes in flight
                    across the reduction and the store, and no per-block launch/ramp cost).
  STREAM_STORE      write the output with the streaming cache hint (.cs): it is written once
                    and never re-read by the kernel, so it need not displace input in L2.

Why: on H100/H200 these kernels sit at 87-95 % of copy bandwidth; what is left is the gap
between one row block's last load and the next block's first (reduction, store, block exit),
which only more independent bytes in flight can hide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.problem import ParamSpace
from kernels.rowwise import MAX_ONE_PASS, RowwiseFamily


class GridRowwiseFamily(RowwiseFamily):
    """RowwiseFamily plus PROGRAMS_PER_SM and STREAM_STORE (see the module docstring)."""

    def space(self, problem):
        base = super().space(problem)
        return ParamSpace(
            {
                **base.choices,
                "PROGRAMS_PER_SM": [0, 1, 2, 4, 8, 16],
                "STREAM_STORE": [False, True],
            },
            constraints=(
                *base.constraints,
                "occupancy: NUM_WARPS*PROGRAMS_PER_SM <= 64 warps per SM",
            ),
        )

    def default(self, problem):
        return {**super().default(problem), "PROGRAMS_PER_SM": 0, "STREAM_STORE": False}

    def check(self, problem, params: Mapping[str, Any]):
        if (why := super().check(problem, params)) is not None:
            return why
        if params["NUM_WARPS"] * params["PROGRAMS_PER_SM"] > 64:
            return "more resident warps than an SM holds (64): fewer programs per SM"
        return None


# run()'s shared launch logic: block width, fallback to two-pass, grid (persistent or not).
LAUNCH_HELPER = '''
_SMS = {}  # device index -> multiprocessor count (queried once)


def sm_count(t):
    if not t.is_cuda:  # the CPU interpreter: a few programs still exercise the loop
        return 2
    index = t.device.index if t.device.index is not None else 0
    if index not in _SMS:
        import torch

        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def launch_shape(x, n_rows, n_cols):
    """(mode, block width, row blocks, grid) for this call."""
    mode = MODE
    block = max(16, triton.next_power_of_2(n_cols))
    if mode == "one_pass" and block > MAX_ONE_PASS:
        mode = "two_pass"
    if mode == "two_pass":
        block = BLOCK_N
    tiles = triton.cdiv(n_rows, ROWS)
    programs = tiles
    if PROGRAMS_PER_SM:
        programs = max(1, min(tiles, PROGRAMS_PER_SM * sm_count(x)))
    return mode, block, tiles, (programs,)
'''.strip()


__all__ = ["MAX_ONE_PASS", "GridRowwiseFamily", "LAUNCH_HELPER"]
