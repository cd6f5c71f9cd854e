"""Shape sets: CSV, JSON or YAML text -> validated kernels.Problem list, or every error at once.

Accepted forms (columns/keys: op, shape, dtype, optional layout):

    op,shape,dtype,layout          [{"op": "matmul", "shape": "4096x4096x4096", "dtype": "bf16"}]
    matmul,4096x4096x4096,bf16,    problems:
                                     - {op: rmsnorm, shape: [8192, 4096], dtype: fp16}

`shape` is sizes joined by "x" or a list of integers; an empty layout means the op's first one
(NN for matmul). Validation is the op's own
(kernels.parse_problem), so the form shows exactly what the kernel layer would reject.
"""

from __future__ import annotations

import csv
import enum
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

import kernels

FIELDS = ("op", "shape", "dtype", "layout")
REQUIRED = ("op", "shape", "dtype")
MAX_ERRORS_SHOWN = 10
EXAMPLE = "op,shape,dtype\nmatmul,4096x4096x4096,bf16"
NOT_A_SHAPE_SET = (
    "This is not a shape set KernelForge can read. Write one problem per row as CSV with a"
    " header (op, shape and dtype separated by commas), or as JSON or YAML, e.g. "
    + EXAMPLE.replace("\n", " then ")
    + "."
)


class ShapeFormat(enum.StrEnum):
    AUTO = "auto"
    CSV = "csv"
    JSON = "json"
    YAML = "yaml"

    @classmethod
    def from_filename(cls, name: str) -> ShapeFormat:
        suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        return {"csv": cls.CSV, "json": cls.JSON, "yaml": cls.YAML, "yml": cls.YAML}.get(
            suffix, cls.AUTO
        )


@dataclass
class ShapeSetError(ValueError):
    """Everything wrong with a shape set, each message ready to show on the form."""

    messages: list[str]

    def __str__(self) -> str:
        return "; ".join(self.messages)


def parse_shape_set(
    text: str, fmt: ShapeFormat = ShapeFormat.AUTO, *, max_problems: int
) -> list[kernels.Problem]:
    text = text.strip().lstrip("\ufeff")
    if not text:
        raise ShapeSetError(
            ["The shape set is empty: give at least one row with op, shape and dtype."]
        )
    if fmt is ShapeFormat.AUTO:
        sniffed = _sniff(text)
        if sniffed is None:
            raise ShapeSetError([NOT_A_SHAPE_SET])
        fmt = sniffed
    rows = _read_rows(text, fmt)
    if not rows:
        raise ShapeSetError(
            ["The shape set has no rows: give at least one row with op, shape and dtype."]
        )
    if len(rows) > max_problems:
        raise ShapeSetError(
            [f"The shape set has {len(rows)} rows; the limit is {max_problems} per job."]
        )

    problems: list[kernels.Problem] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for number, row in rows:
        try:
            problem = _problem_from_row(row)
        except kernels.ProblemError as error:
            errors.append(f"Row {number}: {error}")
            continue
        if problem.key in seen:
            errors.append(f"Row {number}: repeats row {seen[problem.key]} ({problem.key}).")
            continue
        seen[problem.key] = number
        problems.append(problem)
    if errors:
        more = len(errors) - MAX_ERRORS_SHOWN
        shown = errors[:MAX_ERRORS_SHOWN] + ([f"… and {more} more errors."] if more > 0 else [])
        raise ShapeSetError(shown)
    return problems


def _sniff(text: str) -> ShapeFormat | None:
    """The format the text is written in; None for free text (no format's punctuation)."""
    if text[0] in "[{":
        return ShapeFormat.JSON
    first = text.splitlines()[0].strip()
    if first.startswith(("-", "problems:")) or ":" in first:
        return ShapeFormat.YAML
    if "," in first:
        return ShapeFormat.CSV
    return None


def _read_rows(text: str, fmt: ShapeFormat) -> list[tuple[int, Mapping[str, Any]]]:
    if fmt is ShapeFormat.CSV:
        return _read_csv(text)
    if fmt is ShapeFormat.JSON:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ShapeSetError(
                [
                    f"This is not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}."
                ]
            ) from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            where = getattr(error, "problem_mark", None)
            at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
            raise ShapeSetError(
                [f"This is not valid YAML{at}: {getattr(error, 'problem', None) or error}."]
            ) from None
    return _rows_from_data(data, fmt)


def _read_csv(text: str) -> list[tuple[int, Mapping[str, Any]]]:
    reader = csv.reader(io.StringIO(text))
    lines: list[tuple[int, list[str]]] = []
    start = 1  # a row's number is the line it starts on (a quoted cell may run on)
    try:
        for row in reader:
            lines.append((start, row))
            start = reader.line_num + 1
    except csv.Error as error:
        raise ShapeSetError([f"This is not valid CSV: {error}."]) from None
    for number, row in lines:
        if any("\n" in cell for cell in row):
            raise ShapeSetError(
                [f'Row {number}: a quote (") opens in this row and is not closed on its line.']
            )
    lines = [(n, row) for n, row in lines if any(cell.strip() for cell in row)]
    if not lines:
        return []
    header = [cell.strip().lower() for cell in lines[0][1]]
    missing = [name for name in REQUIRED if name not in header]
    unknown = [name for name in header if name not in FIELDS]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if unknown:
            problems.append(f"unknown {', '.join(repr(u) for u in unknown)}")
        raise ShapeSetError(
            [
                f"The CSV header must name the columns op, shape, dtype (and optionally layout): {'; '.join(problems)}."
            ]
        )
    rows = []
    for number, cells in lines[1:]:
        if len(cells) > len(header):
            raise ShapeSetError(
                [f"Row {number}: {len(cells)} cells, but the header has {len(header)} columns."]
            )
        rows.append((number, dict(zip(header, (c.strip() for c in cells), strict=False))))
    return rows


def _rows_from_data(data: Any, fmt: ShapeFormat) -> list[tuple[int, Mapping[str, Any]]]:
    if isinstance(data, Mapping) and "problems" in data:
        data = data["problems"]
    if isinstance(data, Mapping) and "op" in data:
        data = [data]
    if not isinstance(data, list):
        raise ShapeSetError(
            [
                f"The {fmt.value.upper()} must be a list of problems (each with op, shape, dtype) or a mapping with a 'problems' list."
            ]
        )
    rows = []
    for number, item in enumerate(data, start=1):
        if not isinstance(item, Mapping):
            raise ShapeSetError(
                [
                    f"Row {number}: expected a mapping with op, shape, dtype, got {type(item).__name__}."
                ]
            )
        rows.append((number, item))
    return rows


def _problem_from_row(row: Mapping[str, Any]) -> kernels.Problem:
    missing = [name for name in REQUIRED if row.get(name) in (None, "")]
    if missing:
        raise kernels.ProblemError(f"missing {', '.join(missing)}")
    unknown = sorted(set(map(str, row)) - set(FIELDS))
    if unknown:
        raise kernels.ProblemError(
            f"unknown field(s) {', '.join(unknown)}; use {', '.join(FIELDS)}"
        )
    for name in ("op", "dtype", "layout"):
        if row.get(name) is not None and not isinstance(row[name], str):
            raise kernels.ProblemError(f"{name} must be text, got {row[name]!r}")
    layout = (row.get("layout") or "").strip()
    if not layout:
        # Ops with one layout use ""; for the others (matmul: NN, NT, ...) the first is the default.
        layouts = kernels.get_op(row["op"].strip()).layouts
        layout = "" if "" in layouts else layouts[0]
    return kernels.parse_problem(row["op"], _shape(row["shape"]), row["dtype"], layout)


def _shape(value: Any) -> str | list[int]:
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        sizes = list(value)
        if all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
            return sizes
    raise kernels.ProblemError(
        f"shape {value!r} must be sizes like 4096x4096 or a list of integers"
    )
