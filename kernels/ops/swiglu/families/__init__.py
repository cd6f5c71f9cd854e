"""The swiglu kernel families."""

from kernels.ops.swiglu.families.fused_gate import FusedGateSwiglu

FAMILIES = (FusedGateSwiglu(),)
