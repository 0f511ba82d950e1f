"""Logits -> n-best answers, vectorized per batch, merged across overlapping windows.

Two candidate sets per window: ``"topk"`` (default; BERT's and the HF example's: the
``n_best`` best starts x the ``n_best`` best ends, kept when they form a valid span) and
``"all"`` (every valid span of length <= max_answer_length, exact). Heads that score spans
jointly (HeadOutput.span_scores) are always searched exactly over their (B, N, L) band.

Dimension letters: B batch of windows, N tokens, L max answer length, K kept spans.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from structqa.config import DecodeSettings
from structqa.data.records import Example
from structqa.features.squad import Feature
from structqa.heads.base import NEG, HeadOutput, span_band


@dataclass(frozen=True)
class DecodeConfig:
    n_best: int = 20
    max_answer_length: int = 30
    candidates: str = "topk"  # "topk" (BERT/HF candidate set) | "all" (exact band search)
    window_factor: int = 3  # spans kept per window = n_best * window_factor (texts can repeat)
    whole_words: bool = False  # widen a span that starts or ends inside a word to the word

    def __post_init__(self) -> None:
        if self.candidates not in ("topk", "all"):
            raise ValueError(f"candidates must be 'topk' or 'all', not {self.candidates!r}")

    @classmethod
    def from_settings(cls, settings: DecodeSettings) -> DecodeConfig:
        """The decoding of a config's ``decode`` section."""
        return cls(settings.n_best, settings.max_answer_length, whole_words=settings.whole_words)


# widening stops after this many characters on a side: a longer "word" (a URL, a run of
# digits) keeps the model's boundary
WORD_SPAN_MAX_WIDEN = 20


def _in_word(ch: str) -> bool:
    """A character that continues a word: a letter or digit, or a combining mark (an accent
    written apart from its letter); not a CJK ideograph or kana, where WordPiece puts a
    boundary around every character (as BERT's tokenizer does)."""
    if ch.isalnum():
        return not _is_cjk(ch)
    return unicodedata.category(ch).startswith("M")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x3040 <= cp <= 0x30FF  # hiragana, katakana
        or 0x3400 <= cp <= 0x4DBF
        or 0x4E00 <= cp <= 0x9FFF
        or 0xF900 <= cp <= 0xFAFF
        or 0x20000 <= cp <= 0x2FA1F
    )


def word_span(context: str, start: int, end: int) -> tuple[int, int]:
    """``context[start:end]`` widened to whole words: a start or end that falls inside a word
    (between two of its letters, digits or combining marks) moves out to the word's edge (a
    WordPiece span can end mid-word, e.g. "1990" of "1990s"). A span already on word
    boundaries, or empty, is returned as is; so is a side whose word goes on for more than
    :data:`WORD_SPAN_MAX_WIDEN` characters. CJK characters are words of their own."""
    if start >= end:
        return start, end
    s = start
    while s > 0 and start - s <= WORD_SPAN_MAX_WIDEN and _in_word(context[s - 1]):
        s -= 1
    if _in_word(context[start]) and start - s <= WORD_SPAN_MAX_WIDEN:
        start = s
    e, n = end, len(context)
    while e < n and e - end <= WORD_SPAN_MAX_WIDEN and _in_word(context[e]):
        e += 1
    if _in_word(context[end - 1]) and e - end <= WORD_SPAN_MAX_WIDEN:
        end = e
    return start, end


def _holds_a_word(
    examples: Sequence[Example], cand_ex: np.ndarray, char_start: np.ndarray, char_end: np.ndarray
) -> np.ndarray:
    """True where ``examples[cand_ex].context[char_start:char_end]`` holds a letter or digit:
    from one prefix count of such characters per distinct context (questions share them)."""
    first_of: dict[str, int] = {}
    counts: list[np.ndarray] = []
    at = np.empty(len(examples), dtype=np.int64)
    size = 0
    for i in np.unique(cand_ex).tolist():
        ctx = examples[i].context
        if ctx not in first_of:
            prefix = np.zeros(len(ctx) + 1, dtype=np.int32)
            np.cumsum(np.fromiter(map(str.isalnum, ctx), bool, len(ctx)), out=prefix[1:])
            first_of[ctx] = size
            counts.append(prefix)
            size += len(prefix)
        at[i] = first_of[ctx]
    if not counts:
        return np.ones(len(cand_ex), dtype=bool)
    flat = np.concatenate(counts)
    base = at[cand_ex]
    inside = char_start >= 0  # a span without character offsets is left to the caller
    start = np.where(inside, char_start, 0)
    return ~inside | (flat[base + np.maximum(char_end, start)] > flat[base + start])


class Candidate(NamedTuple):
    """One n-best entry (a tuple: decoding creates tens of thousands of them)."""

    text: str
    start_char: int
    end_char: int
    score: float
    probability: float = 0.0


class _CandidateTable(NamedTuple):
    """Every example's candidate spans, grouped by example (numpy arrays; within an
    example in window order, not sorted)."""

    starts: np.ndarray
    ends: np.ndarray
    scores: np.ndarray


class LazyNBest:
    """An example's n-best spans kept as rows ``lo:hi`` of a shared table; texts and
    probabilities are computed only when the n-best list is read (most callers need only the
    best answer)."""

    __slots__ = ("context", "table", "lo", "hi", "n_best", "whole_words")

    def __init__(
        self,
        context: str,
        table: _CandidateTable,
        lo: int,
        hi: int,
        n_best: int,
        whole_words: bool = False,
    ):
        self.context, self.table, self.lo, self.hi, self.n_best = context, table, lo, hi, n_best
        self.whole_words = whole_words

    def materialize(self) -> tuple[Candidate, ...]:
        t, ctx = self.table, self.context
        rows = np.argsort(-t.scores[self.lo : self.hi], kind="stable") + self.lo
        starts = t.starts[rows].tolist()
        ends = t.ends[rows].tolist()
        scores = t.scores[rows].tolist()
        if self.whole_words:
            spans = [word_span(ctx, s, e) for s, e in zip(starts, ends, strict=True)]
            starts, ends = [s for s, _ in spans], [e for _, e in spans]
        picked: dict[str, int] = {}  # a text seen at several positions: its best span only
        for r, (s, e) in enumerate(zip(starts, ends, strict=True)):
            text = ctx[s:e]
            if text not in picked:
                picked[text] = r
                if len(picked) == self.n_best:
                    break
        top = scores[0]
        weights = [math.exp(scores[r] - top) for r in picked.values()]
        total = sum(weights)
        return tuple(
            Candidate(text, starts[r], ends[r], scores[r], w / total)
            for (text, r), w in zip(picked.items(), weights, strict=True)
        )


class Prediction(NamedTuple):
    """The answer to one question: best non-null span, the null score and the n-best.

    A NamedTuple (immutable, and ~8x cheaper to create than a frozen dataclass: decoding
    makes one per question)."""

    id: str
    text: str
    start_char: int
    end_char: int
    score: float
    null_score: float  # score of the no-answer span (lowest over windows)
    # null_score - best span score (or, from a head with an answerability classifier, the
    # classifier's no-answer log-odds); > threshold -> "no answer"
    null_odds: float
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


def _topk(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest entries of each row, unordered: (values, indices), (B, k).

    Via each row's k-th largest value (``np.partition``, a SIMD selection) and a comparison:
    ~2x torch's ``topk`` and ~2x ``np.argpartition`` on a (220, 384) float32 chunk here.
    Rows where the comparison keeps more than k entries (ties at the k-th value, or fewer
    than k finite entries) fall back to torch's ``topk`` for the whole chunk."""
    n = values.shape[1]
    kth = np.partition(values, n - k, axis=1)[:, n - k, None]
    flat = np.flatnonzero(values >= kth)  # (2-D nonzero is ~5x slower here)
    if len(flat) == k * len(values):
        idx = (flat % n).reshape(-1, k)
        return np.take_along_axis(values, idx, 1), idx
    val, idx = torch.from_numpy(values).topk(k, dim=1, sorted=False)  # shares memory
    return val.numpy(), idx.numpy()


def _pair_candidates(
    s_val: np.ndarray,
    s_idx: np.ndarray,
    e_val: np.ndarray,
    e_idx: np.ndarray,
    keep: int,
    max_len: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each window's best starts x best ends, (B, k) each -> its ``keep`` best valid spans,
    flat: (window row, score, start, end).

    Spans tied with a window's ``keep``-th best are all kept (a superset: the n-best reads
    texts best first, so extra rows never change it); windows with fewer valid spans keep
    them all."""
    k = s_idx.shape[1]
    s32, e32 = s_idx.astype(np.int32), e_idx.astype(np.int32)
    # end - start as uint32: a negative length wraps above max_len, so one comparison
    valid = (e32[:, None, :] - s32[:, :, None]).view(np.uint32) < max_len  # (B, k, k)
    scores = np.where(valid, s_val[:, :, None] + e_val[:, None, :], np.float32(-np.inf))
    pairs = k * k
    scores = scores.reshape(-1, pairs)
    floor = np.float32(NEG / 2)  # drops invalid spans and masked tokens
    if keep < pairs:
        kth = np.partition(scores, pairs - keep, axis=1)[:, pairs - keep, None]
        flat = np.flatnonzero(scores >= np.maximum(kth, floor))
    else:
        flat = np.flatnonzero(scores >= floor)
    rows, cols = np.divmod(flat, pairs)
    return rows, scores.ravel()[flat], s_idx[rows, cols // k], e_idx[rows, cols % k]


def _band_candidates(band: Tensor, ctx: Tensor, keep: int) -> tuple[Tensor, Tensor, Tensor]:
    """Exact search over the (B, N, L) band of span scores."""
    b, n, L = band.shape
    end_ok = torch.cat([ctx, ctx.new_zeros(b, L - 1)], 1).unfold(1, L, 1)  # (B, N, L)
    band = band.masked_fill(~(ctx[:, :, None] & end_ok), -torch.inf)
    scores, flat = band.reshape(b, -1).topk(min(keep, n * L), dim=1)  # (B, K)
    starts = flat // L
    return scores, starts, starts + flat % L


_WIDTH_RATIO = 1.4  # windows searched together differ in length by at most this factor
# (padding every buffered window to the longest cost ~2x the selection work: windows average
# ~160 of 384 tokens on SQuAD)


class SpanCollector:
    """Accumulates per-window top spans batch by batch, then merges per example.

    Start/end logits (the ``"topk"`` candidate set) are buffered and searched in chunks of
    at least ``flush_rows`` windows: one vectorized pass per group of similar-length windows
    instead of one per batch (the per-call cost of the ~20 numpy calls dominated at
    evaluation batch sizes), with memory still bounded by the chunk."""

    def __init__(self, cfg: DecodeConfig = DecodeConfig(), flush_rows: int = 256):
        self.cfg = cfg
        self.flush_rows = flush_rows
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._nulls: list[tuple[np.ndarray, np.ndarray]] = []
        # the windows' null values are a classifier's no-answer odds (HeadOutput.null_odds),
        # not the score of the [CLS] span
        self._null_is_odds = False
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_rows = 0

    @torch.no_grad()
    def add(self, output: HeadOutput, feature_index: Tensor, answer_mask: Tensor) -> None:
        cfg = self.cfg
        rows = feature_index.cpu().numpy()
        odds = None if output.null_odds is None else output.null_odds.float().cpu().numpy()
        self._null_is_odds = odds is not None
        if output.span_scores is None and cfg.candidates == "topk":
            start = output.start_logits.float().cpu().numpy()
            end = output.end_logits.float().cpu().numpy()
            ctx = answer_mask.cpu().numpy().copy()
            ctx[:, 0] = False  # [CLS] is the null answer, not a span
            self._nulls.append((rows, start[:, 0] + end[:, 0] if odds is None else odds))
            self._pending.append((rows, start, end, ctx))
            self._pending_rows += len(rows)
            if self._pending_rows >= self.flush_rows:
                self._flush()
            return
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
        found = _band_candidates(band, ctx_t, cfg.n_best * cfg.window_factor)
        self._keep(rows, *(t.cpu().numpy() for t in found))
        self._nulls.append((rows, null_t.cpu().numpy() if odds is None else odds))

    def _flush(self) -> None:
        """Search the buffered windows' logits. The best starts and ends are selected per
        group of similar-length windows (within ``_WIDTH_RATIO``, padded together); their
        pairs are then scored for all windows at once."""
        if not self._pending:
            return
        cfg = self.cfg
        pending = sorted(self._pending, key=lambda p: -p[1].shape[1])
        tops, group = [], [pending[0]]
        for p in pending[1:]:
            if p[1].shape[1] * _WIDTH_RATIO < group[0][1].shape[1]:
                tops.append(self._best_starts_ends(group))
                group = []
            group.append(p)
        tops.append(self._best_starts_ends(group))
        rows, s_val, s_idx, e_val, e_idx = (np.concatenate(c) for c in zip(*tops, strict=True))
        keep = cfg.n_best * cfg.window_factor
        win, scores, starts, ends = _pair_candidates(
            s_val, s_idx, e_val, e_idx, keep, cfg.max_answer_length
        )
        self._parts.append((rows[win], starts, ends, scores))
        self._pending, self._pending_rows = [], 0

    def _best_starts_ends(self, pending: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        """One length group -> (rows, start values, start indices, end values, end indices),
        with ``n_best`` columns (windows narrower than that: padded with -inf)."""
        k = self.cfg.n_best
        # the widest window (pending is sorted by width), and at least k columns: the -inf
        # padding of narrower windows drops every pair it takes part in
        n = max(pending[0][1].shape[1], k)
        total = sum(len(p[0]) for p in pending)
        start = np.full((total, n), -np.inf, dtype=np.float32)
        end = np.full((total, n), -np.inf, dtype=np.float32)
        r = 0
        for _, s, e, c in pending:
            b, m = s.shape
            np.copyto(start[r : r + b, :m], s, where=c)
            np.copyto(end[r : r + b, :m], e, where=c)
            r += b
        rows = np.concatenate([p[0] for p in pending])
        s_val, s_idx = _topk(start, k)
        e_val, e_idx = _topk(end, k)
        return rows, s_val, s_idx, e_val, e_idx

    def _keep(
        self, rows: np.ndarray, scores: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> None:
        ok = scores > NEG / 2  # drops -inf padding and masked tokens
        rows_k = np.broadcast_to(rows[:, None], scores.shape)
        self._parts.append((rows_k[ok], starts[ok], ends[ok], scores[ok]))

    def merge(self, others: Sequence[SpanCollector]) -> SpanCollector:
        """Take in the windows of other collectors (the shards of a distributed evaluation:
        disjoint windows of the same features). Candidates of an example then come in shard
        order, which can only matter between spans of exactly equal score."""
        self._flush()
        for other in others:
            if other is self:
                continue
            other._flush()
            self._parts.extend(other._parts)
            self._nulls.extend(other._nulls)
            self._null_is_odds = self._null_is_odds or other._null_is_odds
        return self

    def predictions(
        self, examples: Sequence[Example], features: Sequence[Feature]
    ) -> dict[str, Prediction]:
        """Merge windows: per example, the best distinct answer texts across its windows."""
        self._flush()
        if not self._nulls:
            return {}
        feat, starts, ends, scores = (np.concatenate(c) for c in zip(*self._parts, strict=True))
        example_of = np.fromiter((f.example_index for f in features), np.int64, len(features))
        # char spans of every candidate at once, from one flat offsets table
        offsets = [f.offsets for f in features]
        base = np.zeros(len(features) + 1, dtype=np.int64)
        np.cumsum(list(map(len, offsets)), out=base[1:])
        flat = np.concatenate(offsets)  # (sum N, 2)
        char_start = flat[base[feat] + starts, 0]
        char_end = flat[base[feat] + ends, 1]
        cand_ex = example_of[feat]
        worded = _holds_a_word(examples, cand_ex, char_start, char_end)
        if not worded.all():  # "." or "," is no answer to anything
            char_start, char_end = char_start[worded], char_end[worded]
            cand_ex, scores = cand_ex[worded], scores[worded]
        # grouped by example (a stable radix sort on int16 ids); within an example the rows
        # stay in window order: LazyNBest sorts its own rows by score when it is read, and
        # each example's best row is found here by a segmented max. (Sorting every
        # candidate by score up front was a third of the whole post-processing.)
        ex_key = cand_ex.astype(np.int16) if len(examples) < 2**15 else cand_ex
        order = np.argsort(ex_key, kind="stable")
        cand_ex = cand_ex[order]
        table = _CandidateTable(char_start[order], char_end[order], scores[order])
        bounds_arr = np.searchsorted(cand_ex, np.arange(len(examples) + 1))
        bounds = bounds_arr.tolist()
        lo_arr, hi_arr = bounds_arr[:-1], bounds_arr[1:]
        nonempty = lo_arr < hi_arr
        best_s: list[int] = []
        best_e: list[int] = []
        best_score: list[float] = []
        if len(cand_ex):
            seg_lo = lo_arr[nonempty]
            seg_max = np.maximum.reduceat(table.scores, seg_lo)
            hits = np.flatnonzero(table.scores == np.repeat(seg_max, (hi_arr - lo_arr)[nonempty]))
            # the first row reaching the maximum (ties resolve as LazyNBest's stable sort)
            best_row = np.zeros(len(examples), dtype=np.int64)
            best_row[nonempty] = hits[np.searchsorted(hits, seg_lo)]
            best_s, best_e, best_score = (col[best_row].tolist() for col in table)
        null_feat, null = (np.concatenate(c) for c in zip(*self._nulls, strict=True))
        # the null score of an example: the lowest over its windows (as in BERT's run_squad)
        null_ex = example_of[null_feat]
        by_ex = np.argsort(null_ex, kind="stable")
        present, first_window = np.unique(null_ex[by_ex], return_index=True)
        null_by_ex = np.full(len(examples), np.inf)
        null_by_ex[present] = np.minimum.reduceat(null[by_ex], first_window)
        null_list = null_by_ex.tolist()
        n_best, whole_words = self.cfg.n_best, self.cfg.whole_words
        is_odds = self._null_is_odds
        out: dict[str, Prediction] = {}
        for e in present.tolist():
            ex = examples[e]
            null_score = null_list[e]
            lo, hi = bounds[e], bounds[e + 1]
            if lo == hi:
                odds = null_score if is_odds else null_score - NEG
                out[ex.id] = Prediction(ex.id, "", -1, -1, NEG, null_score, odds)
                continue
            cs, ce, score = best_s[e], best_e[e], best_score[e]
            if whole_words:
                cs, ce = word_span(ex.context, cs, ce)
            out[ex.id] = Prediction(
                ex.id,
                ex.context[cs:ce],
                cs,
                ce,
                score,
                null_score,
                null_score if is_odds else null_score - score,
                LazyNBest(ex.context, table, lo, hi, n_best, whole_words),
            )
        return out
