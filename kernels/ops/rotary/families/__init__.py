"""The rotary kernel families."""

from kernels.ops.rotary.families.heads import RotaryHeads

FAMILIES = (RotaryHeads(),)
