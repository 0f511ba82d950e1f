"""Attention variants of paper Table 8: an extension of the BERT encoder's self-attention.

:class:`AttentionOptions` turns the self-attention sub-layers into
:class:`VariantAttentionSublayer`: relative positions on keys and/or values (Shaw et al., 2018:
distances clipped to ``[-k, k]``, learned ``(2k + 1, head_dim)`` tables shared by the heads)
and an entity-aware bias (a learned scalar per head added to the scores of keys inside named
entities; the key mask is supplied per call with :func:`entity_keys`). Their new parameters
start at zero, so adding a variant to a trained encoder also preserves its function at step 0.
An encoder with variants is built by :func:`structqa.encoders.build.build_encoder`.

Dimension letters: B batch, N tokens, H heads, Q queries, K keys, D width, E head width.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from structqa.attention.masks import and_no_self, to_additive_bias
from structqa.encoders.bert import AttentionSublayer, BertEncoder, EncoderConfig


@dataclass(frozen=True)
class AttentionOptions:
    """Table 8 variants of the self-attention sub-layers (all off = plain attention).

    max_distance: Shaw et al.'s clipping distance k (relative distances beyond +-k share an
    embedding); their experiments use k = 16 and found k >= 2 enough.
    """

    relative_keys: bool = False
    relative_values: bool = False
    max_distance: int = 16
    entity_bias: bool = False

    def __post_init__(self) -> None:
        if self.max_distance < 0:
            raise ValueError(f"max_distance must be >= 0, got {self.max_distance}")

    @property
    def plain(self) -> bool:
        return not (self.relative_keys or self.relative_values or self.entity_bias)


def relative_distance_index(q_len: int, k_len: int, k: int, device: torch.device) -> Tensor:
    """(Q, K) indices into a (2k + 1)-row table: ``clip(j - i, -k, k) + k``."""
    q = torch.arange(q_len, device=device)[:, None]
    kv = torch.arange(k_len, device=device)[None, :]
    return (kv - q).clamp(-k, k) + k


class VariantAttentionSublayer(AttentionSublayer):
    """An :class:`AttentionSublayer` with relative positions and/or an entity bias.

    Scores are ``q_i . (k_j + a^K_ij) / sqrt(E) + w_h * entity[j]`` and outputs
    ``sum_j p_ij (v_j + a^V_ij)`` (Shaw et al., 2018, eqs. 3-4), with ``a^K``, ``a^V`` read
    from (2k + 1, E) tables by clipped distance ``j - i`` and ``w`` one scalar per head. The
    tables and ``w`` start at zero: the sub-layer then computes exactly what its parent does.
    Parameter names of the parent are unchanged, so its weights load as they are.
    """

    def __init__(
        self, cfg: EncoderConfig, options: AttentionOptions, neighbor_aware: bool = False
    ) -> None:
        super().__init__(cfg, neighbor_aware=neighbor_aware)
        self.options = options
        head_dim = cfg.hidden_size // cfg.num_heads
        rows = 2 * options.max_distance + 1
        self.rel_keys = nn.Embedding(rows, head_dim) if options.relative_keys else None
        self.rel_values = nn.Embedding(rows, head_dim) if options.relative_values else None
        self.entity_bias = nn.Parameter(torch.zeros(cfg.num_heads)) if options.entity_bias else None
        self.reset_variant_parameters()
        self.entity_keys: Tensor | None = None  # (B, N) bool, set by `entity_keys(...)`

    def reset_variant_parameters(self) -> None:
        """Zero the variant's own parameters (called after BertEncoder's init)."""
        with torch.no_grad():
            for table in (self.rel_keys, self.rel_values):
                if table is not None:
                    table.weight.zero_()
            if self.entity_bias is not None:
                self.entity_bias.zero_()

    def _split(self, t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.attn.heads, self.attn.head_dim).transpose(1, 2)  # (B, H, N, E)

    def _entity_scores(self, k_len: int) -> Tensor:
        if self.entity_keys is None:
            raise ValueError(
                "entity-aware attention needs the entity key mask: call the encoder inside "
                "`with entity_keys(encoder, mask):`"
            )
        ent = self.entity_keys.bool()
        if ent.shape[1] < k_len:  # prefix vectors (DyReF) come first and are no entities
            ent = torch.cat([ent.new_zeros(ent.shape[0], k_len - ent.shape[1]), ent], dim=1)
        assert self.entity_bias is not None
        return self.entity_bias[None, :, None, None] * ent[:, None, None, :]  # (B, H, 1, K)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None,
        memory: Tensor | None,
        memory_mask: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        b, n, _ = x.shape
        if self.neighbor_aware:
            mask = and_no_self(mask, n, x.device)
        attn = self.attn
        q, k, v = self._split(attn.query(x)), self._split(attn.key(x)), self._split(attn.value(x))
        scores = q @ k.transpose(-1, -2)  # (B, H, Q, K)
        dist = None
        if self.rel_keys is not None or self.rel_values is not None:
            dist = relative_distance_index(n, n, self.options.max_distance, x.device)  # (Q, K)
        if self.rel_keys is not None:
            scores = scores + torch.einsum("bhqe,qke->bhqk", q, self.rel_keys(dist))
        scores = scores / math.sqrt(attn.head_dim)
        if self.entity_bias is not None:
            scores = scores + self._entity_scores(n).to(scores.dtype)
        has_key = None
        if mask is not None:
            scores = scores + to_additive_bias(mask, scores.dtype)
            has_key = mask.any(-1, keepdim=True)  # (B|1, H|1, Q|1, 1)
        probs = scores.softmax(-1)
        if has_key is not None:
            probs = probs * has_key  # rows with no allowed key attend nowhere (no NaN)
        dropped = nn.functional.dropout(probs, attn.dropout, self.training)
        out = dropped @ v  # (B, H, Q, E)
        if self.rel_values is not None:
            out = out + torch.einsum("bhqk,qke->bhqe", dropped, self.rel_values(dist))
        out = out.transpose(1, 2).reshape(b, n, attn.heads * attn.head_dim)  # (B, Q, D)
        out = attn.output(out)
        return self.LayerNorm(x + self.dropout(out)), probs if need_weights else None


@contextmanager
def entity_keys(encoder: nn.Module, mask: Tensor) -> Iterator[None]:
    """Give the entity-aware sub-layers of ``encoder`` the (B, N) key mask for the calls inside
    the ``with`` block (True = the token lies inside a named entity)."""
    subs = [
        m
        for m in encoder.modules()
        if isinstance(m, VariantAttentionSublayer) and m.entity_bias is not None
    ]
    if not subs:
        raise ValueError("the encoder has no entity-aware attention sub-layer")
    for sub in subs:
        sub.entity_keys = mask
    try:
        yield
    finally:
        for sub in subs:
            sub.entity_keys = None


def entity_keys_if(encoder: nn.Module, mask: Tensor | None) -> AbstractContextManager[None]:
    """:func:`entity_keys` when a batch carries an entity mask, else nothing to enter (an
    encoder without entity-aware attention then runs as it is)."""
    return nullcontext() if mask is None else entity_keys(encoder, mask)


def attention_options(encoder: BertEncoder) -> AttentionOptions:
    """The variant options of ``encoder``'s self-attention sub-layers (plain if none)."""
    for m in encoder.modules():
        if isinstance(m, VariantAttentionSublayer):
            return m.options
    return AttentionOptions()
