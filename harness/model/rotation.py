"""Rotary embedding written out in a model's forward, not as a module of its own:

    q * cos + cat([-q[..., D/2:], q[..., :D/2]], dim=-1) * sin

(rotate-half, as Qwen2's, GPT-NeoX's and many hand-written layers spell it). A rotation is a
qkv_rotary candidate (sites.py) when cos and sin are the model's own tables (buffers, or slices
of them) in the rotate-half form: the same for every head, each half of the head dim equal to
the other. Then they become the op's per-token (M, D/2) tables. Tables computed at run time
(from position ids) are not taken yet: their form cannot be checked here.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

ADD = {operator.add, torch.add, torch.Tensor.add}
MUL = {operator.mul, torch.mul, torch.Tensor.mul}
NEG = {operator.neg, torch.neg, torch.Tensor.neg}
CAT = {torch.cat, torch.concat}


@dataclass(frozen=True)
class Rotation:
    x: fx.Node  # what is rotated: a projection's (b, t, heads, D) view, or its transpose
    out: fx.Node  # the rotated value
    nodes: frozenset  # every node of the rotation, x included
    # Per token, (b*t, D/2), in token order: a constant, or the graph input that holds one (a
    # rotary module's own buffer, when it already is per token).
    cos: torch.Tensor | fx.Node
    sin: torch.Tensor | fx.Node
    transposed: bool  # x is the view transposed to (b, heads, t, D)


def _call(node: Any, fns: set, methods: tuple[str, ...] = ()) -> bool:
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_function":
        return node.target in fns
    return node.op == "call_method" and node.target in methods


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
    if not _call(cat, CAT, ("cat",)) or cat.op != "call_function":
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


def _tables(table: torch.Tensor, shape: tuple[int, ...], transposed: bool) -> torch.Tensor | None:
    """A cos or sin table broadcast over x as per-token (b*t, D/2) rows, or None when it is not
    rotate-half's: different for some head, or its two halves unequal."""
    try:
        full = torch.broadcast_to(table, shape)
    except RuntimeError:
        return None
    if transposed:  # (b, heads, t, D) -> token order (b, t, heads, D)
        full = full.transpose(1, 2)
    first = full[:, :, :1]
    half = shape[-1] // 2
    if not torch.equal(full, first.expand_as(full)):
        return None
    rows = first[:, :, 0]  # (b, t, D)
    if not torch.equal(rows[..., :half], rows[..., half:]):
        return None
    return rows[..., :half].reshape(-1, half).contiguous()


def find(g: Any, x: fx.Node, transposed: bool) -> Rotation | None:
    """The written-out rotation of x (4-D, head dim last) whose tables are the model's own,
    with no other use of x; None if there is none."""
    shape = g.shape(x)
    if shape is None or len(shape) != 4 or shape[-1] % 2:
        return None
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
    cos, sin = g.constant(cos_node), g.constant(sin_node)
    if not isinstance(cos, torch.Tensor) or not isinstance(sin, torch.Tensor):
        return None
    neg, lo = cat.args[0]
    nodes = frozenset({x, x_mul, other, cat, neg, neg.args[0], lo, add})
    inner = nodes - {add}
    if any(u not in nodes for n in inner for u in n.users):
        return None  # x, or a part of the rotation, is used elsewhere too
    cos_rows, sin_rows = _tables(cos, shape, transposed), _tables(sin, shape, transposed)
    if cos_rows is None or sin_rows is None:
        return None
    return Rotation(x, add, nodes, cos_rows, sin_rows, transposed)
