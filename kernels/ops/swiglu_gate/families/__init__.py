"""The swiglu_gate kernel families."""

from kernels.ops.swiglu_gate.families.dual import DualSwigluGate

FAMILIES = (DualSwigluGate(),)
