"""The softmax kernel families."""

from kernels.ops.softmax.families.rowwise import SoftmaxRowwise

FAMILIES = (SoftmaxRowwise(),)
