"""A LangGraph checkpointer from a database URL, so a redelivered task resumes where it stopped.

postgres://... or postgresql://... -> PostgresSaver (the project database in production);
sqlite:///path, a plain file path, or sqlite:///:memory: -> SqliteSaver (the CLI, one box);
None -> an in-memory saver (one process; nothing survives it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver


@contextmanager
def open_checkpointer(url: str | None) -> Iterator[BaseCheckpointSaver]:
    if not url:
        yield InMemorySaver()
        return
    if url.startswith(("postgres://", "postgresql://")):
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()  # creates or migrates its tables; idempotent
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    if url.startswith("sqlite://") and not url.startswith("sqlite:///"):
        raise ValueError(
            f"checkpoint URL {url!r}: write sqlite:///relative/path or sqlite:////abs/path"
        )
    with SqliteSaver.from_conn_string(path) as saver:
        yield saver
