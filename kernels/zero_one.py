"""0/1 inputs for the ops' adversarial cases: their sums are exact, so a slip in which rows feed
which product (or which K tile is summed) shows in the output.

With half the entries ones, a sum over K is about K/4, and an op that multiplies two such sums
(swiglu_gate's silu(gate) * up) or scales one by a row scale (the "+rowscale" layouts) leaves
fp16's range (65,504) at a K of about 1,024: the reference is then Inf in the dtype and every
kernel fails the case. So an op gives the left operand's rows as many ones as its output can
take (`rows`), spread over all of K so that every K tile still counts.
"""

from __future__ import annotations

import torch


def like(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """t's shape and dtype, each entry 0 or 1 with even odds."""
    return torch.randint(0, 2, t.shape, generator=gen, device=t.device).to(t.dtype)


def rows(t: torch.Tensor, gen: torch.Generator, *, at_most: int) -> torch.Tensor:
    """t's (rows, K) shape and dtype, each row holding min(at_most, K // 2) ones (at least one),
    one at a random column of each of that many equal bands of K: a row's sum against any 0/1
    operand is at most that many, and no stretch of K longer than two bands is left empty."""
    n, k = t.shape
    count = max(1, min(at_most, k // 2))
    starts = torch.arange(count + 1, device=t.device) * k // count
    widths = (starts[1:] - starts[:-1]).expand(n, count)
    offsets = (torch.rand((n, count), generator=gen, device=t.device) * widths).long()
    return torch.zeros_like(t).scatter_(1, starts[:-1] + offsets, 1)
