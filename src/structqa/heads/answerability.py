"""A separate answerability head: "is the answer in this window?" as a binary classifier.

BERT's SQuAD 2.0 recipe scores "no answer" as the [CLS] span inside the start and end
softmaxes, so one cross-entropy both finds spans and decides whether there is one. With a few
hundred to a few thousand questions (half of them unanswerable) that shared objective learns
to point at [CLS] almost everywhere (docs/results/anna-squad2-fitted: no-answer AUC 61-66 %).
Here the two jobs are split:

- the span scorer sees only context tokens ([CLS] masked out of both softmaxes) and is trained
  only on windows that contain the answer, so its scores are "where is the answer, given there
  is one";
- a classifier reads the window's [CLS] state (``source="cls"``, BERT's pooler shape) or the
  [CLS] state with the head's start and end queries (``source="queries"``: DyREx's and DyReF's
  queries have read the passage for this question) and is trained with a binary cross-entropy
  on "the answer lies in this window", the two classes weighted equally when ``balanced``.

A window of an answerable question that does not contain the answer (long contexts) is a
negative of the classifier ("no answer in this window"), not an unanswerable question; the
question's no-answer odds are the lowest over its windows (decoding takes the minimum).
The classifier's negated logit is the window's ``null_odds``: decoding compares it with the
threshold directly, not with the best span's score.

Dimension letters: B batch, N tokens, D width.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from structqa.features.batching import Batch
from structqa.heads.base import NEG, HeadOutput, QueryHead, SpanHead, at_least_fp32

NULL_SOURCES = ("cls", "queries")


class AnswerabilityHead(SpanHead):
    """A query head's spans plus a binary "answer in this window" classifier."""

    def __init__(
        self,
        span: QueryHead,
        hidden: int,
        source: str = "cls",
        weight: float = 1.0,
        balanced: bool = True,
        dropout: float = 0.1,
    ):
        super().__init__()
        if source not in NULL_SOURCES:
            raise ValueError(f"answerability source must be one of {NULL_SOURCES}, not {source!r}")
        if weight <= 0:
            raise ValueError(f"the answerability loss weight must be > 0, got {weight}")
        self.span, self.source, self.weight, self.balanced = span, source, weight, balanced
        width = hidden * (3 if source == "queries" else 1)  # [CLS] (; q_s; q_e)
        self.classifier = nn.Sequential(
            nn.Linear(width, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, 1)
        )
        for layer in (self.classifier[0], self.classifier[3]):
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)

    def extra_repr(self) -> str:
        return f"source={self.source!r}, weight={self.weight}, balanced={self.balanced}"

    def encoder_inputs(self, batch: Batch) -> dict[str, Any]:
        return self.span.encoder_inputs(batch)

    def token_states(self, hidden: Tensor) -> Tensor:
        return self.span.token_states(hidden)

    def forward(self, hidden: Tensor, batch: Batch) -> HeadOutput:
        states = self.span.queries(hidden, batch)
        out = self.span.scorer(states, batch)
        if out.span_scores is not None:
            raise ValueError(
                "the answerability head works with independent start/end scorers only "
                "(model.head independent, dyrex or dyref), not joint span scorers"
            )
        features = states.tokens[:, 0]  # (B, D): [CLS]
        if self.source == "queries":
            features = torch.cat([features, states.queries.flatten(1)], dim=1)  # (B, 3D)
        with torch.autocast(features.device.type, enabled=False):
            layers = self.classifier
            logit = layers(at_least_fp32(features).to(layers[0].weight.dtype)).squeeze(1)  # (B,)
        logit = logit.float()
        # spans given an answer: [CLS] leaves both softmaxes
        start = out.start_logits.clone()
        end = out.end_logits.clone()
        start[:, 0] = NEG
        end[:, 0] = NEG
        loss = answerability_loss(start, end, logit, batch, self.weight, self.balanced)
        return HeadOutput(start, end, loss=loss, null_odds=-logit, attentions=out.attentions)


def answerability_loss(
    start: Tensor, end: Tensor, logit: Tensor, batch: Batch, weight: float, balanced: bool
) -> Tensor:
    """Span cross-entropy over the windows that hold the answer + ``weight`` x the binary
    cross-entropy of ``logit`` (B,) against "the answer lies in this window".

    ``balanced``: each class present in the batch weighs half of the classifier loss, so a
    batch of nine no-answer windows and three answer windows does not teach "no answer"."""
    bce_logits = nn.functional.binary_cross_entropy_with_logits
    has = batch.start_positions > 0  # (B,)
    target = has.float()
    if balanced:
        n_pos = has.sum()
        n_neg = (~has).sum()
        classes = (n_pos > 0).float() + (n_neg > 0).float()
        w = torch.where(has, 1.0 / n_pos.clamp(min=1), 1.0 / n_neg.clamp(min=1)) / classes
        bce = bce_logits(logit, target, weight=w, reduction="sum")
    else:
        bce = bce_logits(logit, target)
    if has.any():
        ce = nn.functional.cross_entropy
        span = ce(start[has], batch.start_positions[has]) + ce(end[has], batch.end_positions[has])
        span = span / 2
    else:
        span = start.sum() * 0.0  # keeps the graph (every parameter gets a zero gradient)
    return span + weight * bce
