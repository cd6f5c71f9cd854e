"""Uploaded models (KernelBench-convention files): profile them, classify their kernels into
problems of kernels/, substitute winning kernels and check the result end to end against the
best of eager, CUDA graphs and torch.compile. See harness/README.md, "Models".

The parent-side entry points are re-exported here; the child side (child.py) runs only inside
the sandbox.
"""

from harness.model.profile import ModelProfile, profile_model
from harness.model.sandbox import MODEL_LIMITS, ModelFailure
from harness.model.verify import EndToEnd, Winner, verify_model

__all__ = [
    "MODEL_LIMITS",
    "EndToEnd",
    "ModelFailure",
    "ModelProfile",
    "Winner",
    "profile_model",
    "verify_model",
]
