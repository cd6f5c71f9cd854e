"""A candidate's output and tracebacks as its user is shown them: the candidate's own lines,
without our profiler's log lines or this server's paths.

The sandbox child imports the candidate from `<scratch>/sandbox/kf_candidate.py` through harness
code, and every phase starts torch's profiler once (candidate_phases._prime), whose C++ side logs
`USDT:... profiler_start` lines to the captured output. A user needs neither.
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from pathlib import Path

# torch's profiler (kineto) logs these at start and stop; KINETO_LOG_LEVEL can only silence
# them together with its errors, so the lines are dropped here instead.
_PROFILER_LOG = re.compile(
    r"^(?:USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \w+\.cpp:\d+\] .*(?:\n|$)",
    re.MULTILINE,
)
_ROOT = str(Path(__file__).resolve().parents[1]) + "/"  # the checkout the server runs from
_STDLIB = sysconfig.get_paths()["stdlib"] + "/"
_PACKAGES = re.compile(r"/[^\s\"':]*/(?:site|dist)-packages/")
_SCRATCH = re.compile(r"/[^\s\"':]*/kf-[\w.-]+/(?:sandbox/)?")  # evaluate()'s mkdtemp prefixes


def output(text: str, workdir: str | Path | None = None) -> str:
    """Captured stdout/stderr of an untrusted phase, for the iteration page."""
    return paths(_PROFILER_LOG.sub("", text), workdir)


def paths(text: str, workdir: str | Path | None = None) -> str:
    """Absolute server paths made relative: `kf_candidate.py`, `triton/...`, `harness/...`."""
    if workdir:
        text = text.replace(str(workdir).rstrip("/") + "/", "")
    # Packages and the checkout first: a checkout in a folder named kf-* (a CI clone) would
    # otherwise read as scratch and leave ".venv/lib/..." behind.
    text = _PACKAGES.sub("", text)
    text = text.replace(_ROOT, "").replace(_STDLIB, "")
    return _SCRATCH.sub("", text)


def candidate_traceback(exc: BaseException, workdir: str | Path, *, limit: int) -> str:
    """The traceback from the candidate's first frame on (the harness and importlib frames
    that led to it say nothing to a user), with paths as `paths()` writes them."""
    report = traceback.TracebackException.from_exception(exc)
    folder = Path(workdir)
    frames = list(report.stack)
    first = next((i for i, f in enumerate(frames) if Path(f.filename).parent == folder), None)
    if first is None and isinstance(exc, SyntaxError):
        first = len(frames)  # raised while compiling the file: the message says where
    report.stack = traceback.StackSummary.from_list(frames[first or 0 :])
    return paths("".join(report.format()), workdir)[-limit:]
