"""The decode_attention kernel families."""

from kernels.ops.decode_attention.families.split import SplitDecodeAttention

FAMILIES = (SplitDecodeAttention(),)
