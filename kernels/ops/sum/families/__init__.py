"""The sum kernel families."""

from kernels.ops.sum.families.rowwise import SumRowwise

FAMILIES = (SumRowwise(),)
