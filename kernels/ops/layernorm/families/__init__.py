"""The layernorm kernel families."""

from kernels.ops.layernorm.families.rowwise import LayernormRowwise

FAMILIES = (LayernormRowwise(),)
