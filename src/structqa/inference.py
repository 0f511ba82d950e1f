"""Batched inference over features: the one loop behind evaluation and the Predictor."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from structqa.decoding import DecodeConfig, SpanCollector
from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import Feature
from structqa.models.extractive import ExtractiveQAModel
from structqa.runtime import autocast


@torch.inference_mode()
def run_inference(
    model: ExtractiveQAModel,
    features: Sequence[Feature],
    decode: DecodeConfig,
    batch_size: int = 64,
    bf16: bool = False,
    device: torch.device | None = None,
    progress=None,
) -> SpanCollector:
    """Score every window (longest first, dynamically padded) and keep each window's n-best."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    collector = SpanCollector(decode)
    batches = sorted_batches([len(f) for f in features], batch_size)
    for idx in batches:
        batch = collate(features, idx).to(device)
        with autocast(device, bf16):
            out = model(batch)
        collector.add(out, batch.feature_index, batch.answer_mask)
        if progress is not None:
            progress(len(idx))
    model.train(was_training)
    return collector
