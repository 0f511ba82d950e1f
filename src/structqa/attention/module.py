"""The one multi-head attention module (self- or cross-attention, any boolean mask).

Dimension letters: B batch, H heads, Q queries, K keys, D model width, E head width.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from structqa.attention.masks import to_additive_bias


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with Q/K/V/output projections.

    ``mask`` is boolean and broadcastable to (B, H, Q, K), ``True`` = may attend. Query rows
    with no allowed key output zeros instead of NaN (the residual path carries the token).
    """

    def __init__(self, hidden: int, heads: int, dropout: float = 0.0, kv_hidden: int | None = None):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
        kv_hidden = kv_hidden or hidden
        self.heads, self.head_dim, self.dropout = heads, hidden // heads, dropout
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(kv_hidden, hidden)
        self.value = nn.Linear(kv_hidden, hidden)
        self.output = nn.Linear(hidden, hidden)

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)  # (B, H, N, E)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        memory: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, Q, D); memory: (B, K, D) for cross-attention (else self-attention)."""
        source = x if memory is None else memory
        q, k, v = (
            self._split(self.query(x)),
            self._split(self.key(source)),
            self._split(self.value(source)),
        )
        bias = None if mask is None else to_additive_bias(mask, q.dtype)
        p = self.dropout if self.training else 0.0
        probs = None
        has_key = None if mask is None else mask.any(-1, keepdim=True)  # (B|1, H|1, Q|1, 1)
        if has_key is not None and bool(has_key.all()):
            has_key = None  # the common case: every query row may attend somewhere
        if need_weights:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, H, Q, K)
            if bias is not None:
                scores = scores + bias
            probs = scores.softmax(-1)
            if has_key is not None:
                probs = probs * has_key
            out = F.dropout(probs, p, self.training) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        if has_key is not None:
            # rows whose every key is masked would average over forbidden keys: zero them
            out = out * has_key.to(out.dtype)
        b, _, n, _ = out.shape
        out = out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim)  # (B, Q, D)
        return self.output(out), probs
