"""Logits -> n-best answers, vectorized per batch, merged across overlapping windows.

Dimension letters: B batch of windows, N tokens, L max answer length, K n-best.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Candidate:
    text: str
    start_char: int
    end_char: int
    score: float
    probability: float = 0.0


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
    nbest: tuple[Candidate, ...] = field(default=())

    def answer(self, null_threshold: float | None) -> str:
        """The text to report: '' when no-answer wins under the threshold (SQuAD 2.0)."""
        if null_threshold is not None and self.null_odds > null_threshold:
            return ""
        return self.text


class SpanCollector:
    """Accumulates per-window top spans batch by batch, then merges per example."""

    def __init__(self, cfg: DecodeConfig = DecodeConfig()):
        self.cfg = cfg
        self._feat: list[np.ndarray] = []
        self._start: list[np.ndarray] = []
        self._end: list[np.ndarray] = []
        self._score: list[np.ndarray] = []
        self._null_feat: list[np.ndarray] = []
        self._null: list[np.ndarray] = []

    @torch.no_grad()
    def add(self, output: HeadOutput, feature_index: Tensor, answer_mask: Tensor) -> None:
        start, end = output.start_logits.float(), output.end_logits.float()
        b, n = start.shape
        L = self.cfg.max_answer_length
        if output.span_scores is not None:
            band = output.span_scores.float()  # (B, N, L)
            null = output.null_scores.float()
        else:
            band = span_band(start, end, L)  # (B, N, L)
            null = start[:, 0] + end[:, 0]
        ctx = answer_mask.clone()
        ctx[:, 0] = False  # [CLS] is the null answer, not a span
        pad = ctx.new_zeros(b, L - 1)
        end_ok = torch.cat([ctx, pad], 1).unfold(1, L, 1)  # (B, N, L)
        valid = ctx[:, :, None] & end_ok
        band = band[:, :, : end_ok.shape[2]].masked_fill(~valid, -torch.inf)
        k = min(self.cfg.n_best, n * L)
        scores, flat = band.reshape(b, -1).topk(k, dim=1)  # (B, K)
        keep = scores > NEG / 2
        starts, lens = flat // L, flat % L
        rows = feature_index[:, None].expand(b, k)
        self._feat.append(rows[keep].cpu().numpy())
        self._start.append(starts[keep].cpu().numpy())
        self._end.append((starts + lens)[keep].cpu().numpy())
        self._score.append(scores[keep].cpu().numpy())
        self._null_feat.append(feature_index.cpu().numpy())
        self._null.append(null.cpu().numpy())

    def predictions(
        self, examples: Sequence[Example], features: Sequence[Feature]
    ) -> dict[str, Prediction]:
        """Merge windows: per example, the best distinct answer texts across its windows."""
        feat = np.concatenate(self._feat) if self._feat else np.zeros(0, dtype=np.int64)
        starts = np.concatenate(self._start) if self._start else feat
        ends = np.concatenate(self._end) if self._end else feat
        scores = np.concatenate(self._score) if self._score else feat.astype(float)
        null_by_example: dict[int, float] = {}
        for f, s in zip(np.concatenate(self._null_feat), np.concatenate(self._null), strict=True):
            e = features[f].example_index
            null_by_example[e] = min(null_by_example.get(e, np.inf), float(s))
        by_example: dict[int, list[int]] = defaultdict(list)
        for row, f in enumerate(feat):
            by_example[features[f].example_index].append(row)
        out: dict[str, Prediction] = {}
        for e, null in null_by_example.items():
            ex = examples[e]
            rows = sorted(by_example.get(e, []), key=lambda r: -scores[r])
            cands: list[Candidate] = []
            seen: set[str] = set()
            for r in rows:
                offs = features[feat[r]].offsets
                cs, ce = int(offs[starts[r], 0]), int(offs[ends[r], 1])
                text = ex.context[cs:ce]
                if text in seen:
                    continue
                seen.add(text)
                cands.append(Candidate(text, cs, ce, float(scores[r])))
                if len(cands) == self.cfg.n_best:
                    break
            if cands:
                sc = np.array([c.score for c in cands])
                probs = np.exp(sc - sc.max())
                probs /= probs.sum()
                cands = [
                    Candidate(c.text, c.start_char, c.end_char, c.score, float(p))
                    for c, p in zip(cands, probs, strict=True)
                ]
                best = cands[0]
            else:
                best = Candidate("", -1, -1, NEG)
            out[ex.id] = Prediction(
                id=ex.id,
                text=best.text,
                start_char=best.start_char,
                end_char=best.end_char,
                score=best.score,
                null_score=null,
                null_odds=null - best.score,
                nbest=tuple(cands),
            )
        return out
