"""DICE loss (NC-BERT Eq. 7, after Sundararaman et al., 2020): keep number magnitude in the
encoder's number representations.

For pairs (a, b) of numbers from one passage, the cosine distance of their last-layer states
should match their relative numeric distance::

    target(a, b) = 2 |a - b| / (|a| + |b|)        in [0, 2]; defined 0 when a = b = 0
    d_cos(v_a, v_b) = 1 - cos(v_a, v_b)            in [0, 2]
    L_num = mean over sampled pairs of (target - d_cos) ** 2

Pairs are sampled, as in the paper, with a caller-owned ``torch.Generator`` so a run can be
reproduced. Dimension letters: B batch, N tokens, D width, M numbers per example, P pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class NumberPairs:
    """Sampled pairs as slots of the (B, M) number tables: pair p is numbers
    ``first[p]`` and ``second[p]`` (distinct slots) of example ``row[p]``."""

    row: Tensor  # (P,) long
    first: Tensor  # (P,) long
    second: Tensor  # (P,) long


def sample_number_pairs(
    number_positions: Tensor, pairs_per_example: int, generator: torch.Generator
) -> NumberPairs:
    """``pairs_per_example`` pairs of distinct numbers from each example with at least two
    (positions (B, M) long, -1 = no number; valid slots may be anywhere in a row). Each pair
    is uniform over ordered pairs of distinct numbers, drawn independently (with replacement).
    Random draws happen on the generator's device (CPU for a default ``torch.Generator``),
    always the same amount per call, so a seed fixes the pairs."""
    valid = number_positions >= 0  # (B, M)
    count = valid.sum(-1)  # (B,)
    # slots of the valid numbers first, in order, so the k-th number is slots[b, k]
    slots = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)  # (B, M)
    bsz = number_positions.shape[0]
    shape = (bsz, pairs_per_example)
    u = torch.rand(shape, generator=generator, device=generator.device)
    w = torch.rand(shape, generator=generator, device=generator.device)
    u, w = u.to(number_positions.device), w.to(number_positions.device)
    n = count[:, None].to(u.dtype)
    i = (u * n).long().clamp_max(count[:, None] - 1)  # uniform over 0..n-1
    j = (w * (n - 1)).long().clamp_max(count[:, None] - 2)  # uniform over the other n-1
    j = j + (j >= i).long()
    keep = (count >= 2)[:, None].expand(shape)  # (B, P)
    row = torch.arange(bsz, device=number_positions.device)[:, None].expand(shape)
    row, i, j = row[keep], i[keep], j[keep]
    return NumberPairs(row=row, first=slots[row, i], second=slots[row, j])


def relative_distance(a: Tensor, b: Tensor) -> Tensor:
    """2|a - b| / (|a| + |b|), with 0/0 (a = b = 0) defined as 0: equal numbers are at
    distance 0, and 0 vs anything else is at the maximal distance 2."""
    den = a.abs() + b.abs()
    return torch.where(den > 0, 2 * (a - b).abs() / den.clamp_min(torch.finfo(den.dtype).tiny), 0)


def cosine_distance(u: Tensor, v: Tensor, eps: float = 1e-8) -> Tensor:
    """1 - cos(u, v) over the last dim. The norms' product is clamped below at ``eps`` (before
    the square root, so a zero vector has cos 0 and a finite, zero gradient, never NaN)."""
    dot = (u * v).sum(-1)
    norms = ((u * u).sum(-1) * (v * v).sum(-1)).clamp_min(eps * eps).sqrt()
    return 1 - dot / norms


def dice_loss(
    states: Tensor,
    number_positions: Tensor,
    number_values: Tensor,
    pairs_per_example: int,
    generator: torch.Generator,
    eps: float = 1e-8,
) -> Tensor:
    """The DICE loss over sampled number pairs.

    ``states`` (B, N, D) are the encoder's last hidden states; ``number_positions`` (B, M)
    the token representing each number (-1 = padding; with digit tokenization the caller
    picks one token per number, e.g. its first digit); ``number_values`` (B, M) their values.
    Examples with fewer than two numbers contribute nothing; with no pair at all the loss is
    a zero that still depends on ``states`` (so ``backward`` works). Computed in at least
    float32.
    """
    dtype = torch.promote_types(states.dtype, torch.float32)  # half precision -> float32
    positions = number_positions.to(states.device)
    values = number_values.to(states.device, dtype)
    pairs = sample_number_pairs(positions, pairs_per_example, generator)
    if pairs.row.numel() == 0:
        return (states.sum() * 0.0).to(dtype)
    row, first, second = pairs.row, pairs.first, pairs.second
    v_a = states[row, positions[row, first]].to(dtype)  # (P, D)
    v_b = states[row, positions[row, second]].to(dtype)
    target = relative_distance(values[row, first], values[row, second])  # (P,)
    return (target - cosine_distance(v_a, v_b, eps)).pow(2).mean()
