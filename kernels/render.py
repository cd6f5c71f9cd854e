"""Helpers that families use to turn a template plus a parameter point into candidate source.

A rendered candidate reads like hand-written Triton: a docstring naming the family and the
point, the parameter values as module constants, then the kernel and its `run`. Templates use
`string.Template` ($NAME placeholders) because Python code is full of braces.
"""

from __future__ import annotations

from collections.abc import Mapping
from string import Template
from typing import Any

from kernels.problem import Problem


def constants_block(values: Mapping[str, Any]) -> str:
    """One `NAME = value` line per entry, in the given order (repr keeps strings quoted)."""
    return "\n".join(f"{name} = {value!r}" for name, value in values.items())


def render_module(
    template: str,
    *,
    family: str,
    problem: Problem,
    params: Mapping[str, Any],
    fixed: Mapping[str, Any] | None = None,
    summary: str = "",
) -> str:
    """Fill `template`'s $HEADER and $CONSTANTS; the same inputs give byte-identical text.

    `fixed` holds values set by the problem (dtype, layout, epilogue), `params` the searched
    meta-parameters; both become module constants so that a diff shows what changed.
    """
    point = ", ".join(f"{k}={v!r}" for k, v in params.items())
    header = (
        f'"""{family}: {summary}\n\n'
        f"Rendered for {problem.key}; meta-parameters are fixed, sizes are dynamic.\n"
        f"Point: {point}\n"
        '"""'
    )
    parts = []
    if fixed:
        parts.append("# Set by the problem (dtype, layout, epilogue); not searched.\n")
        parts.append(constants_block(fixed) + "\n\n")
    parts.append("# Searched meta-parameters.\n" + constants_block(params))
    return Template(template).substitute(HEADER=header, CONSTANTS="".join(parts)).strip() + "\n"


# Pasted into every Triton template: launch a kernel through the compiled kernel once its
# specialization has been seen, skipping the JIT's per-call Python (binding, cache-key
# hashing), which on a slow host costs more than a small kernel runs. The key covers what
# Triton specializes on, so a cached kernel is only reused where the JIT would reuse it.
FAST_LAUNCH = '''
_COMPILED = {}  # (kernel, specialization, warps, stages) -> compiled kernel


def _specialization(kernel, args):
    key = []
    for param, value in zip(kernel.params, args):
        if param.is_constexpr or isinstance(value, (bool, float, str)) or value is None:
            key.append(value)
        elif isinstance(value, int):  # Triton specializes ints on ==1, %16 and 32/64 bits
            key.append((value == 1, value % 16 == 0, -(2**31) <= value < 2**31))
        elif hasattr(value, "data_ptr"):  # tensors: dtype and 16-byte alignment
            key.append((value.dtype, value.data_ptr() % 16 == 0))
        else:  # e.g. host TMA descriptors: leave these launches to the JIT
            return None
    return tuple(key)


def launch(kernel, grid, *args, num_warps=4, num_stages=3, **kwargs):
    """kernel[grid](*args, **kwargs); after the first call, straight to the compiled kernel."""
    if not hasattr(kernel, "params"):  # the CPU interpreter: nothing compiled to reuse
        kernel[grid](*args, **kwargs, num_warps=num_warps, num_stages=num_stages)
        return
    args = (*args, *[kwargs[name] for name in kernel.arg_names[len(args):]])
    spec = _specialization(kernel, args)
    key = (kernel, spec, num_warps, num_stages)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
        if spec is not None:
            _COMPILED[key] = compiled
        return
    grid = (*grid, 1, 1)
    stream = driver.active.get_current_stream(driver.active.get_current_device())
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                 None, None, None, *args)
'''.strip()
