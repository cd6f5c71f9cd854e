"""The swiglu_gate kernel families."""

from kernels.ops.swiglu_gate.families.cutlass_sm90 import CutlassSm90SwigluGate
from kernels.ops.swiglu_gate.families.dual import DualSwigluGate
from kernels.ops.swiglu_gate.families.weight_stream import WeightStreamSwigluGate

FAMILIES = (DualSwigluGate(), WeightStreamSwigluGate(), CutlassSm90SwigluGate())
