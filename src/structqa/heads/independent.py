"""The Independent objective (BERT): static start and end query vectors."""

from __future__ import annotations

from torch import Tensor, nn

from structqa.features.batching import Batch
from structqa.heads.base import HeadOutput, SpanHead, masked_start_end, start_end_loss


class IndependentHead(SpanHead):
    """start_i = q_s . h_i + b_s, end_i = q_e . h_i + b_e; cross-entropy on each."""

    def __init__(self, hidden: int):
        super().__init__()
        self.qa_outputs = nn.Linear(hidden, 2)  # rows are q_s and q_e
        nn.init.normal_(self.qa_outputs.weight, std=0.02)
        nn.init.zeros_(self.qa_outputs.bias)

    def forward(self, hidden: Tensor, batch: Batch) -> HeadOutput:
        logits = self.qa_outputs(hidden)  # (B, N, 2)
        start, end = masked_start_end(logits[..., 0], logits[..., 1], batch)
        return HeadOutput(start, end, loss=start_end_loss(start, end, batch))
