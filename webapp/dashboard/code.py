"""Candidate code for the browser: syntax-highlighted side-by-side diffs, always escaped.

Candidate sources are untrusted text. Pygments' HtmlFormatter escapes every token, and the
lines we build around its output are escaped with Django's `escape`; nothing from a source
reaches the page unescaped.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import StrEnum

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer

MAX_DIFF_LINES = 4000  # beyond this a diff is unreadable anyway; the page says it was cut


class LineKind(StrEnum):
    SAME = "same"
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"
    EMPTY = "empty"


@dataclass(frozen=True)
class DiffRow:
    left_no: int | None
    left: SafeString
    right_no: int | None
    right: SafeString
    kind: LineKind


def _lexer(source: str):
    # Keep blank first/last lines, so highlighted line i is source line i.
    options = {"stripnl": False, "ensurenl": True}
    if source.lstrip().startswith("#include"):
        return CppLexer(**options)
    return PythonLexer(**options)


def source_lines(source: str) -> list[str]:
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def highlighted_lines(source: str) -> list[SafeString]:
    """One escaped, highlighted HTML fragment per source line (no wrapping <pre>)."""
    lines = source_lines(source)
    if not lines:
        return []
    html = highlight("\n".join(lines) + "\n", _lexer(source), HtmlFormatter(nowrap=True))
    fragments = html.split("\n")
    fragments = (fragments + [""] * len(lines))[: len(lines)]
    # Pygments escapes token text; the fragments are safe to place as HTML.
    return [mark_safe(fragment) for fragment in fragments]  # noqa: S308


def side_by_side(old: str, new: str) -> tuple[list[DiffRow], bool]:
    """Rows pairing parent and candidate lines; (rows, truncated)."""
    old_lines, new_lines = source_lines(old), source_lines(new)
    old_html, new_html = highlighted_lines(old), highlighted_lines(new)
    blank = mark_safe("")
    rows: list[DiffRow] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                rows.append(
                    DiffRow(
                        i1 + k + 1, old_html[i1 + k], j1 + k + 1, new_html[j1 + k], LineKind.SAME
                    )
                )
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            left = i1 + k if i1 + k < i2 else None
            right = j1 + k if j1 + k < j2 else None
            if left is not None and right is not None:
                kind = LineKind.CHANGED
            elif left is not None:
                kind = LineKind.REMOVED
            else:
                kind = LineKind.ADDED
            rows.append(
                DiffRow(
                    None if left is None else left + 1,
                    blank if left is None else old_html[left],
                    None if right is None else right + 1,
                    blank if right is None else new_html[right],
                    kind,
                )
            )
        if len(rows) > MAX_DIFF_LINES:
            break
    return rows[:MAX_DIFF_LINES], len(rows) > MAX_DIFF_LINES


def plain(text: str) -> SafeString:
    """Escaped text for places that want HTML (logs are shown as-is, never interpreted)."""
    return escape(text)


def pygments_css() -> str:
    return HtmlFormatter(style="default").get_style_defs(".code")
