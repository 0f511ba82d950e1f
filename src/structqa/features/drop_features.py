"""DROP featurization for GenBERT / NC-BERT: one sequence per question, with every answer
realization the marginal objective (NC-BERT Eq. 4) needs.

Input: ``[CLS] question [SEP] passage [SEP]`` with GenBERT digit tokenization
(:func:`~structqa.features.numbers.digit_tokenize`), so every number is one token per char,
and exact char offsets into the question or the passage.

Truncation: DROP passages are often longer than a window. GenBERT keeps the first window
only, and so do we: the question is cut to ``max_question_len`` tokens, the passage to what is
left of ``max_seq_len``, and never inside a number (the cut moves back to the number's first
token, so every number in the window is whole and its value true). Both cuts are counted in
the :class:`DropFeatureReport`; answer spans past the cut are lost (counted too).

Realizations of one gold answer (``example.answer``; validated answers are for evaluation):

- question spans / passage spans: every occurrence of the answer text (case-insensitive, not
  glued to a letter or digit on either side, nor part of a larger number: "500" of "2,500")
  that maps onto whole tokens of the window. For a
  number answer the plain written number is searched. Several occurrences are all kept: the
  loss marginalizes over them. Multi-span answers have no span realization (the model has one
  span head per segment, no multi-span head).
- the decoder target: ``[CLS] answer tokens [SEP]``, numbers as digit tokens (``lsdf=True``
  writes them least significant digit first, :func:`~structqa.features.numbers.lsdf`), other
  texts through :func:`digit_tokenize`. With ``decode_spans=False`` only number and date
  answers get one. A target longer than ``max_decoder_len`` is dropped (counted).

``answer_type`` (0 generate, 1 question span, 2 passage span) is the preferred single label,
for analysis and type-classifier accuracy: a number or date answer is 0, a span answer is 2 if
found in the passage, else 1 if in the question, else 0. The loss does not read it.

Per-token tables for the NC-Mask channels (:mod:`structqa.attention.nc_masks`):
``is_number``/``number_index`` (digit tokens of numbers, both segments, numbers indexed per
sequence, question first), ``is_question``/``is_passage`` (no special tokens), ``is_word``
(non-special, non-number tokens with a letter or digit: no punctuation) and, when
:class:`~structqa.text.Annotation` s are given, ``is_entity``/``sentence_id`` (question
sentences first, then passage sentences; -1 outside any sentence). Without annotations
``is_entity`` is all False, so the entity channel allows nothing. DICE reads
``number_positions`` (first digit of each passage number in the window) and
``number_values``.

Dimension letters: B batch, N tokens, S gold spans, T decoder target tokens, M numbers.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from structqa.data.drop import DropExample
from structqa.features.numbers import (
    DigitTokens,
    WordPieceTokenizer,
    digit_tokenize,
    is_plain_number,
    lsdf,
    number_text,
)
from structqa.text.annotate import Annotation, entity_token_mask, token_span_ids

log = logging.getLogger(__name__)

GENERATE, QUESTION_SPAN, PASSAGE_SPAN = 0, 1, 2
ANSWER_TYPES = ("generate", "question_span", "passage_span")

QUESTION, PASSAGE, SPECIAL = 0, 1, -1  # values of DropFeature.segment


@dataclass(frozen=True)
class DropFeatureConfig:
    max_seq_len: int = 512
    max_question_len: int = 64
    max_decoder_len: int = 16  # target tokens including [CLS] and [SEP]
    lsdf: bool = False
    decode_spans: bool = True  # span answers also get a decoder target (GenBERT)


@dataclass
class DropFeatureReport:
    examples: int = 0
    truncated_passages: int = 0
    truncated_questions: int = 0
    spans_lost_to_truncation: int = 0  # answers found in the full passage but not the window
    decoder_targets_too_long: int = 0
    without_realization: int = 0  # no span and no decoder target: contributes no loss
    numbers_as_written: list[str] = field(default_factory=list)  # "id: '5 million'" answers

    def summary(self) -> str:
        written = (
            f", {len(self.numbers_as_written)} number answers not plain numbers (kept as written)"
            if self.numbers_as_written
            else ""
        )
        return (
            f"{self.examples} examples: {self.truncated_passages} passages and "
            f"{self.truncated_questions} questions truncated, {self.spans_lost_to_truncation} "
            f"answers only past the window, {self.decoder_targets_too_long} decoder targets too "
            f"long, {self.without_realization} without any realization{written}"
        )


@dataclass(frozen=True)
class DropFeature:
    """One featurized question. Arrays are (N,) unless noted; spans are inclusive token
    positions in the full sequence."""

    example_index: int
    question: str
    passage: str
    input_ids: np.ndarray  # int64
    token_type_ids: np.ndarray  # int64: 0 for [CLS] q [SEP], 1 for p [SEP]
    offsets: np.ndarray  # (N, 2) char offsets into the token's own text; (0, 0) for specials
    segment: np.ndarray  # int64: QUESTION, PASSAGE or SPECIAL
    is_number: np.ndarray  # bool
    number_index: np.ndarray  # int64, -1 outside numbers
    is_entity: np.ndarray  # bool
    sentence_id: np.ndarray  # int64
    number_positions: np.ndarray  # (M,) first-digit position of each passage number
    number_values: np.ndarray  # (M,) float64
    question_spans: np.ndarray  # (S, 2) int64
    passage_spans: np.ndarray  # (S, 2) int64
    decoder_target: np.ndarray  # (T,) int64, [CLS] ... [SEP]; empty when there is none
    answer_type: int
    answer_text: str

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def is_question(self) -> np.ndarray:
        return self.segment == QUESTION

    @property
    def is_passage(self) -> np.ndarray:
        return self.segment == PASSAGE

    @functools.cached_property
    def is_word(self) -> np.ndarray:
        """Tokens that may type a number (the type-number channel's keys): question and
        passage tokens that are no number tokens and hold a letter or digit, so punctuation
        ("-" in "45-yard", a comma) takes none of a number's m word slots."""
        out = np.zeros(len(self), dtype=bool)
        for i in np.flatnonzero((self.segment != SPECIAL) & ~self.is_number):
            text = self.question if self.segment[i] == QUESTION else self.passage
            start, end = self.offsets[i]
            out[i] = any(c.isalnum() for c in text[start:end])
        return out

    def span_text(self, start: int, end: int) -> str:
        """The original text of tokens start..end (inclusive), both in one segment."""
        text = self.question if self.segment[start] == QUESTION else self.passage
        return text[int(self.offsets[start, 0]) : int(self.offsets[end, 1])]


def _cut_before_number(tokens: DigitTokens, keep: int) -> int:
    """The largest k <= keep such that tokens[:k] does not end inside a number."""
    if keep >= len(tokens) or keep <= 0:
        return max(min(keep, len(tokens)), 0)
    idx = tokens.number_index
    while keep > 0 and idx[keep] >= 0 and idx[keep - 1] == idx[keep]:
        keep -= 1
    return keep


def _find_spans(text: str, needle: str, offsets: np.ndarray) -> tuple[list[tuple[int, int]], int]:
    """Token spans (inclusive, within ``offsets``) of each occurrence of ``needle`` in ``text``
    and the number of occurrences past the last token (lost to truncation)."""
    needle = needle.strip()
    if not needle or not len(offsets):
        return [], 0
    # not inside a word, nor inside a larger number: "500" is no span of "2,500", nor "7"
    # or "3" of "3.7" (a hyphen stays a boundary: "45" of "45-yard")
    before = r"(?<![0-9A-Za-z])" + (r"(?<![0-9][.,])" if needle[0].isdigit() else "")
    after = r"(?![0-9A-Za-z])" + (r"(?![.,][0-9])" if needle[-1].isdigit() else "")
    return token_spans(re.compile(before + re.escape(needle) + after, re.I), text, offsets)


def token_spans(
    pattern: re.Pattern[str], text: str, offsets: np.ndarray
) -> tuple[list[tuple[int, int]], int]:
    """Token spans (inclusive, within ``offsets``) of each match of ``pattern`` in ``text``
    and the number of matches past the last token (lost to truncation)."""
    if not len(offsets):
        return [], 0
    spans, lost = [], 0
    limit = int(offsets[-1, 1])
    for m in pattern.finditer(text):
        if m.end() > limit:
            lost += 1
            continue
        starts = np.flatnonzero(offsets[:, 1] > m.start())
        ends = np.flatnonzero(offsets[:, 0] < m.end())
        if len(starts) and len(ends) and starts[0] <= ends[-1]:
            spans.append((int(starts[0]), int(ends[-1])))
    return sorted(set(spans)), lost


def _number_answer_text(number: str) -> str | None:
    """The plain written form of a number answer ("1,000" -> "1000", "12.0" -> "12"), or
    None when it is no number ("5 million", "1/2")."""
    plain = number.replace(",", "").strip()
    try:
        return number_text(plain)
    except ValueError:
        pass
    try:
        return number_text(float(plain))
    except ValueError:  # not a number, or nan/inf
        return None


def decoder_target(text: str, tokenizer: WordPieceTokenizer, use_lsdf: bool) -> list[int]:
    """``[CLS] tokens [SEP]`` of an answer text. With ``use_lsdf`` every answer written as a
    plain number is LSDF-reversed, whatever its kind (a year-only date, a digit-only span):
    decoding reads every such output back with :func:`from_lsdf`, so a "1990" trained most
    significant digit first would come out "0991"."""
    cls_id = tokenizer.convert_tokens_to_ids("[CLS]")
    sep_id = tokenizer.convert_tokens_to_ids("[SEP]")
    if use_lsdf and is_plain_number(text):
        ids = [int(tokenizer.convert_tokens_to_ids(p)) for p in lsdf(text, wordpiece=True)]
    else:
        ids = [int(i) for i in digit_tokenize(text, tokenizer).input_ids]
    return [int(cls_id), *ids, int(sep_id)]


def _annotation_tables(
    annotation: Annotation | None, offsets: np.ndarray, sentence_base: int
) -> tuple[np.ndarray, np.ndarray, int]:
    n = len(offsets)
    if annotation is None:
        return np.zeros(n, dtype=bool), np.full(n, -1, dtype=np.int64), 0
    is_entity = entity_token_mask(annotation, offsets)
    sent = token_span_ids(annotation.sentences, offsets)
    sent = np.where(sent >= 0, sent + sentence_base, -1)
    return is_entity, sent, len(annotation.sentences)


def featurize_drop(
    example: DropExample,
    tokenizer: WordPieceTokenizer,
    cfg: DropFeatureConfig = DropFeatureConfig(),
    example_index: int = 0,
    report: DropFeatureReport | None = None,
    question_annotation: Annotation | None = None,
    passage_annotation: Annotation | None = None,
) -> DropFeature:
    """Featurize one DROP question (see the module docs for every rule)."""
    report = report if report is not None else DropFeatureReport()
    report.examples += 1
    q = digit_tokenize(example.question, tokenizer)
    p = digit_tokenize(example.passage, tokenizer)
    q_keep = _cut_before_number(q, min(cfg.max_question_len, cfg.max_seq_len - 3))
    if q_keep < len(q):
        report.truncated_questions += 1
    p_keep = _cut_before_number(p, cfg.max_seq_len - q_keep - 3)
    if p_keep < len(p):
        report.truncated_passages += 1
    cls_id = int(tokenizer.convert_tokens_to_ids("[CLS]"))
    sep_id = int(tokenizer.convert_tokens_to_ids("[SEP]"))

    q_off, p_off = q.offsets[:q_keep], p.offsets[:p_keep]
    q_at, p_at = 1, q_keep + 2  # first question / passage token in the sequence
    n = q_keep + p_keep + 3
    ids = np.concatenate([[cls_id], q.input_ids[:q_keep], [sep_id], p.input_ids[:p_keep], [sep_id]])
    types = np.zeros(n, dtype=np.int64)
    types[q_keep + 2 :] = 1
    offsets = np.zeros((n, 2), dtype=np.int64)
    offsets[q_at : q_at + q_keep], offsets[p_at : p_at + p_keep] = q_off, p_off
    segment = np.full(n, SPECIAL, dtype=np.int64)
    segment[q_at : q_at + q_keep], segment[p_at : p_at + p_keep] = QUESTION, PASSAGE

    # numbers: question numbers first, then the passage's (indices shifted past them)
    number_index = np.full(n, -1, dtype=np.int64)
    number_index[q_at : q_at + q_keep] = q.number_index[:q_keep]
    p_idx = p.number_index[:p_keep]
    number_index[p_at : p_at + p_keep] = np.where(p_idx >= 0, p_idx + len(q.numbers), -1)
    is_number = number_index >= 0
    first_digit = {}  # passage number -> its first digit token in the sequence (not a sign)
    for t in range(p_keep):
        if p_idx[t] < 0 or p_idx[t] in first_digit:
            continue
        if any(c.isdigit() for c in example.passage[p_off[t, 0] : p_off[t, 1]]):
            first_digit[int(p_idx[t])] = p_at + t
    number_positions = np.asarray(list(first_digit.values()), dtype=np.int64)
    number_values = np.asarray([p.numbers[k].value for k in first_digit], dtype=np.float64)

    is_entity = np.zeros(n, dtype=bool)
    sentence_id = np.full(n, -1, dtype=np.int64)
    q_ent, q_sent, q_nsent = _annotation_tables(question_annotation, q_off, 0)
    p_ent, p_sent, _ = _annotation_tables(passage_annotation, p_off, q_nsent)
    is_entity[q_at : q_at + q_keep], is_entity[p_at : p_at + p_keep] = q_ent, p_ent
    sentence_id[q_at : q_at + q_keep], sentence_id[p_at : p_at + p_keep] = q_sent, p_sent

    # realizations of the answer
    answer = example.answer
    kind = answer.kind
    if kind == "number":
        plain = _number_answer_text(answer.number)
        if plain is None:  # learned and scored as written, as the official metric reads it
            report.numbers_as_written.append(f"{example.id}: {answer.number!r}")
        text = answer.number.strip() if plain is None else plain
    elif kind == "spans":
        text = ", ".join(answer.spans)
    else:
        text = answer.texts[0]
    q_spans: list[tuple[int, int]] = []
    p_spans: list[tuple[int, int]] = []
    if kind != "spans":
        found_q, _ = _find_spans(example.question, text, q_off)
        found_p, lost = _find_spans(example.passage, text, p_off)
        q_spans = [(s + q_at, e + q_at) for s, e in found_q]
        p_spans = [(s + p_at, e + p_at) for s, e in found_p]
        if lost and not p_spans:
            report.spans_lost_to_truncation += 1
    target: list[int] = []
    if kind in ("number", "date") or cfg.decode_spans:
        target = decoder_target(text, tokenizer, cfg.lsdf)
        if len(target) > cfg.max_decoder_len:
            report.decoder_targets_too_long += 1
            target = []
    if not (q_spans or p_spans or target):
        report.without_realization += 1
    if kind in ("number", "date"):
        answer_type = GENERATE
    else:
        answer_type = PASSAGE_SPAN if p_spans else QUESTION_SPAN if q_spans else GENERATE

    def spans_array(spans: list[tuple[int, int]]) -> np.ndarray:
        return np.asarray(spans, dtype=np.int64).reshape(-1, 2)

    return DropFeature(
        example_index=example_index,
        question=example.question,
        passage=example.passage,
        input_ids=ids.astype(np.int64),
        token_type_ids=types,
        offsets=offsets,
        segment=segment,
        is_number=is_number,
        number_index=number_index,
        is_entity=is_entity,
        sentence_id=sentence_id,
        number_positions=number_positions,
        number_values=number_values,
        question_spans=spans_array(q_spans),
        passage_spans=spans_array(p_spans),
        decoder_target=np.asarray(target, dtype=np.int64),
        answer_type=answer_type,
        answer_text=text,
    )


def featurize_drop_examples(
    examples: Sequence[DropExample],
    tokenizer: WordPieceTokenizer,
    cfg: DropFeatureConfig = DropFeatureConfig(),
    annotations: Sequence[tuple[Annotation, Annotation]] | None = None,
) -> tuple[list[DropFeature], DropFeatureReport]:
    """Featurize examples in order; ``annotations`` are (question, passage) pairs, aligned."""
    report = DropFeatureReport()
    features = []
    for i, ex in enumerate(examples):
        qa, pa = annotations[i] if annotations is not None else (None, None)
        features.append(featurize_drop(ex, tokenizer, cfg, i, report, qa, pa))
    log.info("%s", report.summary())
    if report.numbers_as_written:
        log.warning(
            "%d number answers are not plain numbers, so they are learned as written (no "
            "digit-order rewrite), e.g. %s",
            len(report.numbers_as_written),
            "; ".join(report.numbers_as_written[:3]),
        )
    if report.truncated_questions:
        log.warning(
            "%d of %d questions are longer than max_question_len = %d tokens and were cut "
            "(see the summary above); raise data.max_question_len to keep them whole",
            report.truncated_questions,
            report.examples,
            cfg.max_question_len,
        )
    return features, report


# -- batches ----------------------------------------------------------------------------------


@dataclass
class DropBatch:
    """A padded batch. Tensors are (B, N) unless noted; padding is -1 in index tensors."""

    input_ids: Tensor
    attention_mask: Tensor
    token_type_ids: Tensor
    is_question: Tensor  # bool
    is_passage: Tensor  # bool
    is_number: Tensor  # bool
    number_index: Tensor  # long
    is_entity: Tensor  # bool
    sentence_id: Tensor  # long
    is_word: Tensor  # bool: question or passage token with a letter or digit, no number token
    number_positions: Tensor  # (B, M) long
    number_values: Tensor  # (B, M) float
    question_spans: Tensor  # (B, S, 2) long
    passage_spans: Tensor  # (B, S, 2) long
    decoder_target: Tensor  # (B, T) long, padded with the pad id
    decoder_mask: Tensor  # (B, T) bool
    answer_type: Tensor  # (B,) long
    feature_index: Tensor  # (B,) long

    def to(self, device: torch.device | str) -> DropBatch:
        return DropBatch(**{k: v.to(device) for k, v in self.__dict__.items()})

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def _pad(rows: Sequence[np.ndarray], fill: float, dtype: np.dtype, min_len: int = 1) -> Tensor:
    width = max([len(r) for r in rows] + [min_len])
    tail = rows[0].shape[1:] if rows else ()
    out = np.full((len(rows), width, *tail), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)


def collate_drop(
    features: Sequence[DropFeature], indices: Sequence[int] | None = None, pad_id: int = 0
) -> DropBatch:
    """Pad the chosen features into a :class:`DropBatch` (every dimension at least 1 wide)."""
    idx = list(range(len(features))) if indices is None else list(indices)
    fs = [features[i] for i in idx]
    segment = _pad([f.segment for f in fs], SPECIAL, np.int64)
    is_number = _pad([f.is_number for f in fs], False, np.bool_)
    return DropBatch(
        input_ids=_pad([f.input_ids for f in fs], pad_id, np.int64),
        attention_mask=_pad([np.ones(len(f), np.int64) for f in fs], 0, np.int64),
        token_type_ids=_pad([f.token_type_ids for f in fs], 0, np.int64),
        is_question=segment == QUESTION,
        is_passage=segment == PASSAGE,
        is_number=is_number,
        number_index=_pad([f.number_index for f in fs], -1, np.int64),
        is_entity=_pad([f.is_entity for f in fs], False, np.bool_),
        sentence_id=_pad([f.sentence_id for f in fs], -1, np.int64),
        is_word=_pad([f.is_word for f in fs], False, np.bool_),
        number_positions=_pad([f.number_positions for f in fs], -1, np.int64),
        number_values=_pad([f.number_values for f in fs], 0.0, np.float32),
        question_spans=_pad([f.question_spans for f in fs], -1, np.int64),
        passage_spans=_pad([f.passage_spans for f in fs], -1, np.int64),
        decoder_target=_pad([f.decoder_target for f in fs], pad_id, np.int64, min_len=2),
        decoder_mask=_pad([np.ones(len(f.decoder_target), bool) for f in fs], False, np.bool_, 2),
        answer_type=torch.tensor([f.answer_type for f in fs], dtype=torch.long),
        feature_index=torch.tensor(idx, dtype=torch.long),
    )
