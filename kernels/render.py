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
