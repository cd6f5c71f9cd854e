"""A minimal server-sent-events reader: lines in, (event, id, data) records out."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    event: str = "message"
    id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


def parse_events(lines: Iterable[bytes | str]) -> Iterator[Event]:
    """Yield one Event per blank-line-terminated block; comments (":...") are keep-alives."""
    current, data_lines = Event(), []
    for raw in lines:
        line = (raw.decode() if isinstance(raw, bytes) else raw).rstrip("\r\n")
        if not line:
            if data_lines:
                current.data = json.loads("\n".join(data_lines))
                yield current
            current, data_lines = Event(), []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            current.event = value
        elif name == "id":
            current.id = value
        elif name == "data":
            data_lines.append(value)
