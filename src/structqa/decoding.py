"""Logits -> n-best answers, vectorized per batch, merged across overlapping windows.

Dimension letters: B batch of windows, N tokens, L max answer length, K n-best.
"""

from __future__ import annotations

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
    window_factor: int = 3  # spans kept per window = n_best * window_factor


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
        band = band.masked_fill(~valid, -torch.inf)
        # more spans than n_best per window: the same text can recur at several positions,
        # and the n-best list holds distinct texts
        k = min(self.cfg.n_best * self.cfg.window_factor, n * L)
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
        if not self._null:
            return {}
        feat = np.concatenate(self._feat)
        starts, ends = np.concatenate(self._start), np.concatenate(self._end)
        scores = np.concatenate(self._score)
        example_of = np.fromiter((f.example_index for f in features), np.int64, len(features))
        # char spans of every candidate at once, from one flat offsets table
        base = np.zeros(len(features) + 1, dtype=np.int64)
        np.cumsum([len(f) for f in features], out=base[1:])
        flat = np.concatenate([f.offsets for f in features])  # (sum N, 2)
        char_start = flat[base[feat] + starts, 0]
        char_end = flat[base[feat] + ends, 1]
        # candidates grouped by example, best first
        cand_ex = example_of[feat]
        order = np.lexsort((-scores, cand_ex))
        cand_ex = cand_ex[order]
        bounds = np.searchsorted(cand_ex, np.arange(len(examples) + 1))
        # the null score of an example: the lowest over its windows (as in BERT's run_squad)
        null_feat, null = np.concatenate(self._null_feat), np.concatenate(self._null)
        null_by_ex = np.full(len(examples), np.inf)
        np.minimum.at(null_by_ex, example_of[null_feat], null)
        out: dict[str, Prediction] = {}
        for e in np.unique(example_of[null_feat]).tolist():
            ex = examples[e]
            cands: list[Candidate] = []
            seen: set[str] = set()
            for r in order[bounds[e] : bounds[e + 1]].tolist():
                cs, ce = int(char_start[r]), int(char_end[r])
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
            null_score = float(null_by_ex[e])
            out[ex.id] = Prediction(
                id=ex.id,
                text=best.text,
                start_char=best.start_char,
                end_char=best.end_char,
                score=best.score,
                null_score=null_score,
                null_odds=null_score - best.score,
                nbest=tuple(cands),
            )
        return out
