"""Issue 24's standing over every recorded both_ways run on one kind of device: a session's
device time covers a few shapes of the unseen set, so its measurement grows run by run.

    python -m benchmarks.both_ways_standing benchmarks/results/both_ways_h200_*.json \\
        [--set unseen] [--out F]

Per shape of the set, its latest recorded result (runs ordered by their date; a rerun
replaces an earlier one, and says how many there were); the shapes not measured yet; and
both_ways.summary over the measured ones: what the issue's "Done when" lines read. Runs on
another device than the first file's are refused: the bars are per machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import results_record
from benchmarks.both_ways import summary
from kernels.shapes import SET_NAMES, problem_set


def standing(records: list[dict[str, Any]], set_name: str = "unseen") -> dict[str, Any]:
    """records: both_ways.json files as read (results_record entries)."""
    devices = {r["versions"]["device"] for r in records}
    if len(devices) > 1:
        raise ValueError(f"runs from more than one device: {', '.join(sorted(devices))}")
    latest: dict[str, dict[str, Any]] = {}
    runs: dict[str, int] = {}
    for record in sorted(records, key=lambda r: r["date"]):
        for row in record["results"]:
            latest[row["name"]] = row | {"date": record["date"]}
            runs[row["name"]] = runs.get(row["name"], 0) + 1
    names = [e.name for e in problem_set(set_name)]
    rows = [latest[n] | {"runs": runs[n]} for n in names if n in latest]
    versions = {json.dumps(r["versions"], sort_keys=True) for r in records}
    return {
        "device": devices.pop() if devices else None,
        "versions": [json.loads(v) for v in sorted(versions)],  # each run's machine, as recorded
        "set": set_name,
        "measured": [r["name"] for r in rows],
        "not_measured": [n for n in names if n not in latest],
        "not_in_set": sorted(set(latest) - set(names)),
        "rows": rows,
        "summary": summary(rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="both_ways.json files (recorded runs)")
    parser.add_argument("--set", default="unseen", choices=SET_NAMES)
    parser.add_argument("--out", default=None, help="write the standing JSON here")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    records = [json.loads(Path(f).read_text()) for f in args.files]
    try:
        result = standing(records, args.set)
    except ValueError as exc:
        print(f"both_ways_standing: {exc}", file=sys.stderr)
        return 2
    made = results_record.made("benchmarks.both_ways_standing", argv)
    made["files"] = [Path(f).name for f in args.files]
    results_record.write(made | result, args.out)
    s = result["summary"]
    print(
        f"{result['device']}: {len(result['measured'])} of "
        f"{len(result['measured']) + len(result['not_measured'])} shapes measured; the agent "
        f"reaches the brute force on {s['agent_reaches_brute_force']} of {s['compared']}; "
        f"agent exported geomean {s['agent']['exported_geomean']}, "
        f"{s['agent']['at_least_1_05']} at 1.05x or more, lowest {s['agent']['lowest']}; "
        f"verification median {s['agent_verify_s_median']} s"
    )
    print("not measured yet:", " ".join(result["not_measured"]) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
