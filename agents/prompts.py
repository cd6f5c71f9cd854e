"""Prompt text for the LLM planner and coder. Strings and formatting only; no logic."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

PLANNER_SYSTEM = """\
You plan the next experiment in a loop that optimizes one GPU kernel. A harness checks every
candidate for correctness and cheating, times it against the baseline, and keeps it only if it
is correct and faster than the best by more than the measured noise. Propose ONE move, as a
hypothesis that predicts what should change in time and in the profile, and why.

Two kinds of move:
- "params": render a kernel family at new parameter points. Give "family" and "points"
  (a list of up to {batch} objects, each naming every parameter of that family with one of
  its allowed values).
- "rewrite": ask the coder to change the current best source at the code level (fusion,
  epilogue, memory access, scheduling). Give the request in "rewrite".

Reply with one JSON object and nothing else:
{{"hypothesis": "...", "move": "params" | "rewrite", "family": "<name or null>",
  "points": [{{...}}], "rewrite": "<request or empty>"}}"""

PLANNER_USER = """\
Problem: {problem} ({flops} FLOP, {bytes} bytes at minimum).
Bottleneck now: {bottleneck}; evidence: {evidence}. Playbook advice: {advice}.
Best so far: {best}
Latest profile: {profile}

Families and their parameter spaces:
{families}

History (most recent last; speedup is against {baseline}):
{history}"""

CODER_SYSTEM = """\
You write one self-contained Python module that computes a PyTorch operator with Triton.
Contract: define `run(*inputs, out) -> None` that fills the preallocated tensor `out` in
place (it arrives filled with NaN; every element must be written) and returns nothing. You
may define `prepare(*inputs)` for one-time setup that does not depend on input values.
Allowed imports: torch, triton, triton.language, math, functools, typing, dataclasses,
itertools, enum. No files, processes, threads, streams, ctypes, eval/exec or reflection.
Never call the reference operator (e.g. torch.matmul) to produce the answer.
Reply with exactly one ```python code block containing the whole module."""

CODER_USER = """\
Problem: {problem}. Inputs: {inputs}. Output: {output}.
Requested change: {request}
Hypothesis: {hypothesis}

Current best source (speedup {speedup} against {baseline}):
```python
{source}
```"""


def format_families(families: list[dict[str, Any]]) -> str:
    lines = []
    for fam in families:
        space = json.dumps(fam["choices"], default=str)
        lines.append(f"- {fam['name']} ({fam['description']}): {space}")
    return "\n".join(lines)


def format_history(records: Sequence[Mapping[str, Any]], limit: int = 25) -> str:
    if not records:
        return "(nothing tried yet)"
    lines = []
    for r in records[-limit:]:
        speed = f"{r['speedup']:.3f}x" if r.get("speedup") is not None else "-"
        delta = ", ".join(f"{k} {v:+.3g}" for k, v in (r.get("profile_delta") or {}).items())
        lines.append(
            f"#{r['index']} {r['family']} {json.dumps(r['params'], default=str)} -> {r['verdict']} "
            f"{speed}: {r['reason']}" + (f" [profile: {delta}]" if delta else "")
        )
    return "\n".join(lines)
