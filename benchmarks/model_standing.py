"""Issue 25's standing over the recorded model jobs of one kind of device: a session's device
time covers two or three model jobs, so the issue's "Done when" table fills in run by run.

    python -m benchmarks.model_standing benchmarks/results/model_*_h100*.json [--out F]

Per example model with a bar, its latest recorded job (by date; replays of an earlier job's
kernels are not jobs and are left out, as are files that are not model jobs): what ships
against the best baseline and whether that meets the model's bar. What ships is the download
package: where the check also took a change to the model's code (`rewrites`), the kernels
alone as the package runs them (`package`), not the number with the change. Runs on another
device than the first job's are refused: the bars are per machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import results_record

# Issue 25's "Done when" lines: each example model's end-to-end speedup over its best baseline.
BARS = {
    "llama_decode": 1.15,
    "llama_block": 1.05,
    "qwen2_block": 1.05,
    "gptj_block": 1.05,
    "vit_block": 1.05,
}
_MODEL = re.compile(r"examples/models/(\w+)\.py")


@dataclass(frozen=True)
class ModelRow:
    model: str
    bar: float
    file: str
    date: str
    shipped: bool  # the package was verified faster than the best baseline (else: unchanged)
    speedup: float | None  # what ships: the package's end to end over the best baseline
    ci95: list[float] | None
    best_baseline: str | None
    best_ours: str | None
    with_code_change: float | None  # with the `rewrites` the user would make (None: none)
    kernels: list[dict[str, Any]]  # kept: key, family, speedup over the op's torch baseline
    meets_bar: bool
    check_failed: str | None = None  # why the end-to-end check gave no result (its failure)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_of(record: dict[str, Any]) -> str | None:
    """The example model a recorded job ran, or None for a replay or another kind of file (a
    library report; the first sessions' records, before results_record, with no result)."""
    if not isinstance(record.get("versions"), dict) or "result" not in record:
        return None
    command = record.get("command", "")
    if "benchmarks.model_job" not in command and "agents.model_job" not in command:
        return None
    if "--replay" in command:
        return None
    found = _MODEL.search(command)
    return found.group(1) if found else None


def row(model: str, file: str, record: dict[str, Any]) -> ModelRow:
    e2e = record["result"].get("end_to_end") or {}
    rewrites = e2e.get("rewrites") or []
    package = e2e.get("package") or {}
    if rewrites:  # a record from before the package's own run has no `package`: not timed
        speedup, ci = package.get("speedup"), package.get("speedup_ci")
        shipped = bool(e2e.get("package_faster", e2e.get("faster")))
    else:
        speedup, ci = e2e.get("speedup"), e2e.get("speedup_ci")
        shipped = bool(e2e.get("faster"))
    kernels = [
        {k: p.get(k) for k in ("key", "family", "speedup")}
        for p in record["result"].get("problems", [])
        if p.get("kept")
    ]
    bar = BARS[model]
    return ModelRow(
        model=model,
        bar=bar,
        file=file,
        date=record["date"],
        shipped=shipped,
        speedup=speedup,
        ci95=ci,
        best_baseline=e2e.get("best_baseline"),
        best_ours=(package.get("way") if rewrites else e2e.get("best_ours")),
        with_code_change=e2e.get("speedup") if rewrites else None,
        kernels=kernels,
        meets_bar=bool(shipped and speedup is not None and speedup >= bar),
        check_failed=None if e2e.get("ok") else (e2e.get("failure") or "failed"),
    )


def standing(files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """files: file name -> a recorded model job (results_record entry) as read."""
    jobs = {f: r for f, r in files.items() if model_of(r) in BARS}
    devices = {r["versions"]["device"] for r in jobs.values()}
    if len(devices) > 1:
        raise ValueError(f"jobs from more than one device: {', '.join(sorted(devices))}")
    latest: dict[str, ModelRow] = {}
    for file, record in sorted(jobs.items(), key=lambda item: item[1]["date"]):
        model = model_of(record)
        assert model is not None
        latest[model] = row(model, file, record)
    rows = [latest[m] for m in BARS if m in latest]
    return {
        "device": devices.pop() if devices else None,
        "rows": [r.to_dict() for r in rows],
        "not_measured": [m for m in BARS if m not in latest],
        "left_out": sorted(set(files) - set(jobs)),
        "meet_bar": sum(r.meets_bar for r in rows),
        # A shipped package slower than its best baseline; `shipped` needs the interval above 1,
        # so this stays 0 unless that rule breaks.
        "shipped_losses": sum(r.shipped and (r.speedup or 0.0) < 1.0 for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="recorded model jobs (benchmarks/results/)")
    parser.add_argument("--out", default=None, help="write the standing JSON here")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    files = {Path(f).name: json.loads(Path(f).read_text()) for f in args.files}
    try:
        result = standing(files)
    except ValueError as exc:
        print(f"model_standing: {exc}", file=sys.stderr)
        return 2
    results_record.write(results_record.made("benchmarks.model_standing", argv) | result, args.out)
    for r in result["rows"]:
        if r["check_failed"]:
            shown = f"its end-to-end check failed ({r['check_failed']})"
        elif r["speedup"] is None:
            shown = "the kernels alone not timed"
        else:
            shown = f"{r['speedup']:.3f}x"
        if r["with_code_change"] is not None:
            shown += f", {r['with_code_change']:.3f}x with the change to the model's code"
        verdict = "meets" if r["meets_bar"] else "below"
        what = "shipped" if r["shipped"] else "unchanged"
        print(f"{r['model']}: {shown} ({what}), {verdict} its {r['bar']:.2f}x bar ({r['file']})")
    print(
        f"{result['device']}: {result['meet_bar']} of {len(BARS)} models meet their bar; "
        f"not measured: {' '.join(result['not_measured']) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
