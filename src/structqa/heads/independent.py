"""The Independent objective (BERT): static start/end queries, one softmax each (paper, Eq. 1).

Dimension letters: B batch, N tokens, D width.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn

from structqa.features.batching import Batch
from structqa.heads.base import (
    HeadOutput,
    QueryHead,
    QuerySource,
    QueryStates,
    Scorer,
    dot_logits,
    masked_start_end,
    start_end_loss,
)

log = logging.getLogger(__name__)


class StaticQueries(QuerySource):
    """Learned q_s, q_e shared by every input; the tokens are the encoder output as is.

    No bias: a constant added to every start (or end) logit cancels in each softmax, in the
    argmax and in null_odds, so BERT's ``qa_outputs.bias`` never changes a prediction.
    """

    def __init__(self, hidden: int, init_std: float | None = None):
        super().__init__()
        self.q0 = nn.Parameter(torch.empty(2, hidden))  # rows: q_s, q_e
        nn.init.normal_(self.q0, std=0.02 if init_std is None else init_std)  # BERT's range

    def forward(self, hidden: Tensor, batch: Batch) -> QueryStates:
        b = hidden.shape[0]
        return QueryStates(self.q0.expand(b, -1, -1), hidden)  # (B, 2, D), (B, N, D)


class IndependentScorer(Scorer):
    """start_i = q_s . h_i, end_j = q_e . h_j; the mean of the start and end cross-entropies.

    Non-context tokens except [CLS] (the null answer) are masked. No parameters of its own.
    """

    def forward(self, states: QueryStates, batch: Batch) -> HeadOutput:
        start, end = masked_start_end(*dot_logits(states), batch)  # (B, N) float32 each
        return HeadOutput(start, end, loss=start_end_loss(start, end, batch))


class IndependentHead(QueryHead):
    """BERT's head: :class:`StaticQueries` x :class:`IndependentScorer`."""

    def __init__(self, hidden: int, query_init_std: float | None = None):
        super().__init__(StaticQueries(hidden, query_init_std), IndependentScorer())
        self.register_load_state_dict_pre_hook(_load_legacy_qa_outputs)


def _load_legacy_qa_outputs(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any
) -> None:
    """Checkpoints saved before the query/scorer split hold ``qa_outputs`` (a Linear(D, 2));
    its weight rows are q_s and q_e, and its bias is dropped (see :class:`StaticQueries`)."""
    weight = state_dict.pop(prefix + "qa_outputs.weight", None)
    if weight is None:
        return
    state_dict.pop(prefix + "qa_outputs.bias", None)
    state_dict[prefix + "queries.q0"] = weight
    log.info("loaded a legacy qa_outputs head as static queries (its bias is a no-op)")
