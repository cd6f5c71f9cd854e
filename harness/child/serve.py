"""Phase `candidate_serve` (CPU only), in the candidate's sandbox: replay its plans on request.

Under Triton's CPU interpreter a kernel is the candidate's own Python, which the judge never
runs. So this sandboxed process imports the candidate and, for each request from the judge
(over a socket), replays the recorded plan on views of the judge's shared arena
(harness/arena.py): "prepare" or "call" with where the inputs and the output are. It answers
"done" or what went wrong, and nothing else: the judge keeps the clock, reads the buffers and
decides. It holds no key, no reference and no baseline.
"""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

from harness import arena as arena_mod
from harness import plan as P
from harness.compiling import is_compile_error
from harness.redact import candidate_traceback
from harness.replay import Bound, Launcher, allocate


class InterpretedLauncher(Launcher):
    def __init__(self, module, blobs: dict[str, bytes]) -> None:
        self.module = module
        self.blobs = blobs

    def pointers(self) -> bool:
        return False  # the interpreter takes tensors

    def blob(self, sha: str) -> bytes:
        return self.blobs[sha]

    def triton(self, plan: P.Plan, step: P.Launch, args: tuple, kwargs: dict) -> None:
        from triton.runtime.interpreter import InterpretedFunction

        kernel = plan.kernels[step.kernel]
        fn = getattr(self.module, kernel.attr, None) if isinstance(kernel, P.TritonKernel) else None
        if not isinstance(fn, InterpretedFunction):
            raise P.PlanError(f"{getattr(kernel, 'attr', '?')} is not a @triton.jit function")
        fn[step.grid](*args, **kwargs)

    def cuda(self, plan: P.Plan, step: P.CudaLaunch, args: tuple) -> None:
        raise P.PlanError("CUDA kernels need a GPU")


def candidate_serve(job: dict) -> dict[str, Any]:
    from harness import runtime

    sock = socket.socket(fileno=job["socket_fd"])
    reader = sock.makefile("rb")

    def reply(**message: Any) -> None:
        sock.sendall(json.dumps(message).encode() + b"\n")

    try:
        module = runtime.load_candidate(job["source"], job["workdir"])
    except BaseException as exc:  # noqa: BLE001  (anything a module import can raise)
        reply(ok=False, kind="compile", detail=candidate_traceback(exc, job["workdir"], limit=6000))
        return {"served": 0}
    arena = arena_mod.Arena(job["arena_fd"])
    blobs = {sha: base64.b64decode(data) for sha, data in job.get("blobs", {}).items()}
    launcher = InterpretedLauncher(module, blobs)
    plans = {}
    for data in job["plans"]:
        plan = P.Plan.from_json(data)
        key = _key(plan.problem)
        plans[key] = plan
    workspaces: dict[str, list] = {}
    reply(ok=True)
    served = 0
    while True:
        line = reader.readline(1 << 20)
        if not line:
            break
        request = json.loads(line)
        if request.get("op") == "exit":
            break
        try:
            plan = plans[request["key"]]
            inputs = [arena_mod.from_description(arena, d) for d in request["inputs"]]
            out = arena_mod.from_description(arena, request["out"])
            ws = workspaces.setdefault(request["key"], allocate(plan, out.device))
            bound = Bound(
                plan, launcher, inputs, out, guard_bytes=int(request["guard"]), workspaces=ws
            )
            if request["op"] == "prepare":
                bound.prepare()
            else:
                bound.call()
        except BaseException as exc:  # noqa: BLE001  (the candidate's kernels may raise anything)
            kind = "plan" if isinstance(exc, P.PlanError | KeyError) else "raised"
            if is_compile_error(exc):
                kind = "compile"
            reply(ok=False, kind=kind, detail=candidate_traceback(exc, job["workdir"], limit=4000))
            continue
        served += 1
        reply(ok=True)
    return {"served": served}


def _key(problem: dict) -> str:
    from kernels.problem import Problem

    return Problem.from_dict(problem).key
