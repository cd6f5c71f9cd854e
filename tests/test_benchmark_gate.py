"""The benchmark's gate judges a case as the harness does: a kernel may be as far over the
tolerance as the op's own baseline (the vendor library) is on the same inputs (CPU only)."""

from harness.compare import as_far_as_the_vendor
from kernels import get_op
from kernels.checking import check_source
from kernels.problem import Problem

PROBLEM = Problem("rmsnorm", (8, 64), "fp32")
OFF = """
import torch

def run(x, weight, *, out):
    xf = x.double()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.double()
    out.copy_(y * (1 + {factor}))
"""


def test_a_case_may_be_as_far_off_as_the_vendor_and_no_further(monkeypatch):
    op = get_op("rmsnorm")
    tol = op.tolerance(PROBLEM)
    # 2.5x over the tolerance on every output (relative error = 2.5 * rtol, atol aside).
    source = OFF.format(factor=2.5 * tol.rtol)
    assert check_source(op, PROBLEM, source, adversarial=False)  # the plain rule: fails
    limit = as_far_as_the_vendor(op, PROBLEM)
    assert check_source(op, PROBLEM, source, adversarial=False, limit=limit), "vendor exact"

    baseline = op.baseline

    def vendor_as_far_off(problem, *inputs, out):  # a vendor 2x over on the same inputs
        baseline(problem, *inputs, out=out)
        out.mul_(1 + 2.0 * tol.rtol)

    monkeypatch.setattr(op, "baseline", vendor_as_far_off)
    failures = check_source(op, PROBLEM, source, adversarial=False, limit=limit)
    assert not failures, failures  # 2.5 <= 1.5 x the vendor's ~2
    worse = OFF.format(factor=4 * tol.rtol)
    failures = check_source(op, PROBLEM, worse, adversarial=False, limit=limit)
    assert failures and "the vendor's own error" in failures[0]
