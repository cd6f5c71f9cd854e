"""Rotary embedding written out in a model's forward, not as a module of its own:

    q * cos + cat([-q[..., D/2:], q[..., :D/2]], dim=-1) * sin

(rotate-half, as HF's Llama and Qwen2, GPT-NeoX and many hand-written layers spell it), or

    cat([q[..., :R] * cos + rotate_every_two(q[..., :R]) * sin, q[..., R:]], dim=-1)

with rotate_every_two(t) = stack((-t[..., 1::2], t[..., ::2]), dim=-1).flatten(-2) (GPT-J's
partial rotary of adjacent pairs; R = D without the cat). A
rotation is a qkv_rotary candidate (sites.py) when cos and sin have the rotate-half form: the
same for every head, each half of the head dim equal to the other. Either they are the model's
own tables (buffers, or slices of them), checked by value and turned into the op's per-token
(M, D/2) tables here; or they are computed in forward (from position ids, as HF's rotary
embedding does) by elementwise steps from cat([f, f], dim=-1), which makes the halves equal for
any input, with a heads axis of size 1; those are turned into per-token tables at each call.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from harness.model.graph_ops import ADD, MUL
from harness.model.graph_ops import calls as _call

NEG = {operator.neg, torch.neg, torch.Tensor.neg}
CAT = {torch.cat, torch.concat}


@dataclass(frozen=True)
class Rotation:
    x: fx.Node  # what is rotated: a projection's (b, t, heads, D) view, or its transpose
    out: fx.Node  # the rotated value
    nodes: frozenset  # every node of the rotation, x included
    # Per token, (b*t, D/2), in token order: a constant, or the graph input that holds one (a
    # rotary module's own buffer, when it already is per token). `computed`: the node of the
    # model's own table as it broadcasts over x, made per token at each call.
    cos: torch.Tensor | fx.Node
    sin: torch.Tensor | fx.Node
    transposed: bool  # x is the view transposed to (b, heads, t, D)
    computed: bool = False  # cos/sin are computed in forward: per_token_rows at each call
    # "half": rotate-half, tables (b*t, D/2); "pairs": GPT-J's adjacent pairs of the first
    # `rotary_dim` dims, tables (b*t, rotary_dim/2) (the model's own constants only).
    form: str = "half"
    rotary_dim: int = 0


def _half_of(node: Any, x: fx.Node, half: int) -> str:
    """'lo' or 'hi' when node is x[..., :half] or x[..., half:], else ''."""
    if not (_call(node, {operator.getitem}) and node.args[0] is x):
        return ""
    index = node.args[1]
    if not (isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis):
        return ""
    s = index[1]
    if not isinstance(s, slice) or s.step not in (None, 1):
        return ""
    if s.start in (None, 0) and s.stop == half:
        return "lo"
    if s.start == half and s.stop is None:
        return "hi"
    return ""


def _rotated_half(cat: Any, d: int) -> fx.Node | None:
    """x when cat is cat([-x[..., D/2:], x[..., :D/2]], dim=-1), else None."""
    if not _call(cat, CAT):
        return None
    parts = cat.args[0] if cat.args else cat.kwargs.get("tensors")
    dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
    if not isinstance(parts, list | tuple) or len(parts) != 2 or dim not in (-1, 3):
        return None
    neg, lo = parts
    if not _call(neg, NEG, ("neg",)) or not isinstance(lo, fx.Node) or not lo.args:
        return None
    x = lo.args[0]
    hi = neg.args[0]
    if not isinstance(x, fx.Node):
        return None
    if _half_of(lo, x, d // 2) != "lo" or _half_of(hi, x, d // 2) != "hi":
        return None
    return x


def _operands(mul: Any) -> tuple[Any, Any] | None:
    if not _call(mul, MUL, ("mul",)) or len(mul.args) != 2:
        return None
    return mul.args[0], mul.args[1]


def per_token_rows(table: torch.Tensor, shape, transposed: bool) -> torch.Tensor:
    """A rotate-half cos or sin table, broadcast over x of `shape`, as the op's per-token
    (b*t, D/2) rows: the first head's, first half."""
    full = torch.broadcast_to(table, tuple(shape))
    if transposed:  # (b, heads, t, D) -> token order (b, t, heads, D)
        full = full.transpose(1, 2)
    return full[:, :, 0, : shape[-1] // 2].reshape(-1, shape[-1] // 2).contiguous()


def _tables(
    table: torch.Tensor, shape: tuple[int, ...], transposed: bool, form: str = "half"
) -> torch.Tensor | None:
    """A constant cos or sin table as per-token (b*t, D/2) rows, or None when it is not the
    form's: different for some head, or its values unequal where the form repeats them (the
    two halves for rotate-half, each pair's two dims for GPT-J's pairs)."""
    try:
        full = torch.broadcast_to(table, shape)
    except RuntimeError:
        return None
    if transposed:  # (b, heads, t, D) -> token order (b, t, heads, D)
        full = full.transpose(1, 2)
    if not torch.equal(full, full[:, :, :1].expand_as(full)):
        return None
    half = shape[-1] // 2
    if form == "pairs":
        first, second = full[..., 0::2], full[..., 1::2]
    else:
        first, second = full[..., :half], full[..., half:]
    if not torch.equal(first, second):
        return None
    return first[:, :, 0].reshape(-1, half).contiguous()


ELEMENTWISE_FNS = {torch.cos, torch.sin}
ELEMENTWISE_METHODS = ("cos", "sin", "float", "half", "bfloat16", "contiguous", "to")
SCALE = {operator.mul, operator.truediv, torch.mul, torch.Tensor.mul}


def _computed_in_forward(g: Any, node: Any, shape: tuple[int, ...], transposed: bool) -> bool:
    """node is a rotate-half table computed in forward: from cat([f, f], dim=-1) by steps that
    act on each element alone (cos, sin, a number's factor, a dtype cast) or add an axis before
    the head dim, so its halves are equal for any input; and it broadcasts over x with one
    value for every head (its heads axis has size 1)."""
    table_shape = g.shape(node)
    if table_shape is None or table_shape[-1] != shape[-1]:
        return False
    try:
        if torch.broadcast_shapes(tuple(table_shape), shape) != shape:
            return False
    except RuntimeError:
        return False
    heads_axis = (1 if transposed else 2) - len(shape)  # from the right
    if len(table_shape) >= -heads_axis and table_shape[heads_axis] != 1:
        return False
    for _ in range(16):  # a short chain of such steps, else not one of these tables
        if not isinstance(node, fx.Node) or not node.args:
            return False
        if _call(node, CAT):
            parts = node.args[0]
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
            ndim = len(g.shape(node) or ())
            return (
                isinstance(parts, list | tuple)
                and len(parts) == 2
                and parts[0] is parts[1]
                and dim in (-1, ndim - 1)
            )
        if _call(node, ELEMENTWISE_FNS, ELEMENTWISE_METHODS):
            if any(isinstance(a, fx.Node) for a in node.args[1:]):
                return False  # .to(other_tensor) and the like
            node = node.args[0]
        elif _call(node, {torch.unsqueeze}, ("unsqueeze",)):
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
            out_ndim = len(g.shape(node) or ())
            if not isinstance(dim, int) or dim in (-1, out_ndim - 1):
                return False  # an axis after the head dim would split it
            node = node.args[0]
        elif _call(node, SCALE, ("mul",)) and len(node.args) == 2:
            numbers = [a for a in node.args if isinstance(a, int | float)]
            tensors = [a for a in node.args if isinstance(a, fx.Node)]
            if len(numbers) != 1 or len(tensors) != 1:
                return False  # a table scaled by a number, nothing else
            if node.target is operator.truediv and node.args[0] is not tensors[0]:
                return False  # number / table is no scale
            node = tensors[0]
        else:
            return False
    return False


def find(g: Any, x: fx.Node, transposed: bool) -> Rotation | None:
    """The written-out rotation of x (4-D, head dim last) whose tables are the model's own,
    with no other use of x; None if there is none."""
    shape = g.shape(x)
    if shape is None or len(shape) != 4 or shape[-1] % 2:
        return None
    pairs = _find_pairs(g, x, tuple(shape), transposed)
    if pairs is not None:
        return pairs
    for x_mul in x.users:  # x * cos, whose only use is the add
        users = list(x_mul.users)
        if _operands(x_mul) is not None and len(users) == 1:
            rotation = _match(g, x, users[0], x_mul, tuple(shape), transposed)
            if rotation is not None:
                return rotation
    return None


def _match(g: Any, x: fx.Node, add: Any, x_mul: Any, shape: tuple[int, ...], transposed: bool):
    """The rotation when add = x_mul + (cat(...) * sin) with x_mul = x * cos (either order)."""
    if not _call(add, ADD, ("add",)) or len(add.args) != 2 or x_mul not in add.args:
        return None
    operands = _operands(x_mul)
    if operands is None or x not in operands:
        return None
    cos_node = operands[1] if operands[0] is x else operands[0]
    other = add.args[1] if add.args[0] is x_mul else add.args[0]
    pair = _operands(other)
    if pair is None:
        return None
    cat, sin_node = pair if _rotated_half(pair[0], shape[-1]) is x else (pair[1], pair[0])
    if _rotated_half(cat, shape[-1]) is not x:
        return None
    neg, lo = cat.args[0]
    nodes = frozenset({x, x_mul, other, cat, neg, neg.args[0], lo, add})
    inner = nodes - {add}
    if any(u not in nodes for n in inner for u in n.users):
        return None  # x, or a part of the rotation, is used elsewhere too
    cos, sin = g.constant(cos_node), g.constant(sin_node)
    if isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor):
        cos_rows, sin_rows = _tables(cos, shape, transposed), _tables(sin, shape, transposed)
        if cos_rows is None or sin_rows is None:
            return None
        return Rotation(x, add, nodes, cos_rows, sin_rows, transposed)
    computed = all(_computed_in_forward(g, t, shape, transposed) for t in (cos_node, sin_node))
    if not computed:
        return None
    return Rotation(x, add, nodes, cos_node, sin_node, transposed, computed=True)


STACK = {torch.stack}
FLATTEN = {torch.flatten}


def _slice_of(node: Any, x: Any) -> slice | None:
    """s when node is x[..., s] (one slice of the last dim), else None."""
    if not (_call(node, {operator.getitem}) and node.args[0] is x):
        return None
    index = node.args[1]
    if not (isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis):
        return None
    return index[1] if isinstance(index[1], slice) else None


def _dim(node: fx.Node) -> Any:
    """A cat's or stack's dim argument (positional or keyword; 0 when left out)."""
    return node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)


def _find_pairs(g: Any, x: fx.Node, shape: tuple[int, ...], transposed: bool):
    """GPT-J's rotation of x's first R dims (module docstring), with constant tables."""
    d = shape[-1]
    users = list(x.users)
    slices = {u: _slice_of(u, x) for u in users}
    heads = [
        u
        for u, s in slices.items()
        if s is not None and s.start in (None, 0) and s.step in (None, 1)
    ]
    rot: Any = x
    rest: Any = None
    r = d
    head = slices[heads[0]] if len(heads) == 1 else None
    if head is not None and isinstance(head.stop, int):  # x[..., :R], then x[..., R:]
        rot, r = heads[0], head.stop
        rests = [u for u, s in slices.items() if s == slice(r, None, None)]
        if len(rests) != 1 or len(users) != 2 or not 0 < r < d or r % 2:
            return None
        rest = rests[0]
    parts = {u: _slice_of(u, rot) for u in rot.users}
    evens = [u for u, s in parts.items() if s == slice(None, None, 2)]
    odds = [u for u, s in parts.items() if s == slice(1, None, 2)]
    muls = [u for u in rot.users if _operands(u) is not None and rot in u.args]
    if len(evens) != 1 or len(odds) != 1 or len(muls) != 1 or len(rot.users) != 3:
        return None
    even, odd, x_mul = evens[0], odds[0], muls[0]
    neg: Any = next(iter(odd.users), None)
    if len(odd.users) != 1 or not _call(neg, NEG, ("neg",)) or len(neg.users) != 1:
        return None
    stack: Any = next(iter(neg.users))
    items = stack.args[0] if stack.args else None
    dim = _dim(stack)
    if not _call(stack, STACK) or list(items or ()) != [neg, even] or dim not in (-1, 4):
        return None
    flat: Any = next(iter(stack.users), None)
    flat_dim = flat.args[1] if flat is not None and len(flat.args) > 1 else None
    if len(stack.users) != 1 or not _call(flat, FLATTEN, ("flatten",)) or flat_dim not in (-2, 3):
        return None
    sin_mul: Any = next(iter(flat.users), None)
    if len(flat.users) != 1 or _operands(sin_mul) is None or len(sin_mul.users) != 1:
        return None
    add: Any = next(iter(sin_mul.users))
    if not _call(add, ADD, ("add",)) or set(add.args) != {x_mul, sin_mul} or len(x_mul.users) != 1:
        return None
    out = add
    nodes = {x, rot, even, odd, neg, stack, flat, sin_mul, x_mul, add}
    if rest is not None:
        cat: Any = next(iter(add.users), None)
        cat_dim = None if cat is None else _dim(cat)
        if len(add.users) != 1 or not _call(cat, CAT) or cat_dim not in (-1, 3):
            return None
        if list(cat.args[0]) != [add, rest]:
            return None
        out = cat
        nodes |= {rest, cat}
    if any(u not in nodes for n in nodes - {out} for u in n.users):
        return None  # a part of the rotation is used elsewhere too
    cos_node = next(a for a in x_mul.args if a is not rot)
    sin_node = next(a for a in sin_mul.args if a is not flat)
    cos, sin = g.constant(cos_node), g.constant(sin_node)
    if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor)):
        return None
    part = (*shape[:-1], r)
    cos_rows = _tables(cos, part, transposed, "pairs")
    sin_rows = _tables(sin, part, transposed, "pairs")
    if cos_rows is None or sin_rows is None:
        return None
    return Rotation(
        x, out, frozenset(nodes), cos_rows, sin_rows, transposed, form="pairs", rotary_dim=r
    )
