"""Builders shared by the head tests (imported by name; pytest collects no tests here)."""

from __future__ import annotations

from pathlib import Path

import torch

from structqa.encoders.bert import BertEncoder
from structqa.features.batching import Batch
from structqa.heads import build_head
from structqa.heads.base import QueryStates
from structqa.models.extractive import ExtractiveQAModel

HEAD_NAMES = ("independent", "joint", "dyrex", "dyref", "dyrex+joint", "dyref+joint")


def make_batch(
    answer_mask: list[list[int]],
    starts: list[int],
    ends: list[int],
    attention_mask: list[list[int]] | None = None,
) -> Batch:
    mask = torch.tensor(answer_mask, dtype=torch.bool)
    b, n = mask.shape
    attn = torch.ones(b, n, dtype=torch.long)
    if attention_mask is not None:
        attn = torch.tensor(attention_mask, dtype=torch.long)
    return Batch(
        input_ids=torch.zeros(b, n, dtype=torch.long),
        attention_mask=attn,
        token_type_ids=torch.zeros(b, n, dtype=torch.long),
        answer_mask=mask,
        start_positions=torch.tensor(starts),
        end_positions=torch.tensor(ends),
        feature_index=torch.arange(b),
    )


def random_states(
    b: int, n: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float32
) -> QueryStates:
    g = torch.Generator().manual_seed(seed)
    queries = torch.randn(b, 2, d, generator=g, dtype=dtype)
    tokens = torch.randn(b, n, d, generator=g, dtype=dtype)
    return QueryStates(queries, tokens)


def tiny_model(checkpoint: Path, head: str, **options: object) -> ExtractiveQAModel:
    """The tiny encoder plus a fresh head (seeded), in eval mode (no dropout)."""
    torch.manual_seed(0)
    encoder = BertEncoder.from_pretrained(checkpoint)
    model = ExtractiveQAModel(encoder, build_head(head, encoder.config, **options))
    return model.eval()
