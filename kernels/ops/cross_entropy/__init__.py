"""cross_entropy: per-row loss from logits and target ids; see op.py."""

from kernels.ops.cross_entropy.op import CrossEntropyOp

OP = CrossEntropyOp()
