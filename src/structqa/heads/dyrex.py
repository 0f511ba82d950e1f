"""DyREx: start/end queries computed by K decoder layers over the encoder output (paper, Sec. 3.1).

Each layer is the encoder's own :class:`~structqa.encoders.bert.Block` with sub-layers
``("sa", "xa", "ffn")``: self-attention between the two queries (a 2x2 pattern from
:mod:`structqa.attention.query_masks`), cross-attention from the queries to the token states
(padding masked), then the GELU feed-forward, each followed by add & layer norm. Width, heads,
feed-forward size, activation and dropout come from the encoder config, as in the paper.

Dimension letters: B batch, N tokens, D width, H heads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from structqa.attention.masks import materialize
from structqa.attention.query_masks import NUM_QUERIES, dyrex_mask
from structqa.encoders.bert import Block, EncoderConfig
from structqa.features.batching import Batch
from structqa.heads.base import QuerySource, QueryStates

DYREX_BLOCK = ("sa", "xa", "ffn")


def bert_init(module: nn.Module) -> None:
    """BERT's initialization for new layers: normal(0.02) weights, zero biases, unit norms."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class DyRExQueries(QuerySource):
    """Q = Trans(Q0, H): learned Q0 (2, D) refined by ``layers`` query decoder blocks."""

    def __init__(
        self,
        cfg: EncoderConfig,
        layers: int = 3,
        query_mask: str = "bidirectional",
        init_std: float | None = None,
    ):
        super().__init__()
        if layers < 1:
            raise ValueError(f"DyREx needs at least one layer, got {layers}")
        self.query_mask = query_mask
        self.pair_mask = dyrex_mask(query_mask)  # raises on an unknown name
        self.q0 = nn.Parameter(torch.empty(NUM_QUERIES, cfg.hidden_size))  # rows: q_s, q_e
        # two queries read N tokens: fold the key/value projections into the queries
        # (MultiHeadAttention._folded) instead of projecting every token in every layer
        self.layers = nn.ModuleList(
            Block(cfg, spec=DYREX_BLOCK, fold_memory=True) for _ in range(layers)
        )
        self.apply(bert_init)
        nn.init.normal_(self.q0, std=0.02 if init_std is None else init_std)

    def extra_repr(self) -> str:
        return f"query_mask={self.query_mask!r}"

    def forward(self, hidden: Tensor, batch: Batch) -> QueryStates:
        b = hidden.shape[0]
        q = self.q0.expand(b, -1, -1)  # (B, 2, D)
        pair = materialize(self.pair_mask, 1, 1, NUM_QUERIES, NUM_QUERIES, hidden.device)
        keys = batch.attention_mask.bool()[:, None, None, :]  # (B, 1, 1, N): no padding keys
        for layer in self.layers:
            q, _ = layer(q, pair, memory=hidden, memory_mask=keys)
        return QueryStates(q, hidden)
