"""The qkv_rotary kernel families."""

from kernels.ops.qkv_rotary.families.cutlass_sm90 import CutlassSm90QkvRotary
from kernels.ops.qkv_rotary.families.dual import DualQkvRotary
from kernels.ops.qkv_rotary.families.weight_stream import WeightStreamQkvRotary

FAMILIES = (DualQkvRotary(), WeightStreamQkvRotary(), CutlassSm90QkvRotary())
