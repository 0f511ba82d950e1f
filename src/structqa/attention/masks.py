"""Attention masks as small pure functions, in the style of flex_attention's ``mask_mod``.

A mask function maps broadcastable index tensors ``(b, h, q, kv)`` to a boolean tensor where
``True`` means "query q of head h in batch row b may attend to key kv". Functions compose with
:func:`and_masks` / :func:`or_masks`; :func:`materialize` is the one place that turns them into
a tensor and :func:`to_additive_bias` the one place that turns that into an additive bias.

Dimension letters: B batch, H heads, Q queries, K keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def and_masks(*mods: MaskMod) -> MaskMod:
    """Allowed where every mask allows."""

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        out = mods[0](b, h, q, kv)
        for m in mods[1:]:
            out = out & m(b, h, q, kv)
        return out

    return mod


def or_masks(*mods: MaskMod) -> MaskMod:
    """Allowed where any mask allows."""

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        out = mods[0](b, h, q, kv)
        for m in mods[1:]:
            out = out | m(b, h, q, kv)
        return out

    return mod


def full(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    """Everything allowed."""
    return torch.ones_like(q, dtype=torch.bool) & torch.ones_like(kv, dtype=torch.bool)


def causal(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    """A query sees itself and earlier positions."""
    return q >= kv


def no_self(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    """The neighbor-aware mask: a token never attends to itself (the diagonal is removed)."""
    return q != kv


def window(k: int) -> MaskMod:
    """A query sees keys at most ``k`` positions away."""

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return (q - kv).abs() <= k

    return mod


def key_padding(valid: Tensor) -> MaskMod:
    """Keys allowed where ``valid`` (B, K) is true (non-padding tokens)."""
    valid = valid.bool()

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return valid[b, kv]

    return mod


def padding(lengths: Tensor, kv_len: int) -> MaskMod:
    """Keys allowed below each row's length (lengths: (B,))."""
    positions = torch.arange(kv_len, device=lengths.device)
    return key_padding(positions[None, :] < lengths[:, None])


def same_segment(segment_ids: Tensor) -> MaskMod:
    """Query and key share a segment id (segment_ids: (B, N), same sequence for q and kv)."""

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return segment_ids[b, q] == segment_ids[b, kv]

    return mod


def allowed_keys(table: Tensor) -> MaskMod:
    """An arbitrary allowed-key table, (B, Q, K) or (B, H, Q, K) boolean."""
    table = table.bool()
    if table.dim() == 3:
        return lambda b, h, q, kv: table[b, q, kv]
    return lambda b, h, q, kv: table[b, h, q, kv]


def on_heads(mod: MaskMod, heads: Sequence[int], num_heads: int) -> MaskMod:
    """Apply ``mod`` on the listed heads only; the other heads attend unrestricted."""
    selected = torch.zeros(num_heads, dtype=torch.bool)
    selected[list(heads)] = True

    def per_head(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        chosen = selected.to(h.device)[h]
        return mod(b, h, q, kv) | ~chosen

    return per_head


def on_queries(mod: MaskMod, rows: Tensor) -> MaskMod:
    """Apply ``mod`` only to query positions where ``rows`` (B, Q) is true."""
    rows = rows.bool()

    def restricted(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return mod(b, h, q, kv) | ~rows[b, q]

    return restricted


def materialize(
    mod: MaskMod, batch: int, heads: int, q_len: int, kv_len: int, device: torch.device | str
) -> Tensor:
    """Evaluate a mask function on broadcast index grids.

    Returns a boolean tensor broadcastable to (B, H, Q, K); dimensions the mask does not
    depend on stay of size 1, so a padding mask costs (B, 1, 1, K), not (B, H, Q, K).
    """
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, -1, 1, 1)
    q = torch.arange(q_len, device=device).view(1, 1, -1, 1)
    kv = torch.arange(kv_len, device=device).view(1, 1, 1, -1)
    return mod(b, h, q, kv).bool()


def to_additive_bias(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """True -> 0, False -> the dtype's most negative finite value (finite, so never NaN)."""
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    neg = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=mask.device)
    return torch.where(mask, zero, neg)


def and_no_self(mask: Tensor | None, n: int, device: torch.device) -> Tensor:
    """``mask`` (True = may attend, broadcastable to (B, H, n, n)) with the diagonal removed:
    self-attention over ``n`` tokens made neighbor-aware (ANNA's NAA sub-layer); the only place
    an encoder layer applies :func:`no_self`."""
    diag = materialize(no_self, 1, 1, n, n, device)
    return diag if mask is None else mask & diag
