"""The Joint scorer: band == full on short spans, losses against explicit loops, memory."""

from __future__ import annotations

import math

import pytest
import torch
from head_helpers import make_batch, random_states
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from structqa.features.batching import Batch
from structqa.heads.base import NEG, QueryStates
from structqa.heads.joint import BandJointScorer, FullJointScorer, JointScorer, joint_scorer

L = 3
# CLS, question tokens 1-2, passage 3-7, padding 8-9 (row 1 also has a shorter passage)
ANSWER_MASK = [
    [1, 0, 0, 1, 1, 1, 1, 1, 0, 0],
    [1, 0, 1, 1, 1, 1, 0, 0, 0, 0],
    [1, 0, 0, 1, 1, 1, 1, 1, 0, 0],
    [1, 0, 0, 1, 1, 1, 1, 1, 1, 1],
]
STARTS, ENDS = [4, 0, 3, 6], [5, 0, 7, 6]  # row 2's gold span has 5 tokens > L


def example(seed: int = 0) -> tuple[QueryStates, Batch, torch.Tensor]:
    states = random_states(4, 10, 6, seed=seed, dtype=torch.float64)
    w = 0.3 * torch.randn(
        6, 6, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64
    )
    return states, make_batch(ANSWER_MASK, STARTS, ENDS), w


def scorers(w: torch.Tensor) -> tuple[JointScorer, JointScorer]:
    band, full = joint_scorer(6, L, "band"), joint_scorer(6, L, "full")
    for s in (band, full):
        s.double()
        with torch.no_grad():
            s.W.copy_(w)
    return band, full


def phi(states: QueryStates, w: torch.Tensor, b: int, i: int, j: int) -> float:
    q, h = states.queries[b].tolist(), states.tokens[b].tolist()
    d = len(q[0])
    score = sum(q[0][k] * h[i][k] + q[1][k] * h[j][k] for k in range(d))
    return score + sum(h[i][k] * w[k, m].item() * h[j][m] for k in range(d) for m in range(d))


def brute_force_nll(
    states: QueryStates, w: torch.Tensor, batch: Batch, max_len: int | None
) -> list[float | None]:
    """-log p(gold) per row by explicit loops over every valid span plus (0, 0); None where the
    gold span is not among the scored spans."""
    out: list[float | None] = []
    for b in range(len(batch)):
        passage = [i for i, a in enumerate(batch.answer_mask[b].tolist()) if a and i > 0]
        spans = [
            (i, j)
            for i in passage
            for j in passage
            if i <= j and (max_len is None or j - i < max_len)
        ]
        scores = {span: phi(states, w, b, *span) for span in spans}
        scores[(0, 0)] = phi(states, w, b, 0, 0)
        gold = (int(batch.start_positions[b]), int(batch.end_positions[b]))
        top = max(scores.values())
        log_z = top + math.log(sum(math.exp(v - top) for v in scores.values()))
        out.append(log_z - scores[gold] if gold in scores else None)
    return out


def test_band_and_full_agree_on_every_short_span_and_the_null() -> None:
    states, batch, w = example()
    band, full = scorers(w)
    a, b = band(states, batch), full(states, batch)
    assert a.span_scores is not None and b.span_scores is not None
    assert a.span_scores.shape == b.span_scores.shape == (4, 10, L)
    assert a.span_scores.dtype == torch.float64
    torch.testing.assert_close(a.span_scores, b.span_scores, rtol=0, atol=1e-12)
    torch.testing.assert_close(a.null_scores, b.null_scores, rtol=0, atol=1e-12)
    # and both are phi itself, also for the null span (0, 0)
    assert a.span_scores[0, 4, 1].item() == pytest.approx(phi(states, w, 0, 4, 5), abs=1e-10)
    assert a.null_scores[3].item() == pytest.approx(phi(states, w, 3, 0, 0), abs=1e-10)


def test_band_and_full_agree_under_bf16_autocast_too() -> None:
    """The full scorer computed its bilinear term in bf16 under autocast (the band one turns
    autocast off for it): scores apart by up to 0.77 where both should be float32's."""
    states, batch, w = example()
    as_float = QueryStates(states.queries.float(), states.tokens.float())
    band, full = (s.float() for s in scorers(w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a, b = band(as_float, batch), full(as_float, batch)
    torch.testing.assert_close(a.span_scores, b.span_scores, rtol=0, atol=1e-4)
    torch.testing.assert_close(a.null_scores, b.null_scores, rtol=0, atol=1e-4)


def test_invalid_spans_are_neg() -> None:
    states, batch, w = example()
    band, _ = scorers(w)
    spans = band(states, batch).span_scores
    assert spans is not None
    assert spans[0, 2, 0].item() == NEG  # starts on a question token
    assert spans[0, 6, 2].item() == NEG  # ends on padding
    assert spans[0, 0, 0].item() == NEG  # [CLS] is the null span, not a token span
    assert spans[3, 9, 1].item() == NEG  # past the sequence end
    assert spans[3, 8, 1].item() != NEG


def test_band_loss_equals_brute_force_and_skips_long_gold_spans() -> None:
    states, batch, w = example()
    band, _ = scorers(w)
    out = band(states, batch)
    nll = brute_force_nll(states, w, batch, max_len=L)
    assert nll[2] is None  # row 2's 5-token answer is not in the band
    kept = [x for x in nll if x is not None]
    assert out.loss is not None and out.loss_skipped is not None
    assert out.loss_skipped.tolist() == [False, False, True, False]
    assert out.loss.item() == pytest.approx(sum(kept) / len(kept), rel=1e-10)


def test_full_loss_equals_brute_force_over_spans_of_any_length() -> None:
    states, batch, w = example(seed=3)
    _, full = scorers(w)
    out = full(states, batch)
    nll = brute_force_nll(states, w, batch, max_len=None)
    assert all(x is not None for x in nll)
    assert out.loss_skipped is not None and not bool(out.loss_skipped.any())
    assert out.loss is not None
    assert out.loss.item() == pytest.approx(sum(nll) / len(nll), rel=1e-10)  # type: ignore[arg-type]


def test_all_rows_skipped_gives_a_zero_finite_loss() -> None:
    states, _, w = example()
    band, _ = scorers(w)
    batch = make_batch(ANSWER_MASK, [3, 2, 3, 3], [7, 5, 7, 8])  # every gold span longer than L
    out = band(states, batch)
    assert out.loss is not None and out.loss.item() == 0.0
    assert bool(out.loss_skipped.all())  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["band", "full"])
def test_w_starts_at_zero_and_learns(mode: str) -> None:
    states, batch, _ = example()
    scorer = joint_scorer(6, L, mode).double()
    assert bool((scorer.W == 0).all())
    out = scorer(states, batch)
    # with W = 0 a span's score is the independent start + end score
    expected = out.start_logits[0, 4] + out.end_logits[0, 5]
    assert out.span_scores[0, 4, 1].item() == pytest.approx(expected.item())  # type: ignore[index]
    out.loss.backward()  # type: ignore[union-attr]
    assert scorer.W.grad is not None and bool(scorer.W.grad.abs().sum() > 0)


def test_unknown_mode_names_the_closest() -> None:
    with pytest.raises(ValueError, match="did you mean 'band'"):
        joint_scorer(4, 30, "bnad")
    assert isinstance(joint_scorer(4, 30, "full"), FullJointScorer)
    assert isinstance(joint_scorer(4, 30), BandJointScorer)


class LargestTensor(TorchDispatchMode):
    """Records the largest storage produced by any operator (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("mode", ["band", "full"])
def test_band_never_materializes_an_n_by_n_tensor(mode: str) -> None:
    n, d = 512, 16
    states = random_states(1, n, d, seed=0)
    states.queries.requires_grad_(True)
    states.tokens.requires_grad_(True)
    passage = [1] + [0] * 15 + [1] * (n - 16)
    batch = make_batch([passage], [100], [110])
    scorer = joint_scorer(d, 30, mode)
    with LargestTensor() as probe:
        scorer(states, batch).loss.backward()  # type: ignore[union-attr]
    n_by_n = n * n * 4  # one float32 (N, N) matrix: 1 MiB
    if mode == "band":
        assert probe.largest < n_by_n / 4, probe.largest  # ~2 N L block scores: 125 KiB
    else:
        assert probe.largest >= n_by_n  # the instrument does see quadratic tensors
