"""How a speedup reads on every page: "1.23×", or "interp." for a CPU-interpreter timing.

Interpreter ratios (CPU emulation against torch on the CPU, ~0.001×) check correctness, not
speed; printed as numbers they read as "0.00×" (issue 17). static/js/job_live.js writes the
same marker on the live job page.
"""

from __future__ import annotations

from django import template
from django.utils.html import format_html

register = template.Library()

INTERPRETER_TITLE = "Timed under Triton's CPU interpreter: checks correctness, not speed"


@register.filter
def speedup(value: float | None, interpreter: bool = False) -> str:
    """{{ it.speedup|speedup:v.interpreter }}"""
    if interpreter:
        return format_html('<abbr class="interp" title="{}">interp.</abbr>', INTERPRETER_TITLE)
    if value is None:
        return "—"
    return f"{value:.2f}×"
