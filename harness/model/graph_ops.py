"""What a node of a captured graph calls: the one test every site finder (sites.py,
rotation.py) uses, and the spellings of the calls they share."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch import fx

MUL = {operator.mul, torch.mul, torch.Tensor.mul}
ADD = {operator.add, torch.add, torch.Tensor.add}


def calls(node: Any, fns: set, methods: Iterable[str] = ()) -> bool:
    """node calls one of `fns` (a function node) or one of `methods` (a method node)."""
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_function":
        return node.target in fns
    return node.op == "call_method" and isinstance(node.target, str) and node.target in methods
