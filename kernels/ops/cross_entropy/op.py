"""cross_entropy: loss[m] = logsumexp(logits[m, :]) - logits[m, target[m]], fp32, no reduction.

Shape (M, N): M rows of N-way logits (N is the vocabulary), int64 targets of shape (M,).
"""

from __future__ import annotations

import torch

from kernels.problem import OutputSpec, Tolerance
from kernels.rowwise import RowwiseOp


class CrossEntropyOp(RowwiseOp):
    name = "cross_entropy"
    description = "per-row cross-entropy of logits against int64 targets (reduction='none')"

    def input_shapes(self, problem):
        m, n = problem.shape
        return [(m, n), (m,)]

    def output_spec(self, problem):
        return OutputSpec((problem.shape[0],), torch.float32)

    def make_inputs(self, problem, *, seed, device):
        gen = torch.Generator(device=device).manual_seed(seed)
        m, n = problem.shape
        logits = (2 * torch.randn((m, n), generator=gen, device=device)).to(problem.torch_dtype)
        targets = torch.randint(0, n, (m,), generator=gen, device=device)
        return logits, targets

    def adversarial_inputs(self, problem, *, seed, device):
        cases = super().adversarial_inputs(problem, seed=seed, device=device)
        _, targets = self.make_inputs(problem, seed=seed, device=device)
        m, n = problem.shape
        out = {name: (inputs[0], targets) for name, inputs in cases.items()}
        # The target is the row's maximum by far: loss near zero, where relative error shows.
        confident = torch.zeros((m, n), device=device)
        confident[torch.arange(m, device=device), targets] = 30.0
        out["confident"] = (confident.to(problem.torch_dtype), targets)
        # Edge targets: first and last class.
        edges = torch.where(torch.arange(m, device=device) % 2 == 0, 0, n - 1)
        out["edge_targets"] = (cases["large_values"][0], edges)
        return out

    def reference(self, problem, logits, targets):
        x = logits.double()
        return torch.logsumexp(x, dim=-1) - x.gather(1, targets[:, None]).squeeze(1)

    def baseline(self, problem, logits, targets, *, out):
        # What training code does: upcast the logits, then the fused ATen loss.
        return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")

    def flops(self, problem):
        m, n = problem.shape
        return 4 * m * n

    def bytes_moved(self, problem):
        m, n = problem.shape
        return m * n * problem.torch_dtype.itemsize + m * 8 + m * 4

    def tolerance(self, problem):
        # fp32 output from rounded inputs: only fp32 reduction-order noise remains.
        return Tolerance(rtol=1e-4, atol=1e-4)

    def families(self):
        from kernels.ops.cross_entropy.families import FAMILIES

        return list(FAMILIES)

    def starting_points(self, problem):
        from kernels.ops.cross_entropy.starting_points import starting_points

        return starting_points(problem)
