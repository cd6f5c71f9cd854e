"""Budgets on the command line: "30m", "2h", "90s", "1h30m", or a bare number of minutes."""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_SECONDS = {"h": 3600, "m": 60, "s": 1}


def parse_minutes(text: str) -> int:
    """Whole GPU minutes (rounded up, at least 1), or ValueError with a readable message."""
    text = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text) * 60
    elif text and re.fullmatch(r"(\d+(\.\d+)?[hms])+", text):
        seconds = sum(float(n) * _SECONDS[unit] for n, unit in _PART.findall(text))
    else:
        raise ValueError(f"budget {text!r}: use e.g. 30m, 2h, 1h30m, 90s or a number of minutes")
    if seconds <= 0:
        raise ValueError("the budget must be more than zero")
    return max(1, math.ceil(seconds / 60))
