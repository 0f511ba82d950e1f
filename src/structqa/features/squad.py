"""Featurization for extractive QA: question + context windows with exact char offsets.

A context longer than the window is split into overlapping windows (``doc_stride`` tokens of
overlap, as in the HF recipe). Gold answers map to token positions; an answer outside the
window, or an unanswerable question, targets [CLS] (position 0).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from structqa.data.records import Example

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeatureConfig:
    max_seq_len: int = 384
    doc_stride: int = 128
    max_query_len: int = 64


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

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class FeatureReport:
    examples: int = 0
    features: int = 0
    windows_without_answer: int = 0
    skipped_no_target: int = 0
    truncated_questions: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.examples} examples -> {self.features} features "
            f"({self.truncated_questions} questions truncated, "
            f"{self.windows_without_answer} answerable windows without the answer, "
            f"{self.skipped_no_target} answerable examples without a located answer skipped)"
        )


def _truncate_questions(
    questions: Sequence[str], tokenizer, max_query_len: int
) -> tuple[list[str], int]:
    enc = tokenizer(list(questions), add_special_tokens=False, return_offsets_mapping=True)
    out, n = [], 0
    for q, offs in zip(questions, enc["offset_mapping"], strict=True):
        if len(offs) > max_query_len:
            q = q[: offs[max_query_len - 1][1]]
            n += 1
        out.append(q)
    return out, n


def featurize(
    examples: Sequence[Example],
    tokenizer,
    cfg: FeatureConfig = FeatureConfig(),
    training: bool = False,
) -> tuple[list[Feature], FeatureReport]:
    """Tokenize examples into windows. With ``training``, answerable examples without a
    located answer are skipped (they have no target) and counted in the report."""
    report = FeatureReport(examples=len(examples))
    keep = list(range(len(examples)))
    if training:
        keep = [i for i in keep if examples[i].is_impossible or examples[i].answers]
        report.skipped_no_target = len(examples) - len(keep)
    if not keep:
        return [], report
    questions, report.truncated_questions = _truncate_questions(
        [examples[i].question.lstrip() for i in keep], tokenizer, cfg.max_query_len
    )
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
    features: list[Feature] = []
    for f, sample in enumerate(enc["overflow_to_sample_mapping"]):
        ex_index = keep[sample]
        ex = examples[ex_index]
        seq_ids = np.array([-1 if s is None else s for s in enc.sequence_ids(f)])
        offsets = np.array(enc["offset_mapping"][f], dtype=np.int64).reshape(-1, 2)
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
            )
        )
    report.features = len(features)
    return features, report


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
