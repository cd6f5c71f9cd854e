"""Module patching for end-to-end verification: modules whose call matches a problem that has
a winning kernel run that kernel instead of their own forward.

Each patched module decides per call: it describes itself and its input the same way the
profiler's module table does (so model_classify.problem_for_module gives the same problem
key), and calls the kernel only on a key that has a winner. `enabled` switches every patch
at once, so the original and the substituted model can be timed interleaved on one set of
weights. The kernel gets destination passing, like in the harness: `run(*inputs, out=out)`.
"""

from __future__ import annotations

import torch

from harness.model.classify import problem_for_module


class Patcher:
    def __init__(self) -> None:
        self.enabled = False
        self.hits: dict[str, int] = {}  # problem key -> kernel calls made
        self.skipped: list[str] = []  # modules a kernel matched by op but not by shape/params
        self.prepared: set[str] = set()  # keys whose kernel's prepare() has run
        # Per-call inputs that depend only on the module (rotary's cos/sin repeated over the
        # batch): built once, so a patched call launches the kernel and nothing else.
        self.cache: dict[tuple, tuple[torch.Tensor, ...]] = {}


def describe(module: torch.nn.Module, x: torch.Tensor) -> dict:
    """The module table entry model_child writes, for this call."""
    dim = getattr(module, "dim", None)
    eps = None
    for name in ("eps", "variance_epsilon", "epsilon"):
        value = getattr(module, name, None)
        if isinstance(value, float | int):
            eps = float(value)
            break
    return {
        "cls": type(module).__name__,
        "input": list(x.shape),
        "dtype": str(x.dtype).removeprefix("torch."),
        "params": {n: list(p.shape) for n, p in module.named_parameters(recurse=False)},
        "buffers": {n: list(b.shape) for n, b in module.named_buffers(recurse=False)},
        "eps": eps,
        "dim": dim if isinstance(dim, int) else None,
    }


def _inputs(
    op: str, module: torch.nn.Module, x: torch.Tensor, cache: dict | None = None
) -> tuple[torch.Tensor, ...]:
    """The op's inputs (kernels/ops/<op> order) for this module call, as contiguous views."""
    if op == "matmul":
        a = x.reshape(-1, x.shape[-1]).contiguous()
        bias = getattr(module, "bias", None)
        return (a, module.weight) if bias is None else (a, module.weight, bias)
    if op in ("rmsnorm", "softmax"):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        return (x2, module.weight) if op == "rmsnorm" else (x2,)
    if op == "layernorm":
        return (x.reshape(-1, x.shape[-1]).contiguous(), module.weight, module.bias)
    if op == "rotary":
        b, t, h, d = x.shape
        cos, sin = module.cos, module.sin
        # The op takes per-token cos/sin (b*t rows): the buffers repeated over the batch. Two
        # copies and two allocations per call otherwise; the version counters notice a
        # buffer written in place.
        key = (id(module), b, cos.data_ptr(), cos._version, sin.data_ptr(), sin._version)
        tables = cache.get(key) if cache is not None else None
        if tables is None:
            tables = (cos.repeat(b, 1), sin.repeat(b, 1))
            if cache is not None:
                cache[key] = tables
        return (x.reshape(b * t, h, d).contiguous(), *tables)
    raise ValueError(f"no substitution for op {op!r}")


def _out_shape(op: str, module: torch.nn.Module, x: torch.Tensor) -> tuple[int, ...]:
    if op == "matmul":
        return (*x.shape[:-1], module.weight.shape[0])
    return tuple(x.shape)


def _may_match(module: torch.nn.Module) -> bool:
    """Module kinds problem_for_module can map to an op (the rest are left unpatched)."""
    cls = type(module).__name__
    low = cls.lower()
    return cls in ("Linear", "LayerNorm", "Softmax") or any(
        word in low for word in ("rmsnorm", "rotary", "rope")
    )


def patch(model: torch.nn.Module, kernels: dict) -> Patcher:
    """Wrap every module that can match a problem key in `kernels` (key -> candidate module)."""
    patcher = Patcher()
    decided: dict[tuple, tuple[str, str] | None] = {}  # (module, shape, dtype) -> (op, key)

    for _path, module in model.named_modules():
        if not _may_match(module):
            continue
        original = module.forward

        def forward(*args, _m=module, _orig=original, **kwargs):
            x = args[0] if args else None
            if not patcher.enabled or kwargs or len(args) != 1 or not isinstance(x, torch.Tensor):
                return _orig(*args, **kwargs)
            memo = (id(_m), tuple(x.shape), x.dtype, x.device)
            if memo not in decided:
                found = problem_for_module(describe(_m, x))
                hit = found is not None and found[1] is not None and found[1].key in kernels
                decided[memo] = (found[0], found[1].key) if hit else None
            if decided[memo] is None:
                return _orig(*args, **kwargs)
            op, key = decided[memo]
            inputs = _inputs(op, _m, x, patcher.cache)
            out = torch.empty(_out_shape(op, _m, x), dtype=x.dtype, device=x.device)
            kernel = kernels[key]
            if key not in patcher.prepared and callable(getattr(kernel, "prepare", None)):
                kernel.prepare(*inputs)  # one-time work (descriptors, a transposed weight)
            patcher.prepared.add(key)
            # The op's output is 2-D (rows, N), or (tokens, H, D) for rotary: a view of `out`.
            kernel.run(*inputs, out=out.view(-1, *out.shape[(2 if op == "rotary" else -1) :]))
            patcher.hits[key] = patcher.hits.get(key, 0) + 1
            return out

        module.forward = forward
    return patcher
