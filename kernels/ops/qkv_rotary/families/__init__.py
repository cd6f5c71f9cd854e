"""The qkv_rotary kernel families."""

from kernels.ops.qkv_rotary.families.dual import DualQkvRotary

FAMILIES = (DualQkvRotary(),)
