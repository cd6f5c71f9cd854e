"""Profiler trace -> one record per GPU kernel (or per CPU op on a CPU profile).

Pure logic over the Chrome trace that torch.profiler exports (`export_chrome_trace`), so it
runs the same on a recorded fixture as on a live profile. A GPU kernel is tied to the CPU op
stack that launched it: its `correlation` id names the runtime call (cudaLaunchKernel...), and
the CPU ops (and `record_function` annotations, e.g. the model's module names) whose time span
holds that call, on the same thread, are its stack, outermost first. A CPU profile has no
kernels; there every aten op's self time (its time minus its children's) is one record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STEP_PREFIX = "kf::step"  # annotation around each profiled forward call
MODULE_PREFIX = "kf.module::"  # annotation around each module's forward: kf.module::<path>
_CPU_CATS = ("cpu_op", "user_annotation")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime")
_DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


@dataclass(frozen=True)
class Frame:
    """One CPU op or annotation on the stack that launched a kernel."""

    name: str  # "aten::addmm", "kf.module::mlp.up_proj"
    input_dims: tuple = ()  # as recorded with record_shapes=True, e.g. ((4096, 1024), (1024,))
    input_types: tuple = ()  # e.g. ("c10::BFloat16", "c10::BFloat16")


@dataclass(frozen=True)
class KernelRecord:
    name: str  # the kernel's name, or the aten op's on a CPU profile
    duration_us: float
    kind: str  # "kernel", "memcpy", "memset" or "cpu_op"
    stack: tuple[Frame, ...] = field(default=())  # outermost first; the launching op is last


@dataclass
class _Span:
    name: str
    cat: str
    tid: object
    ts: float
    end: float
    args: dict
    parent: _Span | None = None
    child_time: float = 0.0


def records_from_trace(trace: dict) -> tuple[list[KernelRecord], int]:
    """(records, number of profiled steps). Device kernels when there are any, else CPU ops."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    spans = _nest(e for e in events if e.get("cat") in _CPU_CATS + _RUNTIME_CATS)
    steps = sum(1 for s in spans if s.cat == "user_annotation" and s.name.startswith(STEP_PREFIX))
    steps = max(steps, 1)
    by_corr = {
        s.args["correlation"]: s
        for s in spans
        if s.cat in _RUNTIME_CATS and "correlation" in s.args
    }
    device = [e for e in events if e.get("cat") in _DEVICE_CATS]
    if device:
        records = []
        for e in device:
            launch = by_corr.get(e.get("args", {}).get("correlation"))
            stack = _stack(launch.parent) if launch else ()
            records.append(
                KernelRecord(
                    e.get("name", "?"), float(e.get("dur", 0.0)), _DEVICE_CATS[e["cat"]], stack
                )
            )
        return records, steps
    records = []
    for s in spans:
        if s.cat != "cpu_op":
            continue
        self_us = (s.end - s.ts) - s.child_time
        if self_us > 0:
            records.append(KernelRecord(s.name, self_us, "cpu_op", _stack(s)))
    return records, steps


def _nest(events) -> list[_Span]:
    """Spans with parent links: per thread, the innermost earlier span that still holds it."""
    spans = [
        _Span(
            name=e.get("name", "?"),
            cat=e["cat"],
            tid=(e.get("pid"), e.get("tid")),
            ts=float(e.get("ts", 0.0)),
            end=float(e.get("ts", 0.0)) + float(e.get("dur", 0.0)),
            args=e.get("args") or {},
        )
        for e in events
    ]
    spans.sort(key=lambda s: (s.tid, s.ts, -s.end))
    open_: dict[object, list[_Span]] = {}
    for s in spans:
        stack = open_.setdefault(s.tid, [])
        # Sorted by start, longest first: the top either holds s or ended (or overlaps: sibling).
        while stack and stack[-1].end < s.end:
            stack.pop()
        if stack:
            s.parent = stack[-1]
            if s.cat == "cpu_op":
                _charge_nearest_op(s)
        stack.append(s)
    return spans


def _charge_nearest_op(s: _Span) -> None:
    """An op's time is not its nearest enclosing op's self time (annotations in between)."""
    p = s.parent
    while p is not None and p.cat != "cpu_op":
        p = p.parent
    if p is not None:
        p.child_time += s.end - s.ts


def _stack(span: _Span | None) -> tuple[Frame, ...]:
    frames = []
    while span is not None:
        if span.cat in _CPU_CATS:
            frames.append(
                Frame(
                    span.name,
                    _tuple(span.args.get("Input Dims", ())),
                    tuple(str(t) for t in span.args.get("Input type", ())),
                )
            )
        span = span.parent
    return tuple(reversed(frames))


def _tuple(value) -> tuple:
    if isinstance(value, list):
        return tuple(_tuple(v) for v in value)
    return value


def record_to_dict(record: KernelRecord) -> dict:
    return {
        "name": record.name,
        "duration_us": record.duration_us,
        "kind": record.kind,
        "stack": [[f.name, _lists(f.input_dims), list(f.input_types)] for f in record.stack],
    }


def record_from_dict(data: dict) -> KernelRecord:
    return KernelRecord(
        name=data["name"],
        duration_us=float(data["duration_us"]),
        kind=data["kind"],
        stack=tuple(Frame(n, _tuple(d), tuple(t)) for n, d, t in data.get("stack", [])),
    )


def _lists(value):
    return [_lists(v) for v in value] if isinstance(value, tuple) else value


__all__ = ["Frame", "KernelRecord", "record_from_dict", "record_to_dict", "records_from_trace"]
