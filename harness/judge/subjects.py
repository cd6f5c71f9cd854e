"""What the judge calls when it calls "the candidate": three kinds behind one interface.

TrustedRender   a render of one of our own families (re-rendered here from family and
                parameters, so only our code is imported): its run() is called in-process,
                as any trusted kernel would be (harness.benchmark).
ReplayedPlans   an untrusted candidate on a GPU: the plans its sandbox recorded, launched by
                this process's own code on this process's buffers (harness/replay.py).
RemoteExecutor  an untrusted candidate on the CPU: its kernels are interpreted Python, which
                never runs here; a sandboxed executor (harness/child/serve.py) replays the
                plans on buffers this process allocated in a shared arena and says "done".

In every case the buffers are the judge's (inputs it made, outputs it poisoned and guarded),
the clock is the judge's, and what is compared is what the judge reads back itself.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Sequence

import torch

from harness import arena as arena_mod
from harness import plan as P
from harness.replay import Bound, Launcher, allocate
from kernels.problem import Problem


class CandidateFailure(Exception):
    """The candidate's call failed: kind is "raised", "compile", "cuda_fault" or "plan"."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class Subject:
    def __init__(self, device: str) -> None:
        self.device = device
        self.kernels: set[str] = set()  # kernels and aten ops it used (vendor-library audit)

    def empty_strided(
        self, shape: Sequence[int], strides: Sequence[int], dtype: torch.dtype
    ) -> torch.Tensor:
        return torch.empty_strided(tuple(shape), tuple(strides), dtype=dtype, device=self.device)

    def bind(
        self, problem: Problem, inputs: Sequence[torch.Tensor], out: torch.Tensor, *, prepare: bool
    ) -> None:
        raise NotImplementedError

    def call(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class TrustedRender(Subject):
    def __init__(self, module, device: str, *, audit: bool) -> None:
        super().__init__(device)
        self.module = module
        self.audit = audit
        self._args: tuple = ()

    def bind(self, problem, inputs, out, *, prepare):
        if prepare and callable(getattr(self.module, "prepare", None)):
            self.module.prepare(*[t.clone() for t in inputs])
        self._args = (tuple(inputs), out)

    def call(self):
        inputs, out = self._args
        if not self.audit:
            self.module.run(*inputs, out=out)
            return
        self.audit = False  # the first call runs under the profiler: which kernels ran?
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.device == "cuda":
            activities.append(ProfilerActivity.CUDA)
        with profile(activities=activities) as prof:
            self.module.run(*inputs, out=out)
            if self.device == "cuda":
                torch.cuda.synchronize()
        self.kernels |= {evt.name for evt in prof.events()}


def plan_kernels(plans: Sequence[P.Plan]) -> set[str]:
    """Kernel names and aten ops ("aten::mm") of the plans: what the candidate runs."""
    found: set[str] = set()
    for p in plans:
        found |= set(p.kernel_names()) | {f"aten::{op.split('.')[0]}" for op in p.aten_ops()}
    return found


class ReplayedPlans(Subject):
    def __init__(self, plans: Sequence[P.Plan], launcher: Launcher) -> None:
        super().__init__("cuda")
        self.plans = {Problem.from_dict(p.problem).key: p for p in plans}
        self.launcher = launcher
        self._workspaces: dict[str, list[torch.Tensor]] = {}
        self._bound: Bound | None = None
        self.kernels |= plan_kernels(plans)

    def bind(self, problem, inputs, out, *, prepare):
        plan = self.plans.get(problem.key)
        if plan is None:
            raise CandidateFailure("plan", f"no plan was recorded for {problem.key}")
        ws = self._workspaces.get(problem.key)
        if ws is None:
            ws = self._workspaces[problem.key] = allocate(plan, out.device)
        try:
            self._bound = Bound(
                plan, self.launcher, inputs, out, guard_bytes=P.guard_bytes(out), workspaces=ws
            )
        except P.PlanError as exc:
            raise CandidateFailure("plan", str(exc)) from exc
        if prepare:
            self._bound.prepare()

    def call(self):
        assert self._bound is not None, "bind() first"
        self._bound.call()


class RemoteExecutor(Subject):
    """Talks to harness/child/serve.py over a socket; every buffer lives in the arena."""

    def __init__(self, plans: Sequence[P.Plan], arena_fd: int, socket_fd: int) -> None:
        super().__init__("cpu")
        self.arena = arena_mod.Arena(arena_fd)
        self.sock = socket.socket(fileno=socket_fd)
        self.reader = self.sock.makefile("rb")
        self._request: dict = {}
        # From the plans the judge decoded, not from the executor (it is the candidate's
        # process): what the candidate was recorded to run.
        self.kernels |= plan_kernels(plans)
        ready = self._receive()  # the executor imported the candidate (or says why not)
        if not ready.get("ok"):
            raise CandidateFailure(
                str(ready.get("kind", "compile")), str(ready.get("detail", ""))[:6000]
            )

    def empty_strided(self, shape, strides, dtype):
        tensor, _ = self.arena.empty_strided(tuple(shape), tuple(strides), dtype)
        return tensor

    def bind(self, problem, inputs, out, *, prepare):
        self._request = {
            "op": "call",
            "key": problem.key,
            "inputs": [arena_mod.describe(self.arena, t) for t in inputs],
            "out": arena_mod.describe(self.arena, out),
            "guard": P.guard_bytes(out),
        }
        if prepare:
            self._exchange({**self._request, "op": "prepare"})

    def call(self):
        self._exchange(self._request)

    def close(self):
        with contextlib.suppress(OSError):
            self.sock.sendall(b'{"op": "exit"}\n')
        self.reader.close()
        self.sock.close()

    def _exchange(self, request: dict) -> None:
        try:
            self.sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            raise CandidateFailure("crash", f"the executor is gone: {exc}") from exc
        reply = self._receive()
        if not reply.get("ok"):
            raise CandidateFailure(
                str(reply.get("kind", "raised")), str(reply.get("detail", ""))[:6000]
            )

    def _receive(self) -> dict:
        line = self.reader.readline(1 << 20)
        if not line:
            raise CandidateFailure("crash", "the executor died (see its output)")
        try:
            reply = json.loads(line)
        except ValueError:
            raise CandidateFailure("crash", "the executor sent garbage") from None
        if not isinstance(reply, dict):
            raise CandidateFailure("crash", "the executor sent garbage")
        return reply
