"""The answerability head: its loss, its outputs, and decoding with its null odds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from head_helpers import make_batch

from structqa.data.records import Example
from structqa.decoding import SpanCollector
from structqa.features.squad import Feature
from structqa.heads import AnswerabilityHead, build_head
from structqa.heads.answerability import answerability_loss
from structqa.heads.base import NEG, HeadOutput

pytestmark = pytest.mark.usefixtures("one_thread")

# two windows with the answer (tokens 2..3), two without
MASK = [[1, 0, 1, 1, 1]] * 4
STARTS, ENDS = [2, 2, 0, 0], [3, 3, 0, 0]


@pytest.mark.parametrize(("head", "source"), [("independent", "cls"), ("dyrex", "queries")])
def test_outputs_mask_cls_and_train_the_classifier(head: str, source: str):
    torch.manual_seed(0)
    model = build_head(head, 16, num_heads=2, null_head=source)
    assert isinstance(model, AnswerabilityHead)
    out = model(torch.randn(4, 5, 16), make_batch(MASK, STARTS, ENDS))
    assert out.null_odds is not None and out.null_odds.shape == (4,)
    assert torch.all(out.start_logits[:, 0] == NEG) and torch.all(out.end_logits[:, 0] == NEG)
    assert out.loss is not None and torch.isfinite(out.loss)
    out.loss.backward()
    assert model.classifier[3].weight.grad.abs().sum() > 0


def test_loss_by_hand_balanced_and_not():
    """Span CE over the two answer windows only; BCE with each class half the weight."""
    batch = make_batch([[1, 0, 1, 1, 1]] * 3, [2, 0, 0], [3, 0, 0])
    start = torch.tensor([[NEG, NEG, 1.0, 0.0, 0.0]] * 3)
    end = torch.tensor([[NEG, NEG, 0.0, 2.0, 0.0]] * 3)
    logit = torch.tensor([1.0, -1.0, 0.5])
    span = (-torch.log_softmax(start[0], 0)[2] - torch.log_softmax(end[0], 0)[3]) / 2
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    pos = bce(logit[:1], torch.ones(1))
    neg = bce(logit[1:], torch.zeros(2))  # mean of the two negatives
    balanced = answerability_loss(start, end, logit, batch, 2.0, balanced=True)
    assert balanced.item() == pytest.approx((span + 2.0 * (pos + neg) / 2).item(), rel=1e-5)
    plain = answerability_loss(start, end, logit, batch, 1.0, balanced=False)
    mean = bce(logit, torch.tensor([1.0, 0.0, 0.0]))
    assert plain.item() == pytest.approx((span + mean).item(), rel=1e-5)


def test_unknown_null_head_and_joint_scorer_are_errors():
    with pytest.raises(ValueError, match="unknown null head 'clss'"):
        build_head("independent", 16, null_head="clss")
    head = build_head("joint", 16, null_head="cls")
    with pytest.raises(ValueError, match="independent start/end scorers only"):
        head(torch.randn(1, 5, 16), make_batch(MASK[:1], [2], [3]))


def _feature(example: int, n: int) -> Feature:
    offsets = np.full((n, 2), -1, dtype=np.int64)
    for t in range(1, n):
        offsets[t] = (2 * (t - 1), 2 * (t - 1) + 1)
    ids = np.zeros(n, dtype=np.int64)
    return Feature(example, ids, ids, offsets)


def test_decoding_thresholds_the_classifier_odds_as_they_are():
    """null_odds of a question = the lowest window odds, not minus the best span's score."""
    examples = [Example("a", "q?", "x y z w")]
    features = [_feature(0, 5), _feature(0, 5)]
    start = torch.tensor([[0.0, 5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0, 0.0]])
    out = HeadOutput(start, start.clone(), null_odds=torch.tensor([1.5, -0.5]))
    collector = SpanCollector()
    collector.add(out, torch.tensor([0, 1]), torch.ones(2, 5, dtype=torch.bool))
    pred = collector.predictions(examples, features)["a"]
    assert pred.null_odds == pytest.approx(-0.5) and pred.text == "x"
