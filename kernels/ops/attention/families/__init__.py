"""The attention kernel families."""

from kernels.ops.attention.families.flash import FlashAttention

FAMILIES = (FlashAttention(),)
