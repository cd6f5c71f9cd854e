"""Per-shape speedup ratios of two sides of `benchmarks/trust_boundary_ab.sh`, over repeats.

    python -m benchmarks.ab_ratios /tmp/kf-ab --out benchmarks/results/x.json

Reads `<set>_<side>[_<repeat>].json` (python -m benchmarks reports) from the folder, and per
shape the synced speedup vs torch (offline) of every repeat on each side; reports the medians,
their relative difference (after vs before) and the plain (GPU-only) candidate medians, which
the tail rule does not touch. A shape is "within" when the medians differ by at most --tol.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

NAME = re.compile(r"(?P<set>[a-z]+)_(?P<side>after|before)(?:_(?P<rep>\d+))?\.json$")
SUB_20_US = 20.0  # below this, run-to-run spread is large (read those ratios with care)


@dataclass
class ShapeRatios:
    set: str
    name: str
    before: list[float] = field(default_factory=list)
    after: list[float] = field(default_factory=list)
    plain_us_before: list[float] = field(default_factory=list)
    plain_us_after: list[float] = field(default_factory=list)
    torch_us: float | None = None
    diff_pct: float | None = None  # median after / median before - 1, in %
    within: bool | None = None


def _read(report: dict) -> dict[str, tuple[float, float, float]]:
    """name -> (synced speedup vs torch, plain candidate us, torch us) for timed shapes."""
    out = {}
    for o in report["results"]:
        speedup = (o.get("speedups") or {}).get("offline", {}).get("torch")
        timing = (o.get("timings") or {}).get("offline", {})
        if speedup and timing:
            plain = timing["candidate"]["plain_median_us"]
            out[o["name"]] = (speedup["synced"], plain, timing["torch"]["median_us"])
    return out


def compare(folder: Path, tol_pct: float) -> list[ShapeRatios]:
    shapes: dict[tuple[str, str], ShapeRatios] = {}
    for path in sorted(folder.glob("*.json")):
        m = NAME.search(path.name)
        if not m:
            continue
        for name, (ratio, plain, torch_us) in _read(json.loads(path.read_text())).items():
            row = shapes.setdefault((m["set"], name), ShapeRatios(m["set"], name))
            getattr(row, m["side"]).append(ratio)
            getattr(row, f"plain_us_{m['side']}").append(plain)
            row.torch_us = torch_us
    for row in shapes.values():
        if row.before and row.after:
            a, b = statistics.median(row.after), statistics.median(row.before)
            row.diff_pct = round((a / b - 1.0) * 100.0, 2)
            row.within = abs(row.diff_pct) <= tol_pct
    return list(shapes.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab_ratios")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--tol", type=float, default=3.0, help="percent")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    rows = compare(args.folder, args.tol)
    compared = [r for r in rows if r.within is not None]
    for r in rows:
        short = " (<20 us)" if r.torch_us and r.torch_us < SUB_20_US else ""
        print(f"{r.set:7} {r.name:30} before {r.before} after {r.after} diff {r.diff_pct}%{short}")
    print(f"within {args.tol}%: {sum(bool(r.within) for r in compared)} of {len(compared)}")
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
