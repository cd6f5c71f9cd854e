"""Plans are hostile data: what Plan.from_json refuses, what the replay refuses before a
launch, and what the recorder writes down (in-process here, on the CPU interpreter)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from harness import plan as P
from harness.replay import Bound, Launcher

GOOD = {
    "version": 1,
    "problem": {"op": "rmsnorm", "shape": [4, 8], "dtype": "fp32", "layout": ""},
    "inputs": [
        {"dtype": "float32", "shape": [4, 8], "strides": [8, 1]},
        {"dtype": "float32", "shape": [8], "strides": [1]},
    ],
    "output": {"dtype": "float32", "shape": [4, 8], "strides": [8, 1]},
    "kernels": [
        {
            "type": "triton",
            "name": "k",
            "binary": "",
            "metadata": {},
            "signature": [["x", "*fp32"], ["n", "i32"], ["B", "constexpr"]],
            "constants": [],
            "arg_names": ["x", "n", "B"],
            "attr": "k",
        }
    ],
    "workspaces": [{"nbytes": 64, "phase": "run"}],
    "presets": [],
    "prepare": [],
    "run": [
        {
            "type": "aten",
            "op": "copy_.default",
            "args": [
                {
                    "type": "view",
                    "ref": ["output", 0],
                    "offset": 0,
                    "dtype": "float32",
                    "shape": [4, 8],
                    "strides": [8, 1],
                },
                {
                    "type": "view",
                    "ref": ["input", 0],
                    "offset": 0,
                    "dtype": "float32",
                    "shape": [4, 8],
                    "strides": [8, 1],
                },
            ],
            "kwargs": [],
            "results": [None],
        }
    ],
    "interpreted": True,
}


def _plan(mutate=None) -> dict:
    data = copy.deepcopy(GOOD)
    if mutate:
        mutate(data)
    return data


def test_a_well_formed_plan_round_trips():
    plan = P.Plan.from_json(_plan())
    assert P.Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    assert plan.aten_ops() == {"copy_.default"}


@pytest.mark.parametrize(
    "mutate, why",
    [
        (lambda d: d["run"][0].update(op="_local_scalar_dense.default"), "not one the judge runs"),
        (lambda d: d["run"][0]["args"][0]["ref"].__setitem__(1, 3), "output 3 of 1"),
        (lambda d: d["run"][0]["args"][1]["ref"].__setitem__(0, "temp"), "before any step made it"),
        (lambda d: d["run"][0]["args"][0].update(dtype="complex128"), "allowed values"),
        (
            lambda d: d["kernels"][0]["signature"][0].__setitem__(1, '*fp32); system("x")'),
            "signature type",
        ),
        (lambda d: d["kernels"][0].update(name="k; rm -rf /"), "not a name"),
        (lambda d: d.update(version=2), "plan version"),
        (lambda d: d["workspaces"][0].update(nbytes=2**50), "expected an integer"),
        (lambda d: d.update(interpreted=False), "has no binary"),
        (lambda d: d["run"].append({"type": "shell", "cmd": "id"}), "unknown step type"),
        (
            lambda d: d["run"][0]["args"].append(
                {
                    "type": "view",
                    "ref": ["input", 0],
                    "offset": 0,
                    "dtype": "float32",
                    "shape": [1, 2],
                    "strides": [1],
                }
            ),
            "differ in length",
        ),
    ],
)
def test_a_hostile_plan_is_refused_with_a_reason(mutate, why):
    with pytest.raises(P.PlanError, match=why):
        P.Plan.from_json(_plan(mutate))


class _NoKernels(Launcher):
    def pointers(self):
        return False


def _bind(plan_data, out_offset=0):
    plan = P.Plan.from_json(plan_data)
    x, w = torch.randn(4, 8), torch.randn(8)
    padded = torch.full((2 * 64 + 32,), float("nan"))
    out = padded[64 : 64 + 32].view(4, 8)
    return Bound(plan, _NoKernels(), [x, w], out, guard_bytes=64 * 4), x, out


def test_the_replay_runs_the_allowed_operations_on_the_judges_buffers():
    bound, x, out = _bind(_plan())
    bound.call()
    assert torch.equal(out, x)


def test_the_replay_refuses_a_view_outside_its_buffer():
    def past_the_guard(d):
        d["run"][0]["args"][0]["offset"] = 32 * 4 + 64 * 4  # past the guard band

    with pytest.raises(P.PlanError, match="outside it"):  # refused when bound, before any call
        _bind(_plan(past_the_guard))


def test_the_replay_refuses_inputs_of_another_layout():
    plan = P.Plan.from_json(_plan())
    out = torch.empty(4, 8)
    with pytest.raises(P.PlanError, match="recorded for"):
        Bound(plan, _NoKernels(), [torch.randn(8, 4).t(), torch.randn(8)], out, guard_bytes=0)


def test_a_pointer_must_start_inside_its_buffer_and_keep_its_alignment():
    plan = P.Plan.from_json(_plan())
    bound, _, _ = _bind(_plan())
    inside = P.View(P.Ref(P.BufferKind.INPUT, 0), 4, "float32", (1,), (1,), aligned16=False)
    assert bound._pointer(inside) == bound.buffers[inside.ref].base + 4
    with pytest.raises(P.PlanError, match="16-byte aligned"):
        bound._pointer(P.View(inside.ref, 4, "float32", (1,), (1,), aligned16=True))
    with pytest.raises(P.PlanError, match="outside it"):
        bound._pointer(P.View(inside.ref, 10**9, "float32", (1,), (1,)))
    assert plan.kernels[0].attr == "k"


RECORDED = """
import torch
import triton
import triton.language as tl


@triton.jit
def scale(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)


def run(x, w, *, out):
    tmp = torch.empty_like(x)
    scale[(triton.cdiv(x.numel(), 16),)](x, tmp, x.numel(), BLOCK=16)
    out.copy_(tmp)
"""


@pytest.fixture
def recorder(monkeypatch):
    """The recorder the sandbox installs, here in-process (a test: trusted code), undone after."""
    from triton.runtime.interpreter import InterpretedFunction

    from harness import cuda_ext
    from harness.child.recorder import Recorder

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(InterpretedFunction, "run", InterpretedFunction.run)
    monkeypatch.setattr(cuda_ext, "launch_hook", cuda_ext.launch_hook)
    monkeypatch.setattr(cuda_ext, "host_libraries_refused", "")
    rec = Recorder("cpu")
    rec.install()
    return rec


PROBLEM = {"op": "rmsnorm", "shape": [4, 8], "dtype": "fp32", "layout": ""}


def test_the_recorder_writes_down_launches_allocations_and_copies(tmp_path, recorder):
    from harness import runtime

    module = runtime.load_candidate(RECORDED, str(tmp_path), "kf_recorded_test")
    recorder.module = module
    x, w = torch.randn(4, 8), torch.randn(8)
    rec = recorder.record(PROBLEM, [x, w], torch.empty(4, 8), None, module.run)
    kinds = [type(s).__name__ for s in rec.plan.run]
    assert kinds == ["Launch", "AtenCall"], rec.plan.run
    launch, copy_step = rec.plan.run
    assert rec.plan.kernels[launch.kernel].attr == "scale" and launch.grid == (2, 1, 1)
    assert launch.args[0].ref == P.Ref(P.BufferKind.INPUT, 0)
    assert launch.args[1].ref == P.Ref(P.BufferKind.WORKSPACE, 0)
    assert dict(launch.kwargs) == {"BLOCK": 16}
    assert copy_step.op == "copy_.default" and copy_step.args[0].ref.kind is P.BufferKind.OUTPUT
    assert rec.plan.workspaces == (P.Workspace(128, "run"),)


def test_the_recorder_refuses_reading_a_value_back(tmp_path, recorder):
    from harness import runtime
    from harness.child.recorder import RecordError

    src = "def run(x, w, *, out):\n    if x.sum().item() > 0:\n        out.zero_()\n"
    module = runtime.load_candidate(src, str(tmp_path), "kf_reads_back")
    with pytest.raises(RecordError, match="does not replay"):
        recorder.record(
            PROBLEM, [torch.randn(4, 8), torch.randn(8)], torch.empty(4, 8), None, module.run
        )


def test_the_recorder_refuses_a_host_library(tmp_path, recorder):
    from harness import runtime
    from harness.cuda_ext import CudaBuildError

    src = (
        "from harness.cuda_ext import load_cuda\n"
        "def run(x, w, *, out):\n"
        "    load_cuda('x', cuda_source='', cpp_source='', functions=[])\n"
    )
    module = runtime.load_candidate(src, str(tmp_path), "kf_host_library")
    with pytest.raises(CudaBuildError, match="cannot load a host library"):
        recorder.record(
            PROBLEM, [torch.randn(4, 8), torch.randn(8)], torch.empty(4, 8), None, module.run
        )
