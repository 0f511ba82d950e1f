"""The span-head interface shared by every extractive objective.

A span head is a query source (where the start and end queries q_s, q_e come from: static
vectors, DyREx, DyReF) times a scorer (how queries and token states become span scores:
independent start/end softmaxes, or the joint span softmax). :class:`QueryHead` composes one of
each; the combination is chosen when the model is built, never inside ``forward``.

Dimension letters: B batch, N tokens, D width, L max answer length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from structqa.features.batching import Batch

NEG = -1e4  # finite: masked logits stay finite in bf16 and fp32


@dataclass
class HeadOutput:
    start_logits: Tensor  # (B, N), non-answer tokens masked to NEG
    end_logits: Tensor  # (B, N)
    loss: Tensor | None = None
    span_scores: Tensor | None = None  # (B, N, L) for heads that score spans jointly
    null_scores: Tensor | None = None  # (B,) score of the no-answer span
    # (B,) the window's own no-answer log-odds, from a separate answerability classifier
    # (heads.answerability): decoding thresholds it as is, not against the best span's score
    null_odds: Tensor | None = None
    # (B,) bool: rows left out of the loss because their gold span cannot be scored (the joint
    # band scorer cannot represent a gold span longer than its max answer length)
    loss_skipped: Tensor | None = None
    attentions: tuple[Tensor, ...] = ()  # per attention sub-layer, when asked for


class EncoderHooks(nn.Module):
    """What a head (or a query source) may change about the encoder call and its output."""

    def encoder_inputs(self, batch: Batch) -> dict[str, Any]:
        """Extra encoder arguments (DyReF inserts query vectors); none by default."""
        return {}

    def token_states(self, hidden: Tensor) -> Tensor:
        """The part of the encoder output that belongs to the input tokens."""
        return hidden


class SpanHead(EncoderHooks):
    """A span head scores answer spans from encoder states: ``forward`` turns hidden states
    into a :class:`HeadOutput`."""

    def forward(self, hidden: Tensor, batch: Batch) -> HeadOutput:  # pragma: no cover
        raise NotImplementedError


def masked_start_end(start: Tensor, end: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
    """Restrict logits to context tokens and [CLS] (float32, so the softmax is exact)."""
    allowed = batch.answer_mask
    start = start.float().masked_fill(~allowed, NEG)
    end = end.float().masked_fill(~allowed, NEG)
    return start, end


def start_end_loss(start: Tensor, end: Tensor, batch: Batch) -> Tensor:
    """Mean of the start and end cross-entropies (BERT's independent objective)."""
    ce = nn.functional.cross_entropy
    return (ce(start, batch.start_positions) + ce(end, batch.end_positions)) / 2


def sliding_windows(x: Tensor, size: int, step: int) -> Tensor:
    """``x.unfold(1, size, step)``: windows along dim 1, the window offset as the last dim.

    While exporting to ONNX, the same values by a gather: the TorchScript exporter cannot
    unfold a dimension whose size is dynamic (batch and length axes of an export are)."""
    if not torch.onnx.is_in_onnx_export():
        return x.unfold(1, size, step)  # a view, no copy
    count = (x.shape[1] - size) // step + 1
    index = torch.arange(count, device=x.device)[:, None] * step + torch.arange(
        size, device=x.device
    )  # (W, size)
    return x[:, index].movedim(2, -1)  # (B, W, ..., size)


def span_band(start: Tensor, end: Tensor, max_len: int) -> Tensor:
    """Scores of spans (i, i + l) for l < max_len: (B, N, L); spans past the end get NEG."""
    b, n = end.shape
    padded = torch.cat([end, end.new_full((b, max_len - 1), NEG)], dim=1)
    end_band = sliding_windows(padded, max_len, 1)  # (B, N, L)
    return start[:, :, None] + end_band


@dataclass
class QueryStates:
    """What a query source hands to a scorer."""

    queries: Tensor  # (B, 2, D): q_s, q_e
    tokens: Tensor  # (B, N, D): token states, aligned with the batch's N tokens


class QuerySource(EncoderHooks):
    """Produces the start/end queries and the token states from the encoder output."""

    def forward(self, hidden: Tensor, batch: Batch) -> QueryStates:  # pragma: no cover
        raise NotImplementedError


class Scorer(nn.Module):
    """Turns queries and token states into logits, span scores and the loss."""

    def forward(self, states: QueryStates, batch: Batch) -> HeadOutput:  # pragma: no cover
        raise NotImplementedError


class QueryHead(SpanHead):
    """A span head made of a query source and a scorer."""

    def __init__(self, queries: QuerySource, scorer: Scorer):
        super().__init__()
        self.queries, self.scorer = queries, scorer

    def encoder_inputs(self, batch: Batch) -> dict[str, Any]:
        return self.queries.encoder_inputs(batch)

    def token_states(self, hidden: Tensor) -> Tensor:
        return self.queries.token_states(hidden)

    def forward(self, hidden: Tensor, batch: Batch) -> HeadOutput:
        return self.scorer(self.queries(hidden, batch), batch)


def at_least_fp32(x: Tensor) -> Tensor:
    """bf16/fp16 -> float32; float32 and float64 stay as they are."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def dot_logits(states: QueryStates) -> tuple[Tensor, Tensor]:
    """Raw start and end logits q_s . h_i and q_e . h_i: (B, N) each, in float32.

    Outside autocast: bf16 logits land on a grid of ~1/16 at typical magnitudes, which ties
    span and null scores (O(B N D) work, so float32 costs nothing measurable)."""
    with torch.autocast(states.tokens.device.type, enabled=False):
        tokens, queries = at_least_fp32(states.tokens), at_least_fp32(states.queries)
        logits = torch.einsum("bnd,bqd->bnq", tokens, queries)  # (B, N, 2)
    return logits[..., 0], logits[..., 1]
