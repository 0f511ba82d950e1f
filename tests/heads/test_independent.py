"""The Independent (BERT) head: masking and its cross-entropy loss."""

from __future__ import annotations

import math

import pytest
import torch

from structqa.features.batching import Batch
from structqa.heads import HEADS, IndependentHead, build_head
from structqa.heads.base import NEG


def make_batch(answer_mask: list[list[int]], starts: list[int], ends: list[int]) -> Batch:
    mask = torch.tensor(answer_mask, dtype=torch.bool)
    b, n = mask.shape
    return Batch(
        input_ids=torch.zeros(b, n, dtype=torch.long),
        attention_mask=torch.ones(b, n, dtype=torch.long),
        token_type_ids=torch.zeros(b, n, dtype=torch.long),
        answer_mask=mask,
        start_positions=torch.tensor(starts),
        end_positions=torch.tensor(ends),
        feature_index=torch.arange(b),
    )


def test_shapes_and_masking() -> None:
    torch.manual_seed(0)
    head = IndependentHead(8)
    batch = make_batch([[1, 0, 1, 1, 0], [1, 0, 0, 1, 1]], [2, 0], [3, 0])
    hidden = torch.randn(2, 5, 8)
    out = head(hidden, batch)
    assert out.start_logits.shape == out.end_logits.shape == (2, 5)
    assert out.start_logits.dtype == torch.float32
    raw = hidden @ head.qa_outputs.weight.T + head.qa_outputs.bias  # (B, N, 2)
    allowed = batch.answer_mask
    assert bool((out.start_logits[~allowed] == NEG).all())
    assert bool((out.end_logits[~allowed] == NEG).all())
    torch.testing.assert_close(out.start_logits[allowed], raw[..., 0][allowed])
    torch.testing.assert_close(out.end_logits[allowed], raw[..., 1][allowed])
    assert out.loss is not None and out.loss.shape == () and bool(torch.isfinite(out.loss))
    assert out.span_scores is None and out.null_scores is None


def test_loss_is_hand_computed_cross_entropy_average() -> None:
    head = IndependentHead(2)
    with torch.no_grad():  # start logit = h0, end logit = h1 + 0.5
        head.qa_outputs.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        head.qa_outputs.bias.copy_(torch.tensor([0.0, 0.5]))
    hidden = torch.tensor(
        [
            [[0.0, 0.0], [9.0, 9.0], [1.0, 2.0], [2.0, -1.0]],  # token 1 is a question token
            [[0.5, 1.0], [3.0, 0.0], [0.0, 3.0], [7.0, 7.0]],  # token 3 is padding
        ]
    )
    batch = make_batch([[1, 0, 1, 1], [1, 1, 1, 0]], starts=[2, 0], ends=[3, 2])

    def ce(logits: list[float], target: int) -> float:
        return -logits[target] + math.log(sum(math.exp(x) for x in logits))

    # masked tokens contribute exp(NEG) = 0 to the normalizer
    start_0, end_0 = [0.0, 1.0, 2.0], [0.5, 2.5, -0.5]  # tokens 0, 2, 3
    start_1, end_1 = [0.5, 3.0, 0.0], [1.5, 0.5, 3.5]  # tokens 0, 1, 2
    expected = (
        (ce(start_0, 1) + ce(start_1, 0)) / 2  # targets re-indexed to the unmasked lists
        + (ce(end_0, 2) + ce(end_1, 2)) / 2
    ) / 2
    out = head(hidden, batch)
    assert out.loss is not None
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    assert out.start_logits.tolist() == [[0.0, NEG, 1.0, 2.0], [0.5, 3.0, 0.0, NEG]]
    assert out.end_logits.tolist() == [[0.5, NEG, 2.5, -0.5], [1.5, 0.5, 3.5, NEG]]


def test_loss_gradient_reaches_the_head() -> None:
    torch.manual_seed(1)
    head = IndependentHead(4)
    batch = make_batch([[1, 1, 1]], [1], [2])
    out = head(torch.randn(1, 3, 4), batch)
    out.loss.backward()
    assert head.qa_outputs.weight.grad is not None
    assert bool(head.qa_outputs.weight.grad.abs().sum() > 0)


def test_bf16_hidden_gives_float32_logits() -> None:
    head = IndependentHead(4).to(torch.bfloat16)
    batch = make_batch([[1, 0, 1]], [2], [2])
    out = head(torch.randn(1, 3, 4, dtype=torch.bfloat16), batch)
    assert out.start_logits.dtype == torch.float32
    assert out.start_logits[0, 1].item() == NEG
    assert bool(torch.isfinite(out.loss))


def test_registry_builds_the_head_and_names_unknown_ones() -> None:
    assert "independent" in HEADS
    head = build_head("independent", 16)
    assert isinstance(head, IndependentHead)
    assert head.qa_outputs.weight.shape == (2, 16)
    assert bool((head.qa_outputs.bias == 0).all())
    with pytest.raises(ValueError, match="did you mean 'independent'"):
        build_head("independant", 16)
