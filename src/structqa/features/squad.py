"""Featurization for extractive QA: question + context windows with exact char offsets.

A context longer than the window is split into overlapping windows (``doc_stride`` tokens of
overlap, as in the HF recipe). Gold answers map to token positions; an answer outside the
window, or an unanswerable question, targets [CLS] (position 0).

Encoders pre-trained with token-level linguistic inputs get them here too (``token_tags``): the
POS id of each token's word and whether the token lies inside a named entity, read from spaCy
annotations of the question and of the context (:mod:`structqa.text.annotate`, the annotator of
the pre-training corpus) and aligned to word pieces through the tokenizer's char offsets."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from structqa.data.records import Example
from structqa.features.coverage import check_covered, covered_ends
from structqa.text.annotate import (
    DEFAULT_MODEL,
    Annotation,
    Annotator,
    entity_token_mask,
    pos_tag_ids,
)

log = logging.getLogger(__name__)


#: Token tags featurization can add (``FeatureConfig.token_tags``): the Feature field each fills,
#: the function aligning an annotation to tokens by char offsets, and the field's dtype.
TOKEN_TAGS = {
    "pos": ("pos_tag_ids", pos_tag_ids, np.int64),
    "entities": ("entity_mask", entity_token_mask, np.bool_),
}


@dataclass(frozen=True)
class FeatureConfig:
    max_seq_len: int = 384
    doc_stride: int = 128
    max_query_len: int = 64
    token_tags: tuple[str, ...] = ()  # keys of TOKEN_TAGS
    spacy_model: str = DEFAULT_MODEL  # annotates questions and contexts for token_tags
    annotation_cache: str | None = None

    def __post_init__(self) -> None:
        bad = sorted(set(self.token_tags) - set(TOKEN_TAGS))
        if bad:
            raise ValueError(f"unknown token tag(s) {bad}; known: {sorted(TOKEN_TAGS)}")


#: characters of text an answering model keeps tagged in memory (a service sees unbounded
#: text; an annotation takes some tens of bytes per character: about 100-200 MB)
ANSWERING_CACHE_CHARS = 5_000_000


def tag_annotator(cfg: FeatureConfig, answering: bool = False) -> Annotator | None:
    """The annotator of ``cfg``'s token tags (None without any); spaCy loads on first use.
    ``answering`` (predict, serve, explain): the training cache file is read where it exists
    but people's questions and passages are never written into it, and memory is bounded."""
    if not cfg.token_tags:
        return None
    if answering:
        return Annotator(
            cfg.spacy_model,
            cache_file=cfg.annotation_cache,
            write_cache=False,
            max_chars=ANSWERING_CACHE_CHARS,
        )
    return Annotator(cfg.spacy_model, cache_file=cfg.annotation_cache)


@dataclass(frozen=True)
class Feature:
    """One window. ``offsets[t]`` is the (start, end) char span of context token t, (-1, -1)
    for question and special tokens; (start, end) positions are 0 when the answer is absent."""

    example_index: int
    input_ids: np.ndarray  # (N,) int64
    token_type_ids: np.ndarray  # (N,) int64
    offsets: np.ndarray  # (N, 2) int64
    start_position: int = 0
    end_position: int = 0
    pos_tag_ids: np.ndarray | None = None  # (N,) int64 POS id of the token's word (0: none)
    entity_mask: np.ndarray | None = None  # (N,) bool: the token lies in a named entity

    def __len__(self) -> int:
        return len(self.input_ids)


class QuestionTooLong(ValueError):
    """A question longer than the model reads (``data.max_query_len`` tokens), where cutting it
    silently would answer another question (prediction, serving)."""

    def __init__(self, index: int, length: int, limit: int, what: str = "the question") -> None:
        self.index, self.length, self.limit = index, length, limit
        super().__init__(
            f"{what} has {length} tokens, more than the {limit} this model reads "
            "(data.max_query_len); shorten it"
        )


@dataclass
class FeatureReport:
    examples: int = 0
    features: int = 0
    windows_without_answer: int = 0
    skipped_no_target: int = 0
    truncated_questions: int = 0
    truncated_ids: list[str] = field(default_factory=list)  # the first few, for the warning
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.examples} examples -> {self.features} features "
            f"({self.truncated_questions} questions truncated, "
            f"{self.windows_without_answer} answerable windows without the answer, "
            f"{self.skipped_no_target} answerable examples without a located answer skipped)"
        )


# how many truncated question ids the warning names
_NAMED_TRUNCATIONS = 5


def _truncate_questions(
    questions: Sequence[str], tokenizer, max_query_len: int, cut: bool = True
) -> tuple[list[str], list[int]]:
    """The questions cut to ``max_query_len`` tokens and the indices of those cut; with
    ``cut`` False the first over-long one raises :class:`QuestionTooLong` instead."""
    enc = tokenizer(list(questions), add_special_tokens=False, return_offsets_mapping=True)
    out, cut_at = [], []
    for i, (q, offs) in enumerate(zip(questions, enc["offset_mapping"], strict=True)):
        if len(offs) > max_query_len:
            if not cut:
                raise QuestionTooLong(i, len(offs), max_query_len)
            q = q[: offs[max_query_len - 1][1]]
            cut_at.append(i)
        out.append(q)
    return out, cut_at


def refuse_long_question(question: str, tokenizer, max_query_len: int) -> None:
    """:class:`QuestionTooLong` where ``question`` has more than ``max_query_len`` tokens,
    counted as :func:`featurize` counts them (a user's question is refused, never cut)."""
    _truncate_questions([question.lstrip()], tokenizer, max_query_len, cut=False)


def cut_questions(examples: Sequence[Example], tokenizer, max_query_len: int) -> list[Example]:
    """``examples`` with every question longer than ``max_query_len`` tokens cut to it, and
    warned about by id: a file's questions asked of many passages (``evaluate-ask``), each
    question cut once, as ``evaluate`` cuts it, rather than refused pair by pair."""
    questions, cut_at = _truncate_questions(
        [ex.question for ex in examples], tokenizer, max_query_len
    )
    report = FeatureReport()
    report.truncated_questions = len(cut_at)
    report.truncated_ids = [examples[i].id for i in cut_at[:_NAMED_TRUNCATIONS]]
    _warn_truncated(report, len(examples), max_query_len)
    cut = set(cut_at)
    pairs = enumerate(zip(examples, questions, strict=True))
    return [replace(ex, question=q) if i in cut else ex for i, (ex, q) in pairs]


def _warn_truncated(report: FeatureReport, total: int, limit: int) -> None:
    if not report.truncated_questions:
        return
    more = report.truncated_questions - len(report.truncated_ids)
    log.warning(
        "%d of %d questions are longer than data.max_query_len = %d tokens and were cut to "
        "their first %d tokens (%s%s); raise data.max_query_len to keep them whole",
        report.truncated_questions,
        total,
        limit,
        limit,
        ", ".join(repr(i) for i in report.truncated_ids),
        f" and {more} more" if more else "",
    )


def check_windows(max_seq_len: int, doc_stride: int, max_query_len: int) -> None:
    """A window of ``max_seq_len`` tokens holds [CLS] question [SEP] passage [SEP], with the
    question cut to ``max_query_len`` tokens; the tokenizer needs the stride below the
    passage's share of the longest such window (else it fails mid-featurization, on the
    first long question)."""
    room = max_seq_len - max_query_len - 3
    if doc_stride >= room:
        raise ValueError(
            f"data.doc_stride ({doc_stride}) must be below data.max_seq_len - "
            f"data.max_query_len - 3 = {room}, the passage tokens of a window with the "
            "longest question; lower doc_stride or max_query_len, or raise max_seq_len"
        )


def featurize(
    examples: Sequence[Example],
    tokenizer,
    cfg: FeatureConfig = FeatureConfig(),
    training: bool = False,
    annotator: Annotator | None = None,
    cut_long_questions: bool = True,
) -> tuple[list[Feature], FeatureReport]:
    """Tokenize examples into windows. With ``training``, answerable examples without a
    located answer are skipped (they have no target) and counted in the report.

    A question longer than ``cfg.max_query_len`` tokens is cut to them, counted in the report
    and warned about (files); with ``cut_long_questions`` False it raises
    :class:`QuestionTooLong` instead (a user's question, which cutting would change).

    With ``cfg.token_tags`` questions and contexts are annotated by ``annotator`` (default: a
    new one for ``cfg.spacy_model``; pass one to reuse its parses across calls)."""
    check_windows(cfg.max_seq_len, cfg.doc_stride, cfg.max_query_len)
    report = FeatureReport(examples=len(examples))
    keep = list(range(len(examples)))
    if training:
        keep = [i for i in keep if examples[i].is_impossible or examples[i].answers]
        report.skipped_no_target = len(examples) - len(keep)
    if not keep:
        return [], report
    full_questions = [examples[i].question.lstrip() for i in keep]
    questions, cut_at = _truncate_questions(
        full_questions, tokenizer, cfg.max_query_len, cut_long_questions
    )
    report.truncated_questions = len(cut_at)
    report.truncated_ids = [examples[keep[i]].id for i in cut_at[:_NAMED_TRUNCATIONS]]
    _warn_truncated(report, len(keep), cfg.max_query_len)
    enc = tokenizer(
        questions,
        [examples[i].context for i in keep],
        truncation="only_second",
        max_length=cfg.max_seq_len,
        stride=cfg.doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        return_token_type_ids=True,
        padding=False,
    )
    annotations: list[tuple[Annotation, Annotation]] = []
    if cfg.token_tags:
        if annotator is None:  # (not `or`: an Annotator with nothing cached is falsy)
            annotator = tag_annotator(cfg)
        assert annotator is not None
        # a truncated question is a prefix of the full one: the full parse's offsets hold
        parsed = annotator.annotate(full_questions + [examples[i].context for i in keep])
        annotations = list(zip(parsed[: len(keep)], parsed[len(keep) :], strict=True))
    features: list[Feature] = []
    for f, sample in enumerate(enc["overflow_to_sample_mapping"]):
        ex_index = keep[sample]
        ex = examples[ex_index]
        seq_ids = np.array([-1 if s is None else s for s in enc.sequence_ids(f)])
        offsets = np.array(enc["offset_mapping"][f], dtype=np.int64).reshape(-1, 2)
        tags = (
            _token_tags(cfg.token_tags, seq_ids, offsets, *annotations[sample])
            if annotations
            else {}
        )
        offsets[seq_ids != 1] = -1
        start = end = 0
        if ex.answers:
            start, end = _locate(offsets, ex.answers[0].start, ex.answers[0].end)
            if start == 0:
                report.windows_without_answer += 1
        features.append(
            Feature(
                example_index=ex_index,
                input_ids=np.asarray(enc["input_ids"][f], dtype=np.int64),
                token_type_ids=np.asarray(enc["token_type_ids"][f], dtype=np.int64),
                offsets=offsets,
                start_position=start,
                end_position=end,
                **tags,
            )
        )
    ends = covered_ends(enc["overflow_to_sample_mapping"], [f.offsets for f in features], len(keep))
    check_covered(
        [examples[i].context for i in keep], ends, [f"example {examples[i].id!r}" for i in keep]
    )
    report.features = len(features)
    return features, report


def _token_tags(
    names: Sequence[str],
    seq_ids: np.ndarray,
    offsets: np.ndarray,
    question: Annotation,
    context: Annotation,
) -> dict[str, np.ndarray]:
    """The Feature fields of the token tags ``names`` for one window: ``offsets`` (N, 2) are the
    tokenizer's, relative to the question for ``seq_ids == 0`` and to the context for 1;
    special tokens (``seq_ids == -1``) get no tag."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        attr, align, dtype = TOKEN_TAGS[name]
        values = np.zeros(len(seq_ids), dtype=dtype)
        for seq, annotation in ((0, question), (1, context)):
            part = seq_ids == seq
            values[part] = align(annotation, offsets[part])
        out[attr] = values
    return out


def _locate(offsets: np.ndarray, start_char: int, end_char: int) -> tuple[int, int]:
    """Token span (inclusive) covering chars [start_char, end_char), or (0, 0) if the window
    does not contain the whole answer."""
    ctx = np.nonzero(offsets[:, 0] >= 0)[0]
    if len(ctx) == 0 or start_char < 0:
        return 0, 0
    first, last = ctx[0], ctx[-1]
    if offsets[first, 0] > start_char or offsets[last, 1] < end_char:
        return 0, 0
    starts, ends = offsets[ctx, 0], offsets[ctx, 1]
    # last token starting at or before the answer start; first token ending at or after its end
    s = ctx[np.searchsorted(starts, start_char, side="right") - 1]
    e = ctx[np.searchsorted(ends, end_char, side="left")]
    return int(s), int(e)


def answer_text(context: str, offsets: np.ndarray, start: int, end: int) -> str:
    """The context text covered by tokens start..end (inclusive)."""
    return context[offsets[start, 0] : offsets[end, 1]]
