"""The rmsnorm kernel families."""

from kernels.ops.rmsnorm.families.rowwise import RmsnormRowwise

FAMILIES = (RmsnormRowwise(),)
