"""Attention patterns between the start and end queries of DyREx and DyReF (paper, Fig. 2).

Mask functions in the ``mask_mod(b, h, q, kv) -> bool`` style of :mod:`structqa.attention.masks`
(``True`` = may attend). Query index 0 is the start query, 1 the end query.

- DyREx runs self-attention over the two queries alone: the patterns are 2x2
  (:data:`PAIR_MASKS`: bidirectional, causal, independent).
- DyReF runs the encoder over ``[q_s, q_e, tokens...]``: :func:`with_prefix_queries` lifts a
  2x2 pattern to that sequence. Queries always see every token; tokens see only tokens, so
  their states are exactly the plain encoder's, except in the ``full`` variant where tokens
  also see the queries (:data:`DYREF_MASKS`). Padding is AND-ed by the encoder.

Dimension letters: Q queries, K keys, P prefix queries (2).
"""

from __future__ import annotations

import difflib

import torch
from torch import Tensor

from structqa.attention.masks import MaskMod, full

NUM_QUERIES = 2  # start, end


def pair_bidirectional(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    """Each query sees both queries."""
    return torch.ones_like(q, dtype=torch.bool) & torch.ones_like(kv, dtype=torch.bool)


def pair_causal(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    """The end query sees the start query; the start query does not see the end query."""
    return q >= kv


def pair_independent(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
    """Each query sees only itself (in DyReF it also sees the tokens)."""
    return q == kv


PAIR_MASKS: dict[str, MaskMod] = {
    "bidirectional": pair_bidirectional,
    "causal": pair_causal,
    "independent": pair_independent,
}


def with_prefix_queries(
    pair: MaskMod, num_queries: int = NUM_QUERIES, tokens_see_queries: bool = False
) -> MaskMod:
    """A mask over ``[queries (P), tokens]`` from a P x P pattern between the queries.

    Query rows follow ``pair`` among the queries and see every token; token rows see every
    token and, only if ``tokens_see_queries``, the queries.
    """

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        q_is_query, kv_is_query = q < num_queries, kv < num_queries
        among_queries = q_is_query & kv_is_query & pair(b, h, q, kv)
        allowed = among_queries | ~kv_is_query  # ... | to tokens
        if tokens_see_queries:  # a Python branch: the mask stays a graph of tensor ops
            allowed = allowed | (~q_is_query & kv_is_query)
        return allowed

    return mod


DYREF_MASKS: dict[str, MaskMod] = {
    # "full" is the plain encoder mask: queries and tokens attend to each other freely
    "full": full,
    **{name: with_prefix_queries(pair) for name, pair in PAIR_MASKS.items()},
}


def _lookup(table: dict[str, MaskMod], name: str, what: str) -> MaskMod:
    if name not in table:
        close = difflib.get_close_matches(name, table, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown {what} query mask {name!r}{hint} (known: {', '.join(table)})")
    return table[name]


def dyrex_mask(name: str) -> MaskMod:
    """The 2x2 query self-attention pattern of DyREx by name (no "full": there are no tokens
    in DyREx's self-attention, the queries reach them by cross-attention)."""
    return _lookup(PAIR_MASKS, name, "DyREx")


def dyref_mask(name: str) -> MaskMod:
    """The ``(2 + N) x (2 + N)`` DyReF pattern by name."""
    return _lookup(DYREF_MASKS, name, "DyReF")
