"""Grouped-query attention in a layout: "kv_heads=<n>" names n key/value heads shared by the H
query heads, H / n each (Llama-3, Qwen2, Mistral), which model code would otherwise copy H / n
times (repeat_kv, repeat_interleave) before attending. One rule for every attention op: the
layout part, how many cached heads it names, and the repeat the references and baselines do.
No such part means as many key/value heads as query heads (multi-head attention), so every
MHA problem's key stays as it was.
"""

from __future__ import annotations

import torch

KV_HEADS = "kv_heads="


def cached_heads(layout: str, heads: int) -> int:
    """The key/value heads a layout names, or `heads` when it names none."""
    for part in layout.split("+"):
        if part.startswith(KV_HEADS):
            return int(part.removeprefix(KV_HEADS))
    return heads


def layout_part(heads: int, cached: int) -> str:
    """The layout part of H query heads over n key/value heads ("" when they are as many)."""
    return "" if cached == heads else f"{KV_HEADS}{cached}"


def part_error(part: str) -> str | None:
    """Why `part` is not a well-formed "kv_heads=<n>" (None: it is)."""
    number = part.removeprefix(KV_HEADS)
    if not part.startswith(KV_HEADS) or not number.isdigit() or str(int(number)) != number:
        return f"kv_heads=<n> (n a whole number), not {part!r}"
    return None


def heads_error(heads: int, cached: int, instead: str) -> str | None:
    """Why n key/value heads cannot serve H query heads (None: they can); `instead` is the
    layout to write when they are as many."""
    if not 0 < cached < heads or heads % cached:
        return (
            f"kv_heads={cached} with H={heads} query heads: it must divide H and be fewer "
            f"(write {instead} when they are as many)"
        )
    return None


def repeat_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """k or v (B, n, S, D) with each head repeated for its query heads: (B, H, S, D)."""
    groups = heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def one_hot_key(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """k with its first key, in every key/value head, set to 8x the last query of that head's
    first query head: a kernel that pairs a query head with the wrong key/value head misses it."""
    hot = k.clone()
    hot[:, :, 0] = 8 * q[:, :: q.shape[1] // k.shape[1], -1]
    return hot
