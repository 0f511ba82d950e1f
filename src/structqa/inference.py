"""Batched inference over features: the one loop behind evaluation and the Predictor."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from structqa.decoding import DecodeConfig, SpanCollector
from structqa.features.batching import collate, sorted_batches
from structqa.features.squad import Feature
from structqa.models.extractive import ExtractiveQAModel
from structqa.runtime import autocast


def bf16_weights(model: nn.Module) -> nn.Module:
    """``model`` with bf16 weights for inference: itself when its floating-point weights are
    already bf16, else a bf16 copy (the original is left as it is, e.g. mid-training).

    Running the whole forward in bf16 avoids autocast's fp32<->bf16 copies around every
    linear layer (they took about a third of the forward's CPU time): measured 1.3-1.4x
    the autocast throughput on the 2-core CPU, with the same held-out F1 within 0.2
    (benchmarks/bench_vs_hf.py). Heads still compute their logits in float32
    (:func:`structqa.heads.base.dot_logits`)."""
    floats = [p.dtype for p in model.parameters() if p.is_floating_point()]
    if floats and all(d == torch.bfloat16 for d in floats):
        return model
    return copy.deepcopy(model).to(torch.bfloat16)


@torch.inference_mode()
def run_inference(
    model: ExtractiveQAModel,
    features: Sequence[Feature],
    decode: DecodeConfig,
    batch_size: int = 16,
    bf16: bool = False,
    device: torch.device | None = None,
    progress=None,
    shard: tuple[int, int] = (0, 1),
    pad_to_multiple: int = 1,
) -> SpanCollector:
    """Score every window (longest first, dynamically padded) and keep each window's n-best.

    With ``bf16`` the forward runs on bf16 weights (:func:`bf16_weights`: a copy unless the
    model is bf16 already), under autocast for any op that still meets float32 inputs.
    ``shard=(rank, world)`` scores every world-th batch from the rank-th on (each process of
    a distributed evaluation takes one shard; :meth:`SpanCollector.merge` joins them)."""
    # a torch module, or an exported graph on onnxruntime (structqa.runtimes: it has a
    # device of its own and no bf16 weights to make)
    device = device or getattr(model, "device", None) or next(model.parameters()).device
    if bf16 and not isinstance(model, nn.Module):
        raise ValueError(f"bf16 is a torch precision; {type(model).__name__} has its own")
    was_training = model.training
    model.eval()
    net = bf16_weights(model) if bf16 else model
    collector = SpanCollector(decode)
    rank, world = shard
    batches = sorted_batches([len(f) for f in features], batch_size)[rank::world]
    for idx in batches:
        batch = collate(features, idx, pad_to_multiple=pad_to_multiple).to(device)
        with autocast(device, bf16):
            out = net(batch)
        collector.add(out, batch.feature_index, batch.answer_mask)
        if progress is not None:
            progress(len(idx))
    model.train(was_training)
    return collector
