"""Where a kernels/ op can stand in for part of a model, found in the graphs torch.compile's
front end (Dynamo) captures, and the rewrite that puts the op there.

Dynamo hands a backend each captured graph as torch-level FX (`torch._C._nn.linear`,
`F.silu`, `operator.mul`, ...) with the model's parameters and buffers as placeholders and
every node's module call in `meta["nn_module_stack"]` (a module called twice gets two keys,
`...@1`). On that graph a site is one of:

    matmul       a Linear layer: linear(x, W[, b]) with W a parameter
    matmul_epilogue  a biased Linear whose only use is relu, silu or GELU: one matmul
                 problem with both in its epilogue ("NT+bias+gelu")
    matmul_residual  a Linear whose only use is an add of another tensor of its output's
                 shape and dtype (a residual connection, `x + o_proj(h)`): one matmul problem
                 that adds it in its epilogue ("NT[+bias]+res")
    swiglu_gate  silu(linear(x, Wg)) * linear(x, Wu): a SwiGLU MLP's gate and up; with Wg
                 and Wu parameters (N a multiple of 8) as one interleaved weight, layout i8,
                 made when the site is rewritten; where x is an RMSNorm module's output used
                 by the two linears only, the norm folded in (layout i8+rowscale): its weight
                 into the interleaved one, its row scale computed from its input by the call
                 (Inductor computes it in the kernel that writes that input), the norm gone
    qkv_rotary   three linears of one x (all biased or none: the op's "+bias" layout) whose
                 outputs are viewed as heads, two of them (q, k) then rotated: by one rotary
                 module call each, or by rotate-half written out in forward on the view or
                 its (b, heads, t, D) transpose, with cos/sin the model's own tables or
                 computed in forward as HF's rotary embedding does (rotation.py); prefill
                 with parameter weights takes them as one interleaved weight (and bias),
                 layout i8[+bias]+kv_heads=<n>, made when the site is rewritten, with an
                 RMSNorm module before them folded in as for swiglu_gate (i8[+bias]+rowscale
                 +kv_heads=<n>); GPT-J's
                 partial rotary of adjacent pairs (rotation.py), prefill with unbiased
                 parameter weights only, takes them concatenated, layout
                 pairs+rot=<R>+head_dim=<D>+kv_heads=<n>
    decode_attention  scaled_dot_product_attention of T queries against S >= T keys whose
                 mask is the model's own bool buffer (or a slice of one) that is causal from
                 the end (checked by value when the graph is captured), or no mask and T = 1;
                 with fewer key/value heads than query heads where SDPA groups them
                 (enable_gqa) or k and v were repeated for it (repeat_interleave on dim 1, or
                 HF's repeat_kv: new axis, expand, reshape): the op reads the cache as it is
                 and the repeats leave the graph with the call
    attention    scaled_dot_product_attention of every query against every key of its own
                 sequence, is_causal=True (a decoder's prefill) or no mask (an encoder's),
                 grouped the same ways as decode_attention (layout [causal+]kv_heads=<n>);
                 where the model repeated k and v, the op's own baseline (SDPA grouping the
                 heads) does less than the model's code: Site.baseline_saves
    module       one call of a module model_classify knows as an op (RMSNorm, rotary,
                 LayerNorm, Softmax): its nodes, one activation in, one tensor out

Each site names the problem it computes (Problem.key, as the profile's groups do) and the
Linear layers it covers. rewrite() replaces the sites that have a kernel with a call of that
kernel's custom op (harness.model.ops), fusions before the single layers they contain; the
rewritten graph runs as is (eager) or goes on to Inductor, which fuses around the ops.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

import kernels
from harness.model import rotation
from harness.model.classify import (
    allows_tf32,
    describe,
    matmul_layout,
    problem_for_module,
    validated,
)
from harness.model.graph_ops import ADD, MUL
from harness.model.graph_ops import calls as _is
from harness.model.rotation import Rotation
from kernels.dual_gemm import SMALL_M
from kernels.ops.matmul.op import TF32, is_tf32
from kernels.ops.qkv_rotary import op as qkv_op
from kernels.ops.qkv_rotary.op import BIAS
from kernels.ops.swiglu_gate.op import GROUP as INTERLEAVE_GROUP
from kernels.ops.swiglu_gate.op import INTERLEAVED, ROW_SCALE, interleave
from kernels.problem import Problem
from kernels.row_scale import rms_scale
from kernels.rowwise import NormOp

LINEAR = {torch._C._nn.linear, F.linear}
SILU = {F.silu, torch._C._nn.silu, torch.ops.aten.silu.default}
RESHAPE_METHODS = {"view", "reshape"}
RESHAPE_FNS = {torch.reshape}
SDPA = {torch._C._nn.scaled_dot_product_attention, F.scaled_dot_product_attention}
RELU = {F.relu, torch.relu}
GELU = {F.gelu, torch._C._nn.gelu}


@dataclass
class Site:
    kind: str  # matmul | matmul_epilogue | matmul_residual | swiglu_gate | qkv_rotary |
    # decode_attention | attention | module
    problem: Problem
    where: tuple[str, ...]  # module paths, for people
    covers: tuple[str, ...] = ()  # matmul keys of the Linear layers this computes
    # Graph plumbing (not serialized): the op's inputs in kernels/ order (nodes, or tensors
    # that become constants of the graph), the nodes whose values the op's result replaces,
    # every node the site takes over, and how to call the op on the inputs' values.
    inputs: tuple = ()
    outputs: tuple = ()
    nodes: frozenset = frozenset()
    call: Callable | None = None  # (op, *input values) -> one value per output
    # Where the op's own PyTorch baseline does less than the model's code (SDPA grouping the
    # k/v heads that the model repeated for it): what it saves. Such a site can take that
    # baseline in place of its nodes, with no kernel (ops.baseline_op).
    baseline_saves: str = ""

    @property
    def key(self) -> str:
        return self.problem.key

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "problem": self.problem.to_dict(),
            "where": list(self.where),
            "covers": list(self.covers),
        } | ({"baseline_saves": self.baseline_saves} if self.baseline_saves else {})


@dataclass
class _Graph:
    """One captured graph with what the site finders need to know about its nodes."""

    gm: fx.GraphModule
    model: torch.nn.Module
    tensors: dict[fx.Node, Any] = field(default_factory=dict)  # placeholder -> example input

    def owned(self, value) -> bool:
        """A parameter or buffer of the model (not an activation)."""
        ids = {id(t) for t in [*self.model.parameters(), *self.model.buffers()]}
        return isinstance(value, torch.Tensor) and id(value) in ids

    def constant(self, node) -> Any:
        """The real value of a node computed only from the model's own tensors and constants
        (a buffer, or a slice of one), else None."""
        if not isinstance(node, fx.Node):
            return node
        if node.op == "placeholder":
            value = self.tensors.get(node)
            return value if self.owned(value) else None
        if node.op == "get_attr":
            return _attr(self.gm, str(node.target))  # a get_attr's target is a dotted path
        if node.op == "call_function" and node.target is operator.getitem:
            base, index = self.constant(node.args[0]), node.args[1]
            if base is None or _has_node(index):
                return None
            return base[index]
        return None

    def value(self, node) -> Any:
        if not isinstance(node, fx.Node):
            return None
        if node in self.tensors:
            return self.tensors[node]
        return node.meta.get("example_value", node.meta.get("val"))

    def parameter(self, node) -> torch.Tensor | None:
        """The model parameter a node is (a placeholder Dynamo lifted, or a get_attr)."""
        if not isinstance(node, fx.Node):
            return None
        if node.op == "get_attr":
            value = _attr(self.gm, str(node.target))
            return value if isinstance(value, torch.nn.Parameter) else None
        value = self.tensors.get(node)
        return value if isinstance(value, torch.nn.Parameter) else None

    def shape(self, node) -> tuple[int, ...] | None:
        """A static shape (None for symbolic sizes or non-tensors)."""
        value = self.value(node)
        if not isinstance(value, torch.Tensor):
            return None
        try:
            return tuple(int(s) for s in value.shape)
        except (TypeError, ValueError):  # SymInt without a hint
            return None


def _has_node(value) -> bool:
    if isinstance(value, fx.Node):
        return True
    if isinstance(value, tuple | list):
        return any(_has_node(v) for v in value)
    if isinstance(value, slice):
        return any(_has_node(v) for v in (value.start, value.stop, value.step))
    return False


def _attr(root, target: str):
    for part in target.split("."):
        root = getattr(root, part, None)
    return root


def module_path(stack_path: str) -> str:
    """nn_module_stack's path ("L['self'].layers[0].attn") as named_modules names it."""
    path = re.sub(r"^L\['self'\]\.?", "", stack_path)
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]|\['([^']+)'\]", lambda m: "." + (m.group(1) or m.group(2)), path)
    return path.strip(".")


def _module_call(node: fx.Node) -> tuple[str, str] | None:
    """(call key, module path) of the innermost module call a node belongs to."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    key, (path, _cls) = list(stack.items())[-1]
    return key, module_path(path)


def _only_user(node: fx.Node) -> fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _dtype_name(value: torch.Tensor) -> str:
    from harness.model.classify import DTYPE_NAMES

    return DTYPE_NAMES.get(str(value.dtype).removeprefix("torch."), "")


# ------------------------------------------------------------------ calling the ops


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]).contiguous()


def _call_matmul(op, x, w, bias=None):
    inputs = [_rows(x), w] if bias is None else [_rows(x), w, bias]
    return (op(inputs).view(*x.shape[:-1], w.shape[0]),)


def _call_matmul_residual(op, x, w, *rest):  # rest: [bias,] residual
    *bias, residual = rest
    return (op([_rows(x), w, *bias, _rows(residual)]).view(*x.shape[:-1], w.shape[0]),)


def _call_swiglu_gate(op, x, w_gate, w_up):
    return (op([_rows(x), w_gate, w_up]).view(*x.shape[:-1], w_gate.shape[0]),)


def _interleaved(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    return interleave(w_gate.detach(), w_up.detach())


def _qkv_interleaved(d: int, *parts: torch.Tensor) -> torch.Tensor:
    """q's, k's and v's weights (or biases) as the "i8" layouts' one tensor."""
    return qkv_op.interleave_heads(torch.cat([t.detach() for t in parts]), d)


def _norm_folded(norm_weight: torch.Tensor, make: Callable, *weights: torch.Tensor):
    """`make`'s one weight from `weights` with an RMSNorm's weight folded in: column k of each
    times g[k], in float32, rounded once (the "+rowscale" layouts)."""
    g = norm_weight.detach().float()
    return make(*((w.detach().float() * g).to(w.dtype) for w in weights))


def _qkv_concatenated(*parts: torch.Tensor) -> torch.Tensor:
    """q's, k's and v's weights as the "pairs" layouts' one matrix (no interleave)."""
    return torch.cat([t.detach() for t in parts])


def _call_swiglu_gate_interleaved(op, x, w):
    return (op([_rows(x), w]).view(*x.shape[:-1], w.shape[0] // 2),)


def _call_swiglu_gate_folded(eps: float, op, h, w):
    """The folded norm's input h, its row scale (traced here, outside the kernel's op, so that
    Inductor fuses it into the kernel that writes h), the folded weight."""
    rows = _rows(h)
    return (op([rows, w, rms_scale(rows, eps)]).view(*h.shape[:-1], w.shape[0] // 2),)


@dataclass(frozen=True)
class Prepared:
    """A constant input made from the model's weights only when a kernel takes the site's
    place (rewrite), not while sites are merely found: swiglu_gate's interleaved weight, a
    copy of two (N, K) matrices. Read once, at substitution: the model's weights are taken
    as constant from then on, as a compiled model's are."""

    make: Callable[[], torch.Tensor]


def _qkv_call(
    q_shape,
    k_shape,
    v_shape,
    *,
    transposed: bool = False,
    computed: bool = False,
    one_weight: bool = False,
    norm_eps: float | None = None,
):
    """The qkv_rotary call for one site: q and k as the rotations returned them (views of the
    op's output: (b, t, heads, D), or (b, heads, t, D) when the model rotated them transposed),
    v as its linear returned it. `computed`: cos and sin come as the model computed them in
    forward, and become the op's per-token rows here, at each call. `one_weight`: the "i8" and
    "pairs" layouts' one weight (and bias) in place of three. `norm_eps`: x is a folded RMSNorm's
    input (the "+rowscale" layouts), whose row scale the call computes and passes last."""

    def token_major(shape):  # (b, heads, t, D) -> (b, t, heads, D): how the op's rows lie
        return (shape[0], shape[2], shape[1], *shape[3:]) if transposed else tuple(shape)

    def heads(value, shape):
        value = value.view(token_major(shape))
        return value.transpose(1, 2) if transposed else value

    hq = math.prod(q_shape[1:]) // (q_shape[2] if transposed else q_shape[1])
    hk = math.prod(k_shape[1:]) // (k_shape[2] if transposed else k_shape[1])

    weights = 1 if one_weight else 3

    def call(op, x, *rest):  # weights, cos, sin, then the "+bias" layouts' biases
        cos, sin = rest[weights : weights + 2]
        if computed:
            cos, sin = (rotation.per_token_rows(t, q_shape, transposed) for t in (cos, sin))
        rows = _rows(x)
        scale = [] if norm_eps is None else [rms_scale(rows, norm_eps)]
        out = op([rows, *rest[:weights], cos, sin, *rest[weights + 2 :], *scale])
        q = heads(out[:, :hq], q_shape)
        k = heads(out[:, hq : hq + hk], k_shape)
        v = out[:, hq + hk :].view(v_shape)
        return q, k, v

    return call


def _call_attention(op, q, k, v):
    inputs = [t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v)]
    return (op(inputs),)


def _module_call_fn(op_name: str, out_shape: tuple[int, ...]):
    def call(op, x, *rest):
        if op_name == "rotary":
            b_t = math.prod(x.shape[:-2])
            rows = x.reshape(b_t, *x.shape[-2:]).contiguous()
        else:
            rows = _rows(x)
        return (op([rows, *rest]).view(out_shape),)

    return call


# ------------------------------------------------------------------ finding sites


def _linears(g: _Graph) -> list[tuple[fx.Node, fx.Node, fx.Node | None, Problem]]:
    """(node, x, bias, matmul problem) of every linear whose weight is a parameter."""
    found = []
    for node in g.gm.graph.nodes:
        if not _is(node, LINEAR):
            continue
        x = node.args[0]
        w = node.args[1] if len(node.args) > 1 else node.kwargs.get("weight")
        bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
        weight = g.parameter(w)
        xs, xv = g.shape(x), g.value(x)
        if weight is None or weight.dim() != 2 or xs is None or not xs:
            continue
        if bias is not None:
            bias_weight = g.parameter(bias)
            if bias_weight is None or bias_weight.dim() != 1:
                continue
        n, k = weight.shape
        dtype = _dtype_name(xv)
        layout = matmul_layout("NT+bias" if bias is not None else "NT", dtype, allows_tf32())
        problem, _ = validated("matmul", (math.prod(xs[:-1]), n, k), dtype, layout)
        if problem is not None:
            found.append((node, x, bias, problem))
    return found


def _where(node: fx.Node) -> str:
    call = _module_call(node)
    return call[1] if call else ""


def _matmul_sites(linears) -> list[Site]:
    sites = []
    for node, x, bias, problem in linears:
        w = node.args[1] if len(node.args) > 1 else node.kwargs["weight"]
        inputs = (x, w) if bias is None else (x, w, bias)
        sites.append(
            Site(
                "matmul",
                problem,
                (_where(node),),
                (problem.key,),
                inputs,
                (node,),
                frozenset({node}),
                _call_matmul,
            )
        )
    return sites


def _activation(node: fx.Node) -> str | None:
    """The matmul epilogue's name for an activation node ("relu", "silu", "gelu": tanh form,
    "gelu_erf": exact), or None."""
    if node.kwargs.get("inplace", False):
        return None
    if _is(node, RELU, ("relu",)):
        return "relu"
    if _is(node, SILU, ("silu",)):
        return "silu"
    if _is(node, GELU):
        return {"tanh": "gelu", "none": "gelu_erf"}.get(_arg(node, 1, "approximate", "none"))
    return None


def _fused_linear(
    kind: str, node, x, bias, problem: Problem, part: str, end, extra=(), call=_call_matmul
):
    """One Linear (node) and the node `end` that is its only use as one matmul problem, whose
    layout adds `part` to the Linear's ("NT+bias" -> "NT+bias+gelu"); None where the op takes
    no such problem. `extra`: inputs after the Linear's own (x, w[, bias])."""
    tf32 = TF32 if is_tf32(problem.layout) else ""
    layout = f"{problem.layout.removesuffix(TF32)}+{part}{tf32}"  # NT+bias+gelu[+tf32]
    fused, _ = validated("matmul", problem.shape, problem.dtype, layout)
    if fused is None:
        return None
    w = node.args[1] if len(node.args) > 1 else node.kwargs["weight"]
    inputs = (x, w) + ((bias,) if bias is not None else ()) + tuple(extra)
    where = (_where(node),)
    return Site(kind, fused, where, (problem.key,), inputs, (end,), frozenset({node, end}), call)


def _epilogue_sites(linears) -> list[Site]:
    """A biased Linear whose only use is an activation: one GEMM with both in its epilogue
    (a matmul problem "NT+bias+<act>"), instead of a GEMM and a pass over its output."""
    sites = []
    for node, x, bias, problem in linears:
        act = _only_user(node)
        if bias is None or act is None or act.args[:1] != (node,):
            continue
        name = _activation(act)
        if name is not None and (
            site := _fused_linear("matmul_epilogue", node, x, bias, problem, name, act)
        ):
            sites.append(site)
    return sites


def _residual_sites(g: _Graph, linears) -> list[Site]:
    """A Linear whose only use is an add of a tensor of its own shape and dtype: one GEMM
    that writes the sum (a matmul problem "NT[+bias]+res"), where PyTorch writes the product
    and a second pass reads it back. An add that broadcasts, scales (alpha) or works in
    place is left as it is, and so is a decode step's (at most SMALL_M rows): its add is a
    few rows that Inductor fuses into the next norm, and a "+res" problem would shut out the
    split-K families that stream such a GEMM's weights (matmul_weight_stream alone adds it)."""
    sites = []
    for node, x, bias, problem in linears:
        if problem.shape[0] <= SMALL_M:
            continue
        add = _only_user(node)
        if add is None or not _is(add, ADD, ("add",)) or len(add.args) != 2 or add.kwargs:
            continue
        other = add.args[1] if add.args[0] is node else add.args[0]
        if other is node or not isinstance(other, fx.Node):
            continue
        mine, theirs = g.value(node), g.value(other)
        if (
            not isinstance(theirs, torch.Tensor)
            or g.shape(other) is None
            or g.shape(other) != g.shape(node)
            or theirs.dtype != mine.dtype
        ):
            continue
        site = _fused_linear(
            "matmul_residual", node, x, bias, problem, "res", add, (other,), _call_matmul_residual
        )
        if site is not None:
            sites.append(site)
    return sites


@dataclass(frozen=True)
class _FoldedNorm:
    """An RMSNorm module call that a GEMM after it takes in (layout i8+rowscale)."""

    path: str
    x: fx.Node  # the norm's input
    weight: torch.Tensor
    eps: float
    nodes: frozenset


def _norm_eps(problem: Problem) -> float:
    norm = kernels.get_op("rmsnorm")
    assert isinstance(norm, NormOp)
    return norm.eps(problem)


def _foldable_norm(g: _Graph, x, linears: tuple, regions: list[_Region]) -> _FoldedNorm | None:
    """The RMSNorm module call whose output x is, where nothing but `linears` uses it and its
    weight and input are what the fold needs (a parameter; x's shape and dtype)."""
    for r in regions:
        if r.out is not x or r.op != "rmsnorm" or r.problem is None:
            continue
        weight = g.parameter(r.own.get("weight"))
        value, before = g.value(x), g.value(r.x)
        if (
            set(x.users) == set(linears)
            and weight is not None
            and isinstance(value, torch.Tensor)
            and isinstance(before, torch.Tensor)
            and before.dtype == value.dtype
            and g.shape(r.x) == g.shape(x)
        ):
            return _FoldedNorm(r.path, r.x, weight, _norm_eps(r.problem), r.nodes)
    return None


def _swiglu_sites(g: _Graph, linears, regions: list[_Region]) -> list[Site]:
    plain = {node: (x, problem) for node, x, bias, problem in linears if bias is None}
    sites = []
    for node in g.gm.graph.nodes:
        if not _is(node, MUL, ("mul",)) or len(node.args) != 2:
            continue
        a, b = node.args
        for silu, up in ((a, b), (b, a)):
            if not (_is(silu, SILU, ("silu",)) and up in plain and _only_user(up) is node):
                continue
            gate = silu.args[0]
            if (
                gate not in plain
                or not isinstance(gate, fx.Node)
                or _only_user(silu) is not node
                or _only_user(gate) is not silu
            ):
                continue
            (xg, pg), (xu, pu) = plain[gate], plain[up]
            if xg is not xu or pg.shape != pu.shape or pg.dtype != pu.dtype:
                continue
            w_gate, w_up = g.parameter(gate.args[1]), g.parameter(up.args[1])
            inputs: tuple
            call: Callable
            taken = frozenset({node, silu, gate, up})
            norm = None
            if w_gate is not None and w_up is not None and pg.shape[1] % INTERLEAVE_GROUP == 0:
                # Constant weights: one interleaved (2N, K) matrix, which the CUTLASS family
                # gates in one GEMM (kernels/ops/swiglu_gate, layout i8), with the RMSNorm
                # before them folded in where there is one (i8+rowscale).
                norm = _foldable_norm(g, xg, (gate, up), regions)
                if norm is None:
                    problem, _ = validated("swiglu_gate", pg.shape, pg.dtype, INTERLEAVED)
                    weights = Prepared(partial(_interleaved, w_gate, w_up))
                    inputs, call = (xg, weights), _call_swiglu_gate_interleaved
                else:
                    problem, _ = validated("swiglu_gate", pg.shape, pg.dtype, ROW_SCALE)
                    weights = Prepared(partial(_norm_folded, norm.weight, interleave, w_gate, w_up))
                    inputs = (norm.x, weights)
                    call = partial(_call_swiglu_gate_folded, norm.eps)
                    taken |= norm.nodes
            else:
                problem, _ = validated("swiglu_gate", pg.shape, pg.dtype)
                inputs, call = (xg, gate.args[1], up.args[1]), _call_swiglu_gate
            if problem is None:
                continue
            sites.append(
                Site(
                    "swiglu_gate",
                    problem,
                    (_where(gate), _where(up), *([norm.path] if norm is not None else [])),
                    (pg.key, pu.key),
                    inputs,
                    (node,),
                    taken,
                    call,
                )
            )
            break
    return sites


def _module_regions(g: _Graph) -> dict[str, tuple[str, list[fx.Node]]]:
    """call key -> (module path, its nodes in graph order), innermost module calls only."""
    regions: dict[str, tuple[str, list[fx.Node]]] = {}
    for node in g.gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        call = _module_call(node)
        if call is not None:
            regions.setdefault(call[0], (call[1], []))[1].append(node)
    return regions


@dataclass
class _Region:
    path: str
    module: torch.nn.Module
    op: str
    problem: Problem | None
    x: fx.Node  # the one activation that enters
    out: fx.Node  # the one node used outside
    nodes: frozenset
    own: dict[str, fx.Node]  # the module's own parameters/buffers used, by name


def _region(g: _Graph, path: str, nodes: list[fx.Node]) -> _Region | None:
    try:
        module = g.model.get_submodule(path)
    except AttributeError:
        return None
    members = frozenset(nodes)
    own_tensors = {
        id(t): name
        for name, t in [
            *module.named_parameters(recurse=False),
            *module.named_buffers(recurse=False),
        ]
    }
    entering: list[fx.Node] = []
    own: dict[str, fx.Node] = {}
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg in members:
                continue
            value = g.value(arg)
            name = own_tensors.get(id(value)) if arg.op in ("placeholder", "get_attr") else None
            if name is not None:
                own[name] = arg
            elif arg not in entering:
                entering.append(arg)
    leaving = [n for n in nodes if any(u not in members for u in n.users)]
    if len(entering) != 1 or len(leaving) != 1:
        return None
    x_value = g.value(entering[0])
    if not isinstance(x_value, torch.Tensor) or g.shape(entering[0]) is None:
        return None
    found = problem_for_module(describe(module, x_value))
    if found is None:
        return None
    op, problem, _note = found
    return _Region(path, module, op, problem, entering[0], leaving[0], members, own)


def _per_token(table: torch.Tensor, batch: int) -> torch.Tensor:
    """A rotary module's (seq, D/2) table as the ops' per-token (batch*seq, D/2) rows."""
    return table if batch == 1 else table.repeat(batch, 1)


def _rotary_tables(g: _Graph, region: _Region, batch: int) -> tuple | None:
    cos, sin = getattr(region.module, "cos", None), getattr(region.module, "sin", None)
    if not isinstance(cos, torch.Tensor) or not isinstance(sin, torch.Tensor):
        return None
    if batch == 1 and {"cos", "sin"} <= set(region.own):
        return region.own["cos"], region.own["sin"]
    return _per_token(cos, batch).contiguous(), _per_token(sin, batch).contiguous()


def _module_sites(g: _Graph, regions: list[_Region]) -> list[Site]:
    sites = []
    for r in regions:
        if r.problem is None or r.op not in ("rmsnorm", "layernorm", "softmax", "rotary"):
            continue
        out_shape = g.shape(r.out)
        if out_shape is None:
            continue
        if r.op == "rotary":
            xs = g.shape(r.x)
            if xs is None:  # never: a region's input has a static shape (_region)
                continue
            tables = _rotary_tables(g, r, math.prod(xs[:-3]) if len(xs) > 3 else 1)
            if tables is None:
                continue
            inputs = (r.x, *tables)
        else:
            names = {"rmsnorm": ("weight",), "layernorm": ("weight", "bias"), "softmax": ()}
            if not set(names[r.op]) <= set(r.own):
                continue
            inputs = (r.x, *(r.own[n] for n in names[r.op]))
        sites.append(
            Site(
                "module",
                r.problem,
                (r.path,),
                (),
                inputs,
                (r.out,),
                r.nodes,
                _module_call_fn(r.op, out_shape),
            )
        )
    return sites


def _module_rotation(g: _Graph, view: fx.Node, region: _Region, m: int) -> Rotation | None:
    """A rotary module's region (cos and sin buffers, classify.problem_for_module) as the
    rotation of `view`, with its tables per token."""
    if not all(u in region.nodes for u in view.users):
        return None
    seq = region.module.get_buffer("cos").shape[0]
    tables = _rotary_tables(g, region, m // seq) if m % seq == 0 else None
    if tables is None:
        return None
    cos, sin = tables
    return Rotation(view, region.out, region.nodes, cos, sin, transposed=False)


def _rotation_of(g: _Graph, view: fx.Node, modules: dict, m: int) -> Rotation | None:
    """How a projection's (b, t, heads, D) view is rotated: by a rotary module, or written out
    (rotation.py) on the view or on its transpose to (b, heads, t, D); None: it is not."""
    if view in modules:
        return _module_rotation(g, view, modules[view], m)
    after = _only_user(view)
    swaps_t_and_heads = (
        after is not None
        and _is(after, {torch.transpose}, ("transpose",))
        and tuple(after.args[1:3]) in ((1, 2), (2, 1))
    )
    if swaps_t_and_heads and after is not None:
        return rotation.find(g, after, transposed=True)
    return rotation.find(g, view, transposed=False)


def _same(a, b) -> bool:
    """Two rotations' tables: the same graph input, or equal constants."""
    if a is b:
        return True
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)


def _qkv_sites(g: _Graph, linears, regions: list[_Region]) -> list[Site]:
    modules = {r.x: r for r in regions if r.op == "rotary" and r.problem is not None}
    by_x: dict[fx.Node, list] = {}
    bias_of: dict[fx.Node, fx.Node | None] = {}
    for node, x, bias, problem in linears:
        by_x.setdefault(x, []).append((node, problem))
        bias_of[node] = bias
    sites = []
    for x, group in by_x.items():
        # (linear, view, its shape, rotation, problem): rotated; (linear, view, shape, problem): not
        heads: list[tuple[fx.Node, fx.Node, tuple[int, ...], Rotation, Problem]] = []
        plain: list[tuple[fx.Node, fx.Node, tuple[int, ...], Problem]] = []
        for lin, problem in group:
            view = _only_user(lin)
            shape = g.shape(view) if _is(view, RESHAPE_FNS, RESHAPE_METHODS) else None
            if view is None or shape is None or len(shape) < 3:
                continue
            rotated = _rotation_of(g, view, modules, problem.shape[0])
            if rotated is not None:
                heads.append((lin, view, shape, rotated, problem))
            elif view not in modules:
                plain.append((lin, view, shape, problem))
        if len(heads) != 2:
            continue
        # q has at least as many heads as k (grouped-query attention); v is shaped like k.
        heads.sort(key=lambda h: -h[4].shape[1])
        (q_lin, q_view, q_view_shape, q_rot, pq), (k_lin, k_view, k_view_shape, k_rot, pk) = heads
        d = q_view_shape[-1]
        vs = [p for p in plain if p[3].shape == pk.shape and p[2][-1] == d]
        if len(vs) != 1 or k_view_shape[-1] != d or d % 2:
            continue
        v_lin, _v_view, _v_shape, pv = vs[0]
        # Biased q/k/v projections (Qwen2) take the op's "+bias" layout; all three or none.
        biases = [bias_of[lin] for lin in (q_lin, k_lin, v_lin)]
        if any(b is None for b in biases) and any(b is not None for b in biases):
            continue
        biased = biases[0] is not None
        bias_inputs = tuple(biases) if biased else ()
        same = _same(q_rot.cos, k_rot.cos) and _same(q_rot.sin, k_rot.sin)
        how = (q_rot.transposed, q_rot.computed, q_rot.form, q_rot.rotary_dim)
        if not same or how != (k_rot.transposed, k_rot.computed, k_rot.form, k_rot.rotary_dim):
            continue
        m, n_q, k = pq.shape
        shape = (m, n_q // d, pk.shape[1] // d, d, k)
        q_shape, k_shape = g.shape(q_rot.out), g.shape(k_rot.out)
        if q_shape is None or k_shape is None:
            continue
        params = [g.parameter(n) for n in (q_lin.args[1], k_lin.args[1], v_lin.args[1])]
        params += [g.parameter(b) for b in bias_inputs]
        tensors = [t for t in params if t is not None]
        constant = len(tensors) == len(params) and m > SMALL_M
        pairs = q_rot.form == "pairs"
        if pairs and (biased or not constant):
            continue  # GPT-J's form: one GEMM over constant, unbiased weights only
        interleaved = constant and not pairs and d % (2 * qkv_op.GROUP) == 0
        inputs: tuple
        norm: _FoldedNorm | None = None
        if pairs:
            # GPT-J's adjacent pairs: the three weights one after the other, as they are.
            layout = qkv_op.pairs_layout(q_rot.rotary_dim, d, shape[2])
            w_cat = Prepared(partial(_qkv_concatenated, *tensors[:3]))
            inputs = (x, w_cat, q_rot.cos, q_rot.sin)
        elif interleaved:
            # Prefill with constant weights: one interleaved (N, K) matrix (and bias), which the
            # CUTLASS family rotates in one GEMM (kernels/ops/qkv_rotary, layouts "i8"), with
            # the RMSNorm before them folded in where there is one ("+rowscale"). A few rows
            # (decode) keep the three weights, which the dual family streams.
            norm = _foldable_norm(g, x, (q_lin, k_lin, v_lin), regions)
            layout = qkv_op.interleaved_layout(shape[2], bias=biased, rowscale=norm is not None)
            make = partial(_qkv_interleaved, d)
            if norm is None:
                w_i8 = Prepared(partial(make, *tensors[:3]))
            else:
                w_i8 = Prepared(partial(_norm_folded, norm.weight, make, *tensors[:3]))
            b_i8 = (Prepared(partial(make, *tensors[3:])),) if biased else ()
            inputs = (x if norm is None else norm.x, w_i8, q_rot.cos, q_rot.sin, *b_i8)
        else:
            layout = BIAS if biased else ""
            inputs = (x, q_lin.args[1], k_lin.args[1], v_lin.args[1], q_rot.cos, q_rot.sin)
            inputs += bias_inputs
        problem, _ = validated("qkv_rotary", shape, pq.dtype, layout)
        if problem is None:
            continue
        call = _qkv_call(
            q_shape,
            k_shape,
            g.shape(v_lin),
            transposed=q_rot.transposed,
            computed=q_rot.computed,
            one_weight=interleaved or pairs,
            norm_eps=None if norm is None else norm.eps,
        )
        nodes = frozenset({q_lin, k_lin, v_lin, q_view, k_view}) | q_rot.nodes | k_rot.nodes
        sites.append(
            Site(
                "qkv_rotary",
                problem,
                (_where(q_lin), _where(k_lin), _where(v_lin), *([norm.path] if norm else [])),
                (pq.key, pk.key, pv.key),
                inputs,
                (q_rot.out, k_rot.out, v_lin),
                nodes if norm is None else nodes | norm.nodes,
                call,
            )
        )
    return sites


def _arg(node: fx.Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


REPEAT_INTERLEAVE = {torch.repeat_interleave}
ALL = slice(None, None, None)


@dataclass(frozen=True)
class _Cached:
    """k or v of an attention as the cache holds it, and the nodes that repeated its heads for
    the query heads (the rewrite drops them with the attention)."""

    node: Any
    repeats: frozenset = frozenset()


def _cached(g: _Graph, node) -> _Cached | None:
    """What SDPA's k or v is before any grouped-query repeat of its heads (dim 1):
    x.repeat_interleave(n, dim=1), torch.repeat_interleave(x, n, dim=1), or HF's repeat_kv,
    x[:, :, None].expand(b, hkv, n, s, d).reshape(b, hkv * n, s, d)."""
    shape = g.shape(node)
    if shape is None or len(shape) != 4:
        return None
    if _is(node, REPEAT_INTERLEAVE, ("repeat_interleave",)):
        source = _arg(node, 0, "input")
        repeats, dim = _arg(node, 1, "repeats"), _arg(node, 2, "dim")
        inner = g.shape(source)
        if isinstance(repeats, int) and dim in (1, -3) and inner and inner[1] * repeats == shape[1]:
            return _Cached(source, frozenset({node}))
    if (repeated := _repeat_kv(g, node, shape)) is not None:
        return repeated
    return _Cached(node)


def _repeat_kv(g: _Graph, node: fx.Node, shape: tuple[int, ...]) -> _Cached | None:
    """HF's repeat_kv: x[:, :, None] (or x.unsqueeze(2)), .expand(b, hkv, n, s, d), then
    .reshape(b, hkv * n, s, d); each step used only by the next."""
    if not _is(node, RESHAPE_FNS, RESHAPE_METHODS):
        return None
    expand = node.args[0]
    if not isinstance(expand, fx.Node) or not _is(expand, set(), ("expand",)):
        return None
    spread = expand.args[0]
    if not isinstance(spread, fx.Node) or _only_user(expand) is not node:
        return None
    new_axis = (
        _is(spread, {operator.getitem})
        and spread.args[1] in ((ALL, ALL, None), (ALL, ALL, None, ALL, ALL))
    ) or (_is(spread, {torch.unsqueeze}, ("unsqueeze",)) and _arg(spread, 1, "dim") in (2, -3))
    if not new_axis or _only_user(spread) is not expand:
        return None
    source, grouped = spread.args[0], g.shape(expand)
    if g.shape(source) is None or grouped is None or len(grouped) != 5:
        return None
    b, hkv, n, s, d = grouped
    if (b, hkv * n, s, d) != shape:
        return None
    return _Cached(source, frozenset({node, expand, spread}))


@dataclass(frozen=True)
class _Attention:
    """An SDPA call without dropout or a scale of its own: q (b, h, t, d) against the keys
    and values as they were before any grouped-query repeat, (b, hkv, s, d)."""

    node: fx.Node
    q: Any
    k: _Cached
    v: _Cached
    shape: tuple[int, int, int, int, int]  # b, h, t, s, d
    kv_heads: int
    mask: Any
    causal: bool

    @property
    def nodes(self) -> frozenset:
        return frozenset({self.node}) | self.k.repeats | self.v.repeats


def _attentions(g: _Graph) -> list[_Attention]:
    """Every SDPA call whose k and v are grouped one way (SDPA's enable_gqa, or both repeated
    before it) or not at all."""
    found = []
    for node in g.gm.graph.nodes:
        if not _is(node, SDPA):
            continue
        q, k, v = (_arg(node, i, n) for i, n in enumerate(("query", "key", "value")))
        causal = _arg(node, 5, "is_causal", False)
        plain = (
            _arg(node, 4, "dropout_p", 0.0) == 0.0
            and isinstance(causal, bool)  # not a value computed in the graph
            and node.kwargs.get("scale") is None
        )
        qs, kc, vc = g.shape(q), _cached(g, k), _cached(g, v)
        if not plain or qs is None or kc is None or vc is None or len(qs) != 4:
            continue
        ks = g.shape(kc.node)
        if ks is None or ks != g.shape(vc.node) or len(ks) != 4:
            continue
        (b, h, t, d), (kb, hkv, s_keys, kd) = qs, ks
        if (kb, kd) != (b, d) or t > s_keys or h % hkv:
            continue
        # Fewer key/value heads: SDPA groups them (enable_gqa), or both were repeated for it.
        by_sdpa = bool(node.kwargs.get("enable_gqa", False))
        repeated = bool(kc.repeats) and bool(vc.repeats)
        if (kc.repeats or vc.repeats) and (by_sdpa or not repeated):
            continue
        if hkv != h and not (by_sdpa or repeated):
            continue
        found.append(
            _Attention(
                node, q, kc, vc, (b, h, t, s_keys, d), hkv, _arg(node, 3, "attn_mask"), causal
            )
        )
    return found


def _attention_site(
    kind: str, att: _Attention, problem: Problem | None, baseline_saves: str = ""
) -> Site | None:
    if problem is None:
        return None
    return Site(
        kind,
        problem,
        (_where(att.node),),
        (),
        (att.q, att.k.node, att.v.node),
        (att.node,),
        att.nodes,
        _call_attention,
        baseline_saves,
    )


def _decode_attention_sites(g: _Graph) -> list[Site]:
    from kernels.ops.decode_attention.op import causal_from_end, layout_for

    sites = []
    for att in _attentions(g):
        b, h, t, s_keys, d = att.shape
        if att.causal:  # SDPA's is_causal is aligned at the top left: not a cache's mask
            continue
        if att.mask is None:
            if t != 1:
                continue
        else:
            value = g.constant(att.mask)
            if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
                continue
            if value.dim() < 2 or value.shape[-2:] != (t, s_keys) or value.numel() != t * s_keys:
                continue
            if not torch.equal(value.reshape(t, s_keys).cpu(), causal_from_end(t, s_keys)):
                continue
        problem, _ = validated(
            "decode_attention",
            (b, h, t, s_keys, d),
            _dtype_name(g.value(att.q)),
            layout_for(h, att.kv_heads),
        )
        if (site := _attention_site("decode_attention", att, problem)) is not None:
            sites.append(site)
    return sites


def _prefill_attention_sites(g: _Graph) -> list[Site]:
    """Every query against every key of its own sequence: is_causal=True (a decoder's prefill)
    or no mask at all (an encoder's), more than one query (one is a decode step's)."""
    from kernels.ops.attention.op import layout_for

    sites = []
    for att in _attentions(g):
        b, h, t, s_keys, d = att.shape
        if att.mask is not None or t != s_keys or t == 1:
            continue
        problem, _ = validated(
            "attention",
            (b, h, t, d),
            _dtype_name(g.value(att.q)),
            layout_for(att.causal, h, att.kv_heads),
        )
        # The op's baseline is SDPA grouping the heads itself (enable_gqa), which reads each
        # key/value head once; the model's repeats copy k and v first.
        saves = (
            f"the copies of k and v repeated {h // att.kv_heads}x for SDPA (SDPA groups the "
            "heads itself: enable_gqa=True)"
            if att.k.repeats
            else ""
        )
        if (site := _attention_site("attention", att, problem, saves)) is not None:
            sites.append(site)
    return sites


def find_sites(gm: fx.GraphModule, example_inputs, model: torch.nn.Module) -> list[Site]:
    """Every site in one captured graph; fusions first, then single layers and modules."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    g = _Graph(gm, model, dict(zip(placeholders, example_inputs, strict=False)))
    linears = _linears(g)
    regions = [
        r
        for path, nodes in _module_regions(g).values()
        if (r := _region(g, path, nodes)) is not None
    ]
    return [
        *_swiglu_sites(g, linears, regions),
        *_qkv_sites(g, linears, regions),
        *_decode_attention_sites(g),
        *_prefill_attention_sites(g),
        *_epilogue_sites(linears),
        *_residual_sites(g, linears),
        *_matmul_sites(linears),
        *_module_sites(g, regions),
    ]


# ------------------------------------------------------------------ rewriting


def rewrite(gm: fx.GraphModule, sites: list[Site], ops: Mapping[str, Callable]) -> list[Site]:
    """Replace each site whose problem key has an op in `ops`, in order, skipping sites whose
    nodes an earlier one took; returns the sites replaced. Recompiles `gm`."""
    graph = gm.graph
    taken: set[fx.Node] = set()
    done: list[Site] = []
    now: dict[fx.Node, fx.Node] = {}  # a replaced output -> the node that holds its value
    for i, site in enumerate(sites):
        op = ops.get(site.key)
        if op is None or site.call is None or site.nodes & taken:
            continue
        args = []
        constants: list[tuple[str, fx.Node]] = []
        for j, value in enumerate(site.inputs):
            if isinstance(value, Prepared):
                value = value.make()
            if isinstance(value, torch.Tensor):  # a constant the op needs (rotary tables)
                name = f"_kf_const_{i}_{j}"
                _add_constant(gm, name, value)
                with graph.inserting_before(_first(graph, site.nodes)):
                    value = graph.get_attr(name)
                constants.append((name, value))
            args.append(now.get(value, value) if isinstance(value, fx.Node) else value)

        def call(*values, _op=op, _site=site):
            return _site.call(_op, *values)

        call.__name__ = f"kf_{site.kind}_{i}"
        # Right after its last input: before any user of what it replaces, even one that comes
        # before the site's last node (v's cache write ahead of k's rotary, in qkv_rotary).
        order = {n: i for i, n in enumerate(graph.nodes)}
        last = max((a for a in args if isinstance(a, fx.Node)), key=order.__getitem__)
        if last.op == "placeholder":  # the graph's inputs stay together at its top
            last = [n for n in graph.nodes if n.op == "placeholder"][-1]
        if any(
            order[user] <= order[last]
            for old in site.outputs
            for user in old.users
            if user not in site.nodes
        ):
            # An input computed after a use of what the op replaces (rotary tables computed
            # in forward after v's view): moving that use could move it past a cache write.
            for name, node in constants:
                graph.erase_node(node)
                _drop_constant(gm, name)
            continue
        with graph.inserting_after(last):
            result = graph.call_function(call, tuple(args))
        anchor = result
        for k, old in enumerate(site.outputs):
            with graph.inserting_after(anchor):
                new = graph.call_function(operator.getitem, (result, k))
            old.replace_all_uses_with(new)
            now[old] = new
            anchor = new
        for node in reversed([n for n in graph.nodes if n in site.nodes]):
            if not node.users:
                graph.erase_node(node)
        taken |= site.nodes
        done.append(site)
    graph.lint()
    gm.recompile()
    return done


def _add_constant(gm: fx.GraphModule, name: str, value: torch.Tensor) -> None:
    """A buffer of `gm`, and, in a graph Dynamo captured, the source AOTAutograd asks of each
    buffer it lifts (`_param_name_to_source`: Inductor, i.e. the kernels + torch.compile way,
    stops at one it lacks). Dynamo's own passes that change a graph (the DDP optimizer) carry
    that metadata the same way."""
    gm.register_buffer(name, value, persistent=False)
    sources = getattr(gm, "_param_name_to_source", None)
    if sources is not None:
        from torch._dynamo.source import ConstantSource

        sources[name] = ConstantSource(name)


def _drop_constant(gm: fx.GraphModule, name: str) -> None:
    delattr(gm, name)
    getattr(gm, "_param_name_to_source", {}).pop(name, None)


def _first(graph: fx.Graph, nodes) -> fx.Node:
    return next(n for n in graph.nodes if n in nodes)
