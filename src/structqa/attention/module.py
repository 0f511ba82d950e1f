"""The one multi-head attention module (self- or cross-attention, any boolean mask).

Dimension letters: B batch, H heads, Q queries, K keys, D model width, E head width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structqa.attention.kernels import attend_by_rows, attend_packed, fast_path, linear
from structqa.attention.masks import to_additive_bias


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with Q/K/V/output projections.

    ``mask`` is boolean and broadcastable to (B, H, Q, K), ``True`` = may attend. Query rows
    with no allowed key output zeros instead of NaN (the residual path carries the token).

    ``fold_memory`` (cross-attention only) computes the same function without projecting the
    memory: the key projection is folded into the queries and the value projection applied
    after the weighted sum (see :meth:`_folded`). It pays when few queries read many keys
    (H * Q < D; DyREx's two queries): O(H Q K D) instead of O(K D^2). Parameters and
    checkpoints are the same either way.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        dropout: float = 0.0,
        kv_hidden: int | None = None,
        fold_memory: bool = False,
    ):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
        kv_hidden = kv_hidden or hidden
        self.heads, self.head_dim, self.dropout = heads, hidden // heads, dropout
        self.fold_memory = fold_memory
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
        if memory is not None and self.fold_memory:
            return self._folded(x, mask, memory, need_weights)
        source = x if memory is None else memory
        q, k, v = (
            self._split(linear(x, self.query)),
            self._split(linear(source, self.key)),
            self._split(linear(source, self.value)),
        )
        bias = None if mask is None else to_additive_bias(mask, q.dtype)
        p = self.dropout if self.training else 0.0
        probs = None
        has_key = None if mask is None else mask.any(-1, keepdim=True)  # (B|1, H|1, Q|1, 1)
        if has_key is not None and not torch.onnx.is_in_onnx_export() and bool(has_key.all()):
            # the common case: every query row may attend somewhere (an exported graph keeps
            # the product, the same values, since a traced branch would be fixed for all inputs)
            has_key = None
        if need_weights:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, H, Q, K)
            if bias is not None:
                scores = scores + bias
            probs = scores.softmax(-1)
            if has_key is not None:
                probs = probs * has_key
            out = F.dropout(probs, p, self.training) @ v
        elif p == 0.0 and fast_path(q):
            out = attend_by_rows(q, k, v, bias)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        if has_key is not None:
            # rows whose every key is masked would average over forbidden keys: zero them
            out = out * has_key.to(out.dtype)
        b, _, n, _ = out.shape
        out = out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim)  # (B, Q, D)
        return linear(out, self.output), probs

    def forward_packed(
        self, x: Tensor, rows: Sequence[tuple[int, int]], no_self: bool = False
    ) -> Tensor:
        """Self-attention over packed windows (inference only): ``x`` (T, D) holds the real
        tokens of the windows one after another, ``rows`` the (start, end) of each. The same
        function as :meth:`forward` with a key-padding mask (``no_self``: and no attention to
        itself), at the real tokens, without computing a padded position."""
        q, k, v = linear(x, self.query), linear(x, self.key), linear(x, self.value)
        return linear(attend_packed(q, k, v, rows, self.heads, no_self), self.output)

    def _folded(
        self, x: Tensor, mask: Tensor | None, memory: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Cross-attention with the key/value projections moved off the memory.

        Per head h, with a = W_q x + b_q: a . (W_k m_i + b_k) = (W_k^T a) . m_i + a . b_k (the
        second term is the same for every key). With weights
        p_i, sum_i p_i (W_v m_i + b_v) = W_v (sum_i p_i m_i) + b_v sum_i p_i (sum_i p_i is 1
        without attention dropout). Both are exact rewrites of :meth:`forward`'s arithmetic.
        """
        b, nq, _ = x.shape
        h, e = self.heads, self.head_dim
        a = self.query(x).view(b, nq, h, e)
        w_k = self.key.weight.reshape(h, e, -1)  # (H, E, Dm)
        w_v = self.value.weight.reshape(h, e, -1)
        u = torch.einsum("bqhe,hed->bhqd", a, w_k.to(a.dtype)) / math.sqrt(e)  # (B, H, Q, Dm)
        mem = memory.to(u.dtype)  # (B, K, Dm)
        nk = mem.shape[1]
        # one (H*Q, Dm) x (Dm, K) product per batch row: broadcasting the memory over heads
        # in a 4-D matmul would copy it H times
        scores = torch.bmm(u.reshape(b, h * nq, -1), mem.transpose(1, 2)).view(b, h, nq, nk)
        # a . b_k is the same for every key and cancels in the softmax; it is added anyway
        # (B*H*Q numbers) so that every parameter takes part in the graph, as DDP requires
        key_bias = self.key.bias.view(h, e).to(a.dtype)
        scores = scores + (torch.einsum("bqhe,he->bhq", a, key_bias) / math.sqrt(e))[..., None]
        if mask is not None:
            scores = scores + to_additive_bias(mask, scores.dtype)
        probs = scores.softmax(-1)
        has_key = None if mask is None else mask.any(-1, keepdim=True)
        if has_key is not None and (torch.onnx.is_in_onnx_export() or not bool(has_key.all())):
            probs = probs * has_key
        weights = F.dropout(probs, self.dropout, self.training) if self.training else probs
        pooled = torch.bmm(weights.reshape(b, h * nq, nk), mem).view(b, h, nq, -1)  # (B,H,Q,Dm)
        ctx = torch.einsum("bhqd,hed->bhqe", pooled, w_v.to(pooled.dtype))
        ctx = ctx + self.value.bias.view(h, 1, e).to(ctx.dtype) * weights.sum(-1, keepdim=True)
        out = ctx.transpose(1, 2).reshape(b, nq, h * e)  # (B, Q, D)
        return self.output(out), probs if need_weights else None
