"""An op whose families are made for the screen's tests: rmsnorm, with a family that is right,
one that writes nothing, one that raises, one that kills its process and one that never returns. Trusted renders, as
every family is (the screen only ever imports renders of an op's own families)."""

from __future__ import annotations

from kernels.ops.rmsnorm.op import RmsnormOp
from kernels.problem import Family, ParamSpace

_RIGHT = '''"""rmsnorm in torch, SCALE={scale}."""
import torch

SCALE = {scale}


def run(x, weight, *, out):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    out.copy_(y.to(out.dtype))
'''

BODIES = {
    "right": _RIGHT,
    "unwritten": '"""writes nothing."""\nSCALE = {scale}\n\n\ndef run(x, weight, *, out):\n    pass\n',
    "raises": '"""raises."""\nSCALE = {scale}\n\n\ndef run(x, weight, *, out):\n    raise ValueError("no")\n',
    "dies": '"""kills its process."""\nimport os\nSCALE = {scale}\n\n\ndef run(x, weight, *, out):\n    os._exit(9)\n',
    "hangs": '"""never returns."""\nimport time\nSCALE = {scale}\n\n\ndef run(x, weight, *, out):\n    time.sleep(3600)\n',
}


class ScreenFamily(Family):
    op = "rmsnorm"

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"screen_{kind}"

    def space(self, problem):
        return ParamSpace({"SCALE": [1, 2, 3]})

    def default(self, problem):
        return {"SCALE": 1}

    def render(self, problem, params):
        return BODIES[self.kind].format(scale=params["SCALE"])


class ScreenOp(RmsnormOp):
    def families(self):
        return [ScreenFamily(kind) for kind in BODIES]

    def starting_points(self, problem):
        return []


OP = ScreenOp()
