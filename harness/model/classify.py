"""Which op of kernels/ each profiled kernel belongs to, and at what problem (shape, dtype).

Pure logic over recorded profiler output (model_trace.KernelRecord + the module table the
profiling child writes), so CI can test it on a trace recorded on a GPU. For each kernel the
stack that launched it is read from the inside out:

1. the innermost model module that is a known op (nn.Linear -> matmul, an RMSNorm module ->
   rmsnorm, nn.LayerNorm -> layernorm, nn.Softmax -> softmax, a rotary module -> rotary):
   every kernel inside it is that op, with the problem the module was called at;
2. else the innermost aten op that is one (aten::linear/addmm/mm -> matmul, aten::_softmax,
   aten::native_layer_norm, aten::rms_norm, aten::sum; attention and elementwise ops are
   named but not optimizable);
3. else the kernel's own name (cuBLAS/CUTLASS/nvjet GEMMs, flash attention, elementwise...).

Identical (op, problem) pairs are one group; a group's time is per forward step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

import kernels
from harness.model.trace import MODULE_PREFIX, KernelRecord
from harness.results import DeviceInfo
from kernels.ops.matmul.op import TF32
from kernels.problem import Problem, ProblemError
from kernels.rowwise import NormOp

DTYPE_NAMES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "fp32",
}

# aten ops -> (op, optimizable by kernels/). Matmul shapes are read from the op's input dims.
ATEN_OPS = {
    "aten::linear": "matmul",
    "aten::addmm": "matmul",
    "aten::mm": "matmul",
    "aten::matmul": "matmul",
    "aten::bmm": "batched_matmul",
    "aten::baddbmm": "batched_matmul",
    "aten::_softmax": "softmax",
    "aten::softmax": "softmax",
    "aten::native_layer_norm": "layernorm",
    "aten::layer_norm": "layernorm",
    "aten::rms_norm": "rmsnorm",
    "aten::_fused_rms_norm": "rmsnorm",
    "aten::sum": "sum",
    "aten::cross_entropy_loss": "cross_entropy",
    "aten::scaled_dot_product_attention": "attention",
    "aten::_scaled_dot_product_flash_attention": "attention",
    "aten::_scaled_dot_product_efficient_attention": "attention",
    "aten::_scaled_dot_product_cudnn_attention": "attention",
    "aten::_flash_attention_forward": "attention",
    "aten::convolution": "convolution",
    "aten::_convolution": "convolution",
}
ELEMENTWISE_ATEN = re.compile(
    r"aten::(add|sub|mul|div|pow|rsqrt|sqrt|exp|silu|gelu|relu|tanh|sigmoid|neg|cat|copy_|to|"
    r"_to_copy|clone|contiguous|mean|max|min|where|masked_fill|fill_|zero_|arange|cos|sin)_?$"
)
KERNEL_NAMES = [  # (pattern on the kernel name, op), first match wins
    # Inductor's generated kernels (pointwise, reduction, persistent reduction, template):
    # what torch.compile fused; named before the patterns their fused op names would match.
    (re.compile(r"^triton_(poi|red|per|tem)_"), "compiler_fused"),
    (re.compile(r"gemm|cutlass|nvjet|cublas|xmma|wgmma|_sgemm|_hgemm", re.I), "matmul"),
    (re.compile(r"flash|fmha|attention|attn", re.I), "attention"),
    (re.compile(r"softmax", re.I), "softmax"),
    (re.compile(r"layer_?norm", re.I), "layernorm"),
    (re.compile(r"rms_?norm", re.I), "rmsnorm"),
    (re.compile(r"reduce_kernel|reduction", re.I), "reduction"),
    (
        re.compile(r"elementwise|vectorized|unrolled|CatArrayBatched|copy_kernel", re.I),
        "elementwise",
    ),
    (re.compile(r"memcpy|memset", re.I), "memory"),
]


@dataclass
class ProblemGroup:
    op: str  # an op of kernels/, or a class such as "attention", "elementwise", "unknown"
    label: str  # the problem key when there is one, else what identifies the group
    problem: Problem | None  # set when kernels/ can optimize it (op known, shape valid)
    time_us: float = 0.0  # per forward step
    calls: float = 0.0  # kernel launches per forward step
    share: float = 0.0  # of all GPU (or CPU-op) time
    kernels: dict[str, float] = field(default_factory=dict)  # kernel name -> us per step
    how: str = ""  # "module", "aten", "kernel name" or "unknown": how it was classified
    note: str = ""  # why a known op is not optimizable (dtype, eps, shape)

    @property
    def optimizable(self) -> bool:
        return self.problem is not None

    def to_dict(self) -> dict:
        top = sorted(self.kernels.items(), key=lambda kv: -kv[1])[:5]
        return {
            "op": self.op,
            "label": self.label,
            "problem": self.problem.to_dict() if self.problem else None,
            "time_us": self.time_us,
            "calls": self.calls,
            "share": self.share,
            "kernels": [{"name": n, "time_us": t} for n, t in top],
            "how": self.how,
            "note": self.note,
        }


def _dtype(name: str) -> str | None:
    return DTYPE_NAMES.get(str(name).removeprefix("torch."))


def _eps_layout(op: str, info: Mapping) -> str:
    """The norm problem's layout for the module's own eps (kernels/rowwise.py NormOp): its
    kernel computes exactly that eps ("" for the op's own, or when the module names none)."""
    norm = kernels.get_op(op)
    assert isinstance(norm, NormOp)
    eps = info.get("eps")
    return norm.layout_for(eps) if eps is not None and eps > 0 else ""


def validated(op: str, shape: tuple[int, ...], dtype: str | None, layout: str = ""):
    """(Problem, "") when kernels/ can run it, else (None, why not)."""
    if dtype is None:
        return None, "unknown dtype"
    try:
        return kernels.parse_problem(op, list(shape), dtype, layout), ""
    except ProblemError as exc:
        return None, str(exc)


def matmul_layout(layout: str, dtype: str | None, tf32: bool) -> str:
    """A model's GEMM as a matmul layout: fp32 ones run as TF32 where the model allows it
    (kernels/ops/matmul); one without TF32 stays cuBLAS's (its problem is refused, with why)."""
    return layout + TF32 if dtype == "fp32" and tf32 else layout


def allows_tf32() -> bool:
    """Whether the model (this process, after its code ran) lets cuBLAS run fp32 as TF32."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


def describe(module, x) -> dict:
    """A module's entry in the module table (what problem_for_module reads): its class, the
    shape and dtype of its first tensor input `x`, its own parameters' and buffers' shapes,
    its eps and softmax dim. The profiling child writes one per module; the site finder
    describes a module call the same way, so both name the same problem."""
    dim = getattr(module, "dim", None)
    eps = None
    for name in ("eps", "variance_epsilon", "epsilon"):
        value = getattr(module, name, None)
        if isinstance(value, float | int):
            eps = float(value)
            break
    return {
        "cls": type(module).__name__,
        "input": list(x.shape) if x is not None else None,
        "dtype": str(x.dtype).removeprefix("torch.") if x is not None else "",
        "params": {n: list(p.shape) for n, p in module.named_parameters(recurse=False)},
        "buffers": {n: list(b.shape) for n, b in module.named_buffers(recurse=False)},
        "eps": eps,
        "dim": dim if isinstance(dim, int) else None,
        "tf32": allows_tf32(),  # global, recorded at the call: what the model set by then
    }


def problem_for_module(info: Mapping) -> tuple[str, Problem | None, str] | None:
    """(op, problem or None, note) for a module the table describes; None if not an op."""
    cls = str(info.get("cls", ""))
    low = cls.lower()
    shape = info.get("input") or []
    params = info.get("params") or {}
    buffers = info.get("buffers") or {}
    dtype = _dtype(info.get("dtype", ""))
    if not shape:
        return None
    rows = math.prod(shape[:-1]) if len(shape) > 1 else 1
    if cls == "Linear" and "weight" in params:
        n, k = params["weight"]
        layout = matmul_layout(
            "NT+bias" if "bias" in params else "NT", dtype, bool(info.get("tf32"))
        )
        return ("matmul", *validated("matmul", (rows, n, k), dtype, layout))
    if "rmsnorm" in low and list(params.get("weight", [])) == [shape[-1]]:
        return (
            "rmsnorm",
            *validated("rmsnorm", (rows, shape[-1]), dtype, _eps_layout("rmsnorm", info)),
        )
    if cls == "LayerNorm" and "weight" in params and "bias" in params:
        layout = _eps_layout("layernorm", info)
        return ("layernorm", *validated("layernorm", (rows, shape[-1]), dtype, layout))
    if cls == "Softmax" and info.get("dim") in (-1, len(shape) - 1):
        return ("softmax", *validated("softmax", (rows, shape[-1]), dtype))
    if ("rotary" in low or "rope" in low) and len(shape) == 4 and {"cos", "sin"} <= set(buffers):
        b, t, h, d = shape
        if list(buffers["cos"]) != [t, d // 2]:
            return "rotary", None, "cos/sin buffers are not (seq, head_dim/2)"
        return ("rotary", *validated("rotary", (b * t, h, d), dtype))
    return None


def _matmul_from_aten(frame, tf32: bool) -> tuple[Problem | None, str]:
    dims = [tuple(d) for d in frame.input_dims]
    dtype = _dtype(frame.input_types[0]) if frame.input_types else None
    name = frame.name
    try:
        if name == "aten::linear":
            x, w = dims[0], dims[1]
            shape, layout = (math.prod(x[:-1]), w[0], x[-1]), "NT"
            layout += "+bias" if len(dims) > 2 and len(dims[2]) == 1 else ""
        elif name == "aten::addmm":
            a, b = dims[1], dims[2]
            shape, layout = (a[0], b[1], a[1]), "NN+bias"
        elif name in ("aten::mm", "aten::matmul") and len(dims[1]) == 2:
            a, b = dims[0], dims[1]
            shape, layout = (math.prod(a[:-1]), b[1], a[-1]), "NN"
        else:
            return None, "shape not recorded"
    except (IndexError, TypeError):
        return None, "shape not recorded"
    return validated("matmul", shape, dtype, matmul_layout(layout, dtype, tf32))


def _rowwise_from_aten(op: str, frame) -> tuple[Problem | None, str]:
    if not frame.input_dims or not frame.input_dims[0]:
        return None, "shape not recorded"
    x = tuple(frame.input_dims[0])
    dtype = _dtype(frame.input_types[0]) if frame.input_types else None
    return validated(op, (math.prod(x[:-1]) if len(x) > 1 else 1, x[-1]), dtype)


def classify(
    record: KernelRecord, modules: Mapping[str, Mapping]
) -> tuple[str, str, Problem | None, str, str]:
    """(op, label, problem, how, note) of one kernel."""
    for frame in reversed(record.stack):
        if frame.name.startswith(MODULE_PREFIX):
            path = frame.name.removeprefix(MODULE_PREFIX)
            found = problem_for_module(modules.get(path, {}))
            if found is not None:
                module_op, problem, note = found
                cls = modules[path].get("cls")
                label = problem.key if problem else f"{module_op} ({cls} {path})"
                return module_op, label, problem, "module", note
    stack = record.stack
    for i in range(len(stack) - 1, -1, -1):
        frame = stack[i]
        op = ATEN_OPS.get(frame.name)
        if op is None:
            continue
        # aten::linear holds aten::mm/addmm: the outermost op of the run knows the layout.
        while i > 0 and ATEN_OPS.get(stack[i - 1].name) == op:
            i -= 1
        frame = stack[i]
        if op == "matmul":
            # The TF32 setting is global: any module's record of it is the model's.
            tf32 = any(info.get("tf32") for info in modules.values())
            problem, note = _matmul_from_aten(frame, tf32)
        elif op in ("softmax", "layernorm", "rmsnorm", "sum"):
            problem, note = _rowwise_from_aten(op, frame)
        else:
            return op, f"{op} ({frame.name})", None, "aten", "not an op of kernels/"
        label = problem.key if problem else f"{op} ({frame.name} {note})"
        return op, label, problem, "aten", note
    for frame in reversed(record.stack):
        if ELEMENTWISE_ATEN.match(frame.name):
            return "elementwise", f"elementwise ({frame.name})", None, "aten", ""
    for pattern, op in KERNEL_NAMES:
        if pattern.search(record.name):
            return op, f"{op} (kernel {_short(record.name)})", None, "kernel name", ""
    return "unknown", _short(record.name), None, "unknown", ""


def _short(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def group_records(
    records: list[KernelRecord], modules: Mapping[str, Mapping], steps: int
) -> list[ProblemGroup]:
    """Groups of identical (op, problem), largest time first, with each one's share."""
    groups: dict[tuple[str, str], ProblemGroup] = {}
    steps = max(1, steps)
    for record in records:
        op, label, problem, how, note = classify(record, modules)
        group = groups.get((op, label))
        if group is None:
            group = groups[(op, label)] = ProblemGroup(op, label, problem, how=how, note=note)
        group.time_us += record.duration_us / steps
        group.calls += 1 / steps
        group.kernels[record.name] = (
            group.kernels.get(record.name, 0.0) + record.duration_us / steps
        )
    total = sum(g.time_us for g in groups.values()) or 1.0
    for g in groups.values():
        g.share = g.time_us / total
    return sorted(groups.values(), key=lambda g: -g.time_us)


FUSIONS = ("swiglu_gate", "qkv_rotary", "matmul_epilogue", "matmul_residual")
# The sites that take the profile's attention kernels (sites.py), and what each is.
ATTENTION_SITES = {
    "decode_attention": "scaled_dot_product_attention with a KV cache",
    "attention": "scaled_dot_product_attention over the whole sequence",
}


def _signature(problem: Mapping) -> tuple:
    """A GEMM's identity whatever the layout its launcher used: (M, N, K, dtype, bias).
    Eager Linear layers profile as NT; under torch.compile the same GEMM is an NN aten::mm
    on a transposed view of the weight."""
    return (*problem["shape"], problem["dtype"], "+bias" in problem.get("layout", ""))


def plan_groups(
    groups: Sequence[Mapping], sites: Sequence[Mapping], device: DeviceInfo | None = None
) -> list[dict]:
    """The profile's groups (ProblemGroup.to_dict()s) as the Amdahl plan should see them: the
    time of the Linear layers a fusion site computes (sites.py: swiglu_gate, qkv_rotary)
    moves from their matmul groups to a group of the fusion's problem, one call per site;
    the rest of each matmul group stays a matmul problem keyed as the Linear layers are.
    A matmul group's time is split evenly over the Linear calls of its shape; attention's
    (a model with decode_attention or attention sites) evenly over those sites. The fused
    elementwise work a fusion also removes (silu-times, rotary) stays where it was: the
    fusion's share is a lower bound.

    With the device's measured ceilings, each group of a site (one call per site, so its
    calls are the problem's) also gets `floor_us`, the roofline's least time for its calls,
    and `unfused_us`, what the elementwise passes a fusion removes take at the copy roof
    (Op.unfused_bytes): how far each problem can go, for the plan's expected gain. Where our
    kernels of its op were measured on such a device (Op.measured_best), `measured_best` and
    `measured_results` too: the plan expects no more than that."""
    linears: dict[tuple, list[str]] = {}  # signature -> Linear problem key per call
    problems: dict[str, dict] = {}
    for site in sites:
        if site["kind"] == "matmul":
            linears.setdefault(_signature(site["problem"]), []).append(site["key"])
            problems[site["key"]] = site["problem"]
    attention = [s for s in sites if s["kind"] in ATTENTION_SITES]
    out: list[dict] = []
    per_call: dict[tuple, float] = {}
    attention_us = 0.0
    for g in groups:
        problem = g.get("problem")
        if g.get("op") == "matmul" and problem and _signature(problem) in linears:
            sig = _signature(problem)
            per_call[sig] = per_call.get(sig, 0.0) + g["time_us"] / len(linears[sig])
        elif g.get("op") == "attention" and not problem and attention:
            attention_us += g["time_us"]  # split evenly over the attention sites below
        else:
            out.append(dict(g))
    for site in attention:
        group = next((x for x in out if x["label"] == site["key"]), None)
        if group is None:
            group = {"op": site["kind"], "label": site["key"], "problem": site["problem"],
                     "time_us": 0.0, "calls": 0.0, "kernels": [], "how": "attention",
                     "note": ATTENTION_SITES[site["kind"]]}  # fmt: skip
            out.append(group)
        group["time_us"] += attention_us / len(attention)
        group["calls"] += 1
    left = {sig: len(keys) for sig, keys in linears.items() if sig in per_call}
    fused: dict[str, dict] = {}
    for site in sites:
        if site["kind"] not in FUSIONS:
            continue
        sigs = [_signature(problems[k]) for k in site["covers"] if k in problems]
        if len(sigs) != len(site["covers"]) or any(left.get(s, 0) < 1 for s in sigs):
            continue
        group = fused.setdefault(
            site["key"],
            {"op": site["problem"]["op"], "label": site["key"], "problem": site["problem"],
             "time_us": 0.0, "calls": 0.0, "kernels": [], "how": "fusion",
             "note": "computes " + " + ".join(site["covers"])},
        )  # fmt: skip
        group["time_us"] += sum(per_call[s] for s in sigs)
        group["calls"] += 1
        for s in sigs:
            left[s] -= 1
    out += fused.values()
    for sig, count in left.items():
        if count > 0:
            key = linears[sig][0]
            out.append(
                {
                    "op": "matmul",
                    "label": key,
                    "problem": problems[key],
                    "time_us": per_call[sig] * count,
                    "calls": float(count),
                    "kernels": [],
                    "how": "module",
                    "note": "",
                }  # fmt: skip
            )
    total = sum(g["time_us"] for g in out) or 1.0
    site_keys = {site["key"] for site in sites}
    # What the end-to-end check tries there without a kernel (sites.Site.baseline_saves)
    saves = {site["key"]: site["baseline_saves"] for site in sites if site.get("baseline_saves")}
    for g in out:
        g["share"] = g["time_us"] / total
        if g["label"] in saves:
            g["baseline_saves"] = saves[g["label"]]
        if device is not None and device.peak_gbps and g["label"] in site_keys:
            g.update(_roof(Problem.from_dict(g["problem"]), g["calls"], device))
        if device is not None and g["label"] in site_keys:
            best = kernels.get_op(g["problem"]["op"]).measured_best(device.name)
            if best is not None:
                g |= {"measured_best": best.speedup, "measured_results": best.results}
    return sorted(out, key=lambda g: -g["time_us"])


def _roof(problem: Problem, calls: float, device: DeviceInfo) -> dict[str, float]:
    op = kernels.get_op(problem.op)
    floor_s = device.floor_s(op.flops(problem), op.bytes_moved(problem), problem.dtype)
    copy_gbps = device.copy_gbps or device.peak_gbps  # an elementwise pass reads and writes
    unfused_s = op.unfused_bytes(problem) / (copy_gbps * 1e9) if copy_gbps else 0.0
    return {"floor_us": calls * floor_s * 1e6, "unfused_us": calls * unfused_s * 1e6}
