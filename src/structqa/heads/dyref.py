"""DyReF: start/end queries that ride through the encoder itself (paper, Sec. 3.2).

Two learned vectors Q0 are inserted after the embedding layer, ``[q_s, q_e, tokens...]``; the
encoder's own layers turn them into dynamic queries (token position ids are unchanged). The
only new parameters are Q0 (2 D); scores are plain dot products. Which positions may attend to
which is a mask from :mod:`structqa.attention.query_masks` (default: the queries see each other
and every token, tokens see only tokens, so token states are the plain encoder's: the paper's
Fig. 2(c) "bidirectional" mask, not Eq. 6 / Algorithm 2's unmasked encoder, where tokens see
the queries too, which is ``query_mask: full``; the paper's Table 3 has the two level, and so
do docs/results/lowdata-masks at 1024 questions).

Dimension letters: B batch, N tokens, P = 2 prefix queries, D width.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from structqa.attention.query_masks import NUM_QUERIES, dyref_mask
from structqa.features.batching import Batch
from structqa.heads.base import QuerySource, QueryStates


class DyReFQueries(QuerySource):
    """[Q, H] = Encoder([Q0, H0]) under the query mask (Eq. 6 with ``full``; by default
    tokens do not see the queries); q_s, q_e are the first two output positions."""

    def __init__(
        self, hidden: int, query_mask: str = "bidirectional", init_std: float | None = None
    ):
        super().__init__()
        self.query_mask = query_mask
        self.mask = dyref_mask(query_mask)  # raises on an unknown name
        # Q0 sits beside layer-normed embedding outputs (unit scale per dimension), so it is
        # drawn at that scale. With BERT's 0.02 both queries are ~0 in the first layer, attend
        # alike and come out nearly equal: on the default MiniLM, cos(q_s, q_e) = 0.98 and a
        # first loss of 33 at std 0.02, against 0.11 and 3.0 at std 1.
        self.q0 = nn.Parameter(torch.randn(NUM_QUERIES, hidden))  # rows: q_s, q_e
        if init_std is not None:
            nn.init.normal_(self.q0, std=init_std)

    def extra_repr(self) -> str:
        return f"query_mask={self.query_mask!r}"

    def encoder_inputs(self, batch: Batch) -> dict[str, Any]:
        b = batch.input_ids.shape[0]
        return {"prefix": self.q0.expand(b, -1, -1), "extra_mask": self.mask}  # (B, 2, D)

    def token_states(self, hidden: Tensor) -> Tensor:
        return hidden[:, NUM_QUERIES:]  # (B, N, D)

    def forward(self, hidden: Tensor, batch: Batch) -> QueryStates:
        # hidden: (B, P + N, D) from an encoder that received encoder_inputs()
        return QueryStates(hidden[:, :NUM_QUERIES], hidden[:, NUM_QUERIES:])
