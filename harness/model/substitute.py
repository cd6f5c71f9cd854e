"""A model with winning kernels substituted, as a torch.compile backend.

`torch.compile(model, backend=Substituting(model, ops))` captures the model's graphs with
Dynamo, finds the sites in each (sites.py), puts the custom op of every site that has a
winning kernel in its place (ops.py), and then runs the rewritten graph as it is (`inner=None`:
the model's own eager code, kernels substituted) or hands it to Inductor (`"inductor"`:
torch.compile's default, which fuses what is left around the kernels). With no ops it only
records the sites: that is how the profile learns where fusions could go.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from harness.model.sites import Site, find_sites, rewrite


class Substituting:
    def __init__(
        self,
        model: torch.nn.Module,
        ops: Mapping[str, Callable] | None = None,
        *,
        inner: str | None = None,
        mode: str | None = None,
    ) -> None:
        self.model = model
        self.ops = dict(ops or {})
        self.inner = inner  # None: run the rewritten graph; "inductor": compile it
        self.mode = mode  # Inductor's mode options when inner is "inductor"
        self.sites: list[Site] = []  # every site of every captured graph
        self.replaced: list[Site] = []  # those that now call a kernel
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        found = find_sites(gm, example_inputs, self.model)
        self.sites += found
        if self.ops:
            self.replaced += rewrite(gm, found, self.ops)
        if self.inner == "inductor":
            from torch._inductor.compile_fx import compile_fx

            return compile_fx(gm, example_inputs)
        return gm.forward


def compile_options() -> None:
    """Room for every variant a verification compiles (baselines and ours share code objects;
    each backend is a guard of its own)."""
    import torch._dynamo.config as dynamo_config

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 64))
