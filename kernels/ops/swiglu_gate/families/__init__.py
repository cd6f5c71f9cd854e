"""The swiglu_gate kernel families."""

from kernels.ops.swiglu_gate.families.cutlass_sm90 import CutlassSm90SwigluGate
from kernels.ops.swiglu_gate.families.dual import DualSwigluGate

FAMILIES = (DualSwigluGate(), CutlassSm90SwigluGate())
