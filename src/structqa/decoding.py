"""Logits -> n-best answers, vectorized per batch, merged across overlapping windows.

Two candidate sets per window: ``"topk"`` (default; BERT's and the HF example's: the
``n_best`` best starts x the ``n_best`` best ends, kept when they form a valid span) and
``"all"`` (every valid span of length <= max_answer_length, exact). Heads that score spans
jointly (HeadOutput.span_scores) are always searched exactly over their (B, N, L) band.

Dimension letters: B batch of windows, N tokens, L max answer length, K kept spans.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from structqa.data.records import Example
from structqa.features.squad import Feature
from structqa.heads.base import NEG, HeadOutput, span_band


@dataclass(frozen=True)
class DecodeConfig:
    n_best: int = 20
    max_answer_length: int = 30
    candidates: str = "topk"  # "topk" (BERT/HF candidate set) | "all" (exact band search)
    window_factor: int = 3  # spans kept per window = n_best * window_factor (texts can repeat)

    def __post_init__(self) -> None:
        if self.candidates not in ("topk", "all"):
            raise ValueError(f"candidates must be 'topk' or 'all', not {self.candidates!r}")


class Candidate(NamedTuple):
    """One n-best entry (a tuple: decoding creates tens of thousands of them)."""

    text: str
    start_char: int
    end_char: int
    score: float
    probability: float = 0.0


class LazyNBest:
    """An example's n-best spans kept as rows of shared lists; texts are cut from the
    context only when the n-best list is read (most callers need only the best answer)."""

    __slots__ = ("context", "rows", "starts", "ends", "scores", "probs", "n_best")

    def __init__(
        self,
        context: str,
        rows: range,
        starts: list[int],
        ends: list[int],
        scores: list[float],
        probs: list[float],
        n_best: int,
    ):
        self.context, self.rows, self.n_best = context, rows, n_best
        self.starts, self.ends, self.scores, self.probs = starts, ends, scores, probs

    def materialize(self) -> tuple[Candidate, ...]:
        rows, ctx = self.rows, self.context
        head = rows[: self.n_best]
        texts = [ctx[self.starts[r] : self.ends[r]] for r in head]
        if len(set(texts)) == len(texts):  # the usual case: no text repeats
            return tuple(
                Candidate(t, self.starts[r], self.ends[r], self.scores[r], self.probs[r])
                for t, r in zip(texts, head, strict=True)
            )
        picked: dict[str, int] = {}  # a text recurring at several positions: its best span
        for r in rows:
            text = ctx[self.starts[r] : self.ends[r]]
            if text not in picked:
                picked[text] = r
                if len(picked) == self.n_best:
                    break
        top = self.scores[rows[0]]
        weights = [math.exp(self.scores[r] - top) for r in picked.values()]
        total = sum(weights)
        return tuple(
            Candidate(t, self.starts[r], self.ends[r], self.scores[r], w / total)
            for (t, r), w in zip(picked.items(), weights, strict=True)
        )


@dataclass(frozen=True)
class Prediction:
    """The answer to one question: best non-null span, the null score and the n-best."""

    id: str
    text: str
    start_char: int
    end_char: int
    score: float
    null_score: float  # score of the no-answer span (lowest over windows)
    null_odds: float  # null_score - best span score; > threshold -> "no answer"
    nbest_source: tuple[Candidate, ...] | LazyNBest = ()

    @property
    def nbest(self) -> tuple[Candidate, ...]:
        """The n-best distinct answer texts, best first, with softmax probabilities."""
        src = self.nbest_source
        return src if isinstance(src, tuple) else src.materialize()

    def answer(self, null_threshold: float | None) -> str:
        """The text to report: '' when no-answer wins under the threshold (SQuAD 2.0)."""
        if null_threshold is not None and self.null_odds > null_threshold:
            return ""
        return self.text


def _topk_candidates(
    start: np.ndarray, end: np.ndarray, ctx: np.ndarray, k: int, keep: int, max_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best starts x best ends -> the ``keep`` best valid spans: (scores, starts, ends), (B, K).

    In numpy: on CPU its per-call overhead is a fraction of torch's for arrays this small."""
    b = start.shape[0]
    start, end = np.where(ctx, start, -np.inf), np.where(ctx, end, -np.inf)
    s_idx = np.argpartition(-start, k - 1, axis=1)[:, :k]  # (B, k), unordered
    e_idx = np.argpartition(-end, k - 1, axis=1)[:, :k]
    length = e_idx[:, None, :] - s_idx[:, :, None]  # (B, k, k)
    scores = (
        np.take_along_axis(start, s_idx, 1)[:, :, None]
        + np.take_along_axis(end, e_idx, 1)[:, None, :]
    )
    scores[(length < 0) | (length >= max_len)] = -np.inf
    scores = scores.reshape(b, k * k)
    kk = min(keep, k * k)
    top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]  # (B, K)
    return (
        np.take_along_axis(scores, top, 1),
        np.take_along_axis(s_idx, top // k, 1),
        np.take_along_axis(e_idx, top % k, 1),
    )


def _band_candidates(band: Tensor, ctx: Tensor, keep: int) -> tuple[Tensor, Tensor, Tensor]:
    """Exact search over the (B, N, L) band of span scores."""
    b, n, L = band.shape
    end_ok = torch.cat([ctx, ctx.new_zeros(b, L - 1)], 1).unfold(1, L, 1)  # (B, N, L)
    band = band.masked_fill(~(ctx[:, :, None] & end_ok), -torch.inf)
    scores, flat = band.reshape(b, -1).topk(min(keep, n * L), dim=1)  # (B, K)
    starts = flat // L
    return scores, starts, starts + flat % L


class SpanCollector:
    """Accumulates per-window top spans batch by batch, then merges per example."""

    def __init__(self, cfg: DecodeConfig = DecodeConfig()):
        self.cfg = cfg
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._nulls: list[tuple[np.ndarray, np.ndarray]] = []

    @torch.no_grad()
    def add(self, output: HeadOutput, feature_index: Tensor, answer_mask: Tensor) -> None:
        cfg = self.cfg
        keep = cfg.n_best * cfg.window_factor
        rows = feature_index.cpu().numpy()
        if output.span_scores is None and cfg.candidates == "topk":
            start = output.start_logits.float().cpu().numpy()
            end = output.end_logits.float().cpu().numpy()
            ctx = answer_mask.cpu().numpy().copy()
            ctx[:, 0] = False  # [CLS] is the null answer, not a span
            null = start[:, 0] + end[:, 0]
            k = min(cfg.n_best, start.shape[1])
            scores, starts, ends = _topk_candidates(start, end, ctx, k, keep, cfg.max_answer_length)
        else:
            ctx_t = answer_mask.clone()
            ctx_t[:, 0] = False
            if output.span_scores is not None:
                if output.span_scores.shape[2] != cfg.max_answer_length:
                    raise ValueError(
                        f"the head scores spans up to {output.span_scores.shape[2]} tokens but "
                        f"decoding asks for {cfg.max_answer_length}: build the head with the "
                        "same decode.max_answer_length"
                    )
                null_t = output.null_scores.float()
                band = output.span_scores.float()
            else:
                start_t, end_t = output.start_logits.float(), output.end_logits.float()
                null_t = start_t[:, 0] + end_t[:, 0]
                band = span_band(start_t, end_t, cfg.max_answer_length)
            found = _band_candidates(band, ctx_t, keep)
            scores, starts, ends = (t.cpu().numpy() for t in found)
            null = null_t.cpu().numpy()
        ok = scores > NEG / 2  # drops -inf padding and masked tokens
        rows_k = np.broadcast_to(rows[:, None], scores.shape)
        self._parts.append((rows_k[ok], starts[ok], ends[ok], scores[ok]))
        self._nulls.append((rows, null))

    def predictions(
        self, examples: Sequence[Example], features: Sequence[Feature]
    ) -> dict[str, Prediction]:
        """Merge windows: per example, the best distinct answer texts across its windows."""
        if not self._nulls:
            return {}
        feat, starts, ends, scores = (np.concatenate(c) for c in zip(*self._parts, strict=True))
        example_of = np.fromiter((f.example_index for f in features), np.int64, len(features))
        # char spans of every candidate at once, from one flat offsets table
        base = np.zeros(len(features) + 1, dtype=np.int64)
        np.cumsum([len(f) for f in features], out=base[1:])
        flat = np.concatenate([f.offsets for f in features])  # (sum N, 2)
        char_start = flat[base[feat] + starts, 0]
        char_end = flat[base[feat] + ends, 1]
        cand_ex = example_of[feat]
        # best first within each example (the same span seen from two overlapping windows
        # is one text: the n-best keeps each text once, see LazyNBest)
        order = np.lexsort((-scores, cand_ex))
        cand_ex, scores = cand_ex[order], scores[order]
        bounds = np.searchsorted(cand_ex, np.arange(len(examples) + 1))
        # softmax over each example's first n_best spans, all examples at once
        n_best = self.cfg.n_best
        rank = np.arange(len(cand_ex)) - bounds[cand_ex]
        top = scores[bounds[cand_ex]]
        weights = np.where(rank < n_best, np.exp(scores - top), 0.0)
        totals = np.bincount(cand_ex, weights=weights, minlength=len(examples))
        probs = (weights / np.maximum(totals[cand_ex], 1e-300)).tolist()
        scores_l, bounds_l = scores.tolist(), bounds.tolist()
        char_start, char_end = char_start[order].tolist(), char_end[order].tolist()
        null_feat, null = (np.concatenate(c) for c in zip(*self._nulls, strict=True))
        # the null score of an example: the lowest over its windows (as in BERT's run_squad)
        null_ex = example_of[null_feat]
        by_ex = np.argsort(null_ex, kind="stable")
        present, first_window = np.unique(null_ex[by_ex], return_index=True)
        null_by_ex = np.full(len(examples), np.inf)
        null_by_ex[present] = np.minimum.reduceat(null[by_ex], first_window)
        null_list = null_by_ex.tolist()
        out: dict[str, Prediction] = {}
        for e in present.tolist():
            ex, context = examples[e], examples[e].context
            null_score = null_list[e]
            lo, hi = bounds_l[e], bounds_l[e + 1]
            if lo == hi:
                out[ex.id] = Prediction(ex.id, "", -1, -1, NEG, null_score, null_score - NEG)
                continue
            nbest = LazyNBest(context, range(lo, hi), char_start, char_end, scores_l, probs, n_best)
            cs, ce, score = char_start[lo], char_end[lo], scores_l[lo]
            out[ex.id] = Prediction(
                ex.id, context[cs:ce], cs, ce, score, null_score, null_score - score, nbest
            )
        return out
