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
_COMPILED = {}  # (kernel, warps, stages, specialization...) -> compiled kernel


def _spec(value):
    # Tensors by dtype and 16-byte alignment (what Triton specializes on); everything else
    # by value, which is finer than Triton's int specialization (==1, %16), so always safe.
    if hasattr(value, "data_ptr"):
        return (value.dtype, value.data_ptr() % 16 == 0)
    return value


def launch(kernel, grid, *args, num_warps=4, num_stages=3, **kwargs):
    """kernel[grid](*args, **kwargs); after the first call, straight to the compiled kernel."""
    if not hasattr(kernel, "params"):  # the CPU interpreter: nothing compiled to reuse
        kernel[grid](*args, **kwargs, num_warps=num_warps, num_stages=num_stages)
        return
    rest = kernel.params[len(args) :]  # by keyword, or a parameter's default
    args = (*args, *[kwargs[p.name] if p.name in kwargs else p.default for p in rest])
    key = (kernel, num_warps, num_stages, *[_spec(v) for v in args])
    try:
        compiled = _COMPILED.get(key)
    except TypeError:  # an unhashable argument (a host TMA descriptor): leave it to the JIT
        kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
        return
    if compiled is None:
        _COMPILED[key] = kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
        return
    grid = (*grid, 1, 1)
    stream = driver.active.get_current_stream(driver.active.get_current_device())
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata,
                 None, None, None, *args)
'''.strip()
