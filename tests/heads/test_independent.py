"""The Independent (BERT) head: masking and its cross-entropy loss."""

from __future__ import annotations

import math

import pytest
import torch
from head_helpers import make_batch

from structqa.heads import HEADS, IndependentHead, build_head
from structqa.heads.base import NEG


def test_shapes_and_masking() -> None:
    torch.manual_seed(0)
    head = IndependentHead(8)
    batch = make_batch([[1, 0, 1, 1, 0], [1, 0, 0, 1, 1]], [2, 0], [3, 0])
    hidden = torch.randn(2, 5, 8)
    out = head(hidden, batch)
    assert out.start_logits.shape == out.end_logits.shape == (2, 5)
    assert out.start_logits.dtype == torch.float32
    raw = hidden @ head.queries.q0.T  # (B, N, 2): plain dot products, no bias
    allowed = batch.answer_mask
    assert bool((out.start_logits[~allowed] == NEG).all())
    assert bool((out.end_logits[~allowed] == NEG).all())
    torch.testing.assert_close(out.start_logits[allowed], raw[..., 0][allowed])
    torch.testing.assert_close(out.end_logits[allowed], raw[..., 1][allowed])
    assert out.loss is not None and out.loss.shape == () and bool(torch.isfinite(out.loss))
    assert out.span_scores is None and out.null_scores is None


def test_loss_is_hand_computed_cross_entropy_average() -> None:
    head = IndependentHead(2)
    with torch.no_grad():  # start logit = h0, end logit = h1
        head.queries.q0.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    hidden = torch.tensor(
        [
            [[0.0, 0.5], [9.0, 9.0], [1.0, 2.5], [2.0, -0.5]],  # token 1 is a question token
            [[0.5, 1.5], [3.0, 0.5], [0.0, 3.5], [7.0, 7.0]],  # token 3 is padding
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
    assert head.queries.q0.grad is not None
    assert bool(head.queries.q0.grad.abs().sum() > 0)


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
    assert [(n, tuple(p.shape)) for n, p in head.named_parameters()] == [("queries.q0", (2, 16))]
    with pytest.raises(ValueError, match="did you mean 'independent'"):
        build_head("independant", 16)


def test_legacy_qa_outputs_checkpoint_loads_as_static_queries() -> None:
    # checkpoints saved before the query/scorer split hold a Linear(D, 2); its bias shifts
    # every start (end) logit alike, so dropping it changes no softmax and no decision
    torch.manual_seed(2)
    legacy = torch.nn.Linear(4, 2)
    head = IndependentHead(4)
    head.load_state_dict({"qa_outputs.weight": legacy.weight, "qa_outputs.bias": legacy.bias})
    torch.testing.assert_close(head.queries.q0, legacy.weight)
    batch = make_batch([[1, 0, 1, 1]], [2], [3])
    hidden = torch.randn(1, 4, 4)
    out = head(hidden, batch)
    raw = legacy(hidden)  # (B, N, 2) with the bias
    allowed = batch.answer_mask
    torch.testing.assert_close(
        out.start_logits[allowed].log_softmax(-1), raw[..., 0][allowed].log_softmax(-1)
    )


@pytest.mark.parametrize("name", ["independent", "joint", "dyrex", "dyref"])
def test_query_init_std_sets_the_scale_of_q0(name):
    torch.manual_seed(0)
    q0 = build_head(name, 384, num_heads=4).queries.q0
    assert q0.std().item() == pytest.approx(1.0 if name == "dyref" else 0.02, rel=0.1)
    torch.manual_seed(0)
    wide = build_head(name, 384, num_heads=4, query_init_std=0.5).queries.q0
    assert wide.std().item() == pytest.approx(0.5, rel=0.1)


def test_static_queries_keep_berts_draw_by_default():
    """Unset, the static queries are the first N(0, 0.02) draw after the seed, as they were
    before the option existed (so earlier runs' seeds reproduce)."""
    torch.manual_seed(0)
    q0 = build_head("independent", 384, num_heads=4).queries.q0
    torch.manual_seed(0)
    assert torch.equal(q0, torch.empty(2, 384).normal_(std=0.02))
