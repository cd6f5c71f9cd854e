"""The cross-entropy kernel families."""

from kernels.ops.cross_entropy.families.rowwise import CrossEntropyRowwise

FAMILIES = (CrossEntropyRowwise(),)
