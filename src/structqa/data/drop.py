"""Reader for DROP JSON (Dua et al., 2019): passage id -> {"passage", "qa_pairs"}.

Each question has an ``answer`` and optional ``validated_answers``, each holding a ``number``
(a string), a ``date`` ({"day", "month", "year"}, strings) and ``spans`` (a list of strings);
one of them is filled. Records are kept as the file gives them; :attr:`DropAnswer.kind` and
:attr:`DropAnswer.texts` apply the official evaluation's precedence (number, then spans, then
date), which matters for the answers that fill two of them (in the contrast sets five answers
and two validated answers give a number and spans; the number wins; counted as the warning
``several_answer_types``).

Rules for bad input, as for the other readers: invalid JSON, a missing or mistyped field and a
duplicate query id raise ``DataError`` naming file, record (query id and passage id) and field.
Skipped and counted: an empty passage (``empty_passage``), an empty question
(``empty_question``) and an ``answer`` with nothing in it, no number, no spans, no date, and no
validated answer (``empty_answer``): it gives no training target, and the official evaluation
scores it as 0 (scoring reads the raw file, ``structqa.metrics.drop.gold_from_drop_json``, not
these examples). An empty ``answer`` with validated answers is kept, its first validated answer
standing in (``empty_answer_validated_kept``, a warning): the official evaluation scores it
against them, so it is answered. Blank validated answers are dropped with a warning
(``empty_validated_answer``): the official evaluation ignores blank candidates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structqa.data.records import DataError, ReadReport
from structqa.data.squad import (
    check_clean_text,
    check_type,
    get_field,
    load_json,
    logger,
    note_skip,
    note_warning,
)

__all__ = ["DropAnswer", "DropDataset", "DropExample", "read_drop"]

_DATE_KEYS = ("day", "month", "year")


@dataclass(frozen=True)
class DropAnswer:
    """One DROP answer as the file gives it; ``date`` is ``(day, month, year)``."""

    number: str = ""
    date: tuple[str, str, str] = ("", "", "")
    spans: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """``"number"``, ``"span"`` (one span), ``"spans"`` (several) or ``"date"``, by the
        official precedence; ``"date"`` also for an answer with nothing in it."""
        if self.number:
            return "number"
        if self.spans:
            return "span" if len(self.spans) == 1 else "spans"
        return "date"

    @property
    def texts(self) -> tuple[str, ...]:
        """The strings the metric compares: the number, the spans, or the non-empty date parts
        joined by spaces (``("",)`` for an empty answer)."""
        if self.number:
            return (self.number,)
        if self.spans:
            return self.spans
        return (" ".join(part for part in self.date if part),)

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to compare: every text is blank."""
        return not any(text.strip() for text in self.texts)


@dataclass(frozen=True)
class DropExample:
    """One DROP question over its passage; ``id`` is the query id."""

    id: str
    passage_id: str
    question: str
    passage: str
    answer: DropAnswer
    validated_answers: tuple[DropAnswer, ...] = ()

    @property
    def answers(self) -> tuple[DropAnswer, ...]:
        """Every gold candidate, the ``answer`` first, as the official evaluation takes them."""
        return (self.answer, *self.validated_answers)


@dataclass(frozen=True)
class DropDataset:
    """What :func:`read_drop` returned: the examples, its report and the version ``"drop"``."""

    examples: tuple[DropExample, ...]
    report: ReadReport
    version: str = "drop"

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[DropExample]:
        return iter(self.examples)

    @property
    def passage_ids(self) -> tuple[str, ...]:
        """Distinct passage ids of the kept examples, in file order."""
        return tuple(dict.fromkeys(ex.passage_id for ex in self.examples))


def read_drop(path: str | Path) -> DropDataset:
    """Read a DROP JSON file (optionally ``.gz``) into examples, in file order."""
    path = Path(path)
    name = str(path)
    report = ReadReport(path=name)
    doc = load_json(path)
    check_type(doc, dict, path=name, record="(top level)", field_name="(passages)")
    seen: dict[str, str] = {}
    examples: list[DropExample] = []
    for passage_id, entry in doc.items():
        where = f"passage {passage_id}"
        check_type(entry, dict, path=name, record=where, field_name=passage_id)
        passage = get_field(entry, "passage", str, path=name, record=where)
        check_clean_text(passage, path=name, record=where, field_name="passage")
        qa_pairs = get_field(entry, "qa_pairs", list, path=name, record=where)
        for k, qa in enumerate(qa_pairs):
            check_type(qa, dict, path=name, record=where, field_name=f"qa_pairs[{k}]")
            example = _read_question(qa, passage_id, passage, k, seen=seen, report=report)
            if example is not None:
                examples.append(example)
    report.read = len(examples)
    logger.info("%s", report.summary())
    return DropDataset(examples=tuple(examples), report=report)


def _read_question(
    qa: dict[str, Any],
    passage_id: str,
    passage: str,
    index: int,
    *,
    seen: dict[str, str],
    report: ReadReport,
) -> DropExample | None:
    name = report.path
    where = f"passage {passage_id}, qa_pairs[{index}]"
    qid = get_field(qa, "query_id", str, path=name, record=where)
    if not qid:
        raise DataError(name, where, "query_id", "empty query id")
    rec = f"{qid} (passage {passage_id})"
    if qid in seen:
        raise DataError(
            name, rec, "query_id", f"duplicate query id (first seen in passage {seen[qid]})"
        )
    seen[qid] = passage_id
    question = get_field(qa, "question", str, path=name, record=rec)
    check_clean_text(question, path=name, record=rec, field_name="question")
    inner_id = qa.get("passage_id")
    if inner_id is not None and inner_id != passage_id:
        note_warning(
            report,
            "passage_id_mismatch",
            f"question {rec}: its passage_id {inner_id!r} differs from the passage key (kept)",
        )
    if not passage.strip():
        note_skip(report, "empty_passage", f"question {rec}: empty passage")
        return None
    if not question.strip():
        note_skip(report, "empty_question", f"question {rec}: empty question")
        return None
    raw_answer = get_field(qa, "answer", dict, path=name, record=rec)
    answer = _read_answer(raw_answer, rec=rec, field="answer", name=name)
    if not answer.is_empty:
        _note_several_types(report, answer, rec=rec, field="answer")
    validated: list[DropAnswer] = []
    raw_validated = qa.get("validated_answers")
    if raw_validated is not None:
        check_type(raw_validated, list, path=name, record=rec, field_name="validated_answers")
        for m, raw in enumerate(raw_validated):
            field = f"validated_answers[{m}]"
            check_type(raw, dict, path=name, record=rec, field_name=field)
            candidate = _read_answer(raw, rec=rec, field=field, name=name)
            if candidate.is_empty:
                note_warning(report, "empty_validated_answer", f"question {rec}: {field} is empty")
                continue
            _note_several_types(report, candidate, rec=rec, field=field)
            validated.append(candidate)
    if answer.is_empty:
        if not validated:
            zero = raw_answer.get("number") in (0, 0.0) and raw_answer.get("number") is not False
            note_skip(
                report,
                "empty_answer",
                f"question {rec}: answer has no number, spans or date"
                + (" (a number 0 counts as none, as in the official evaluation)" if zero else ""),
            )
            return None
        # the official evaluation scores it against its validated answers: kept, the first
        # standing in as the answer learned
        note_warning(
            report,
            "empty_answer_validated_kept",
            f"question {rec}: answer is empty; validated_answers[0] stands in (kept)",
        )
        answer, validated = validated[0], validated[1:]
    return DropExample(
        id=qid,
        passage_id=passage_id,
        question=question,
        passage=passage,
        answer=answer,
        validated_answers=tuple(validated),
    )


def _note_several_types(report: ReadReport, answer: DropAnswer, *, rec: str, field: str) -> None:
    filled = [bool(answer.number), bool(answer.spans), any(answer.date)]
    if sum(filled) > 1:
        note_warning(
            report,
            "several_answer_types",
            f"question {rec}: {field} fills more than one of number/spans/date "
            f"(kept; counts as {answer.kind!r}, by the official precedence)",
            level=logging.INFO,
        )


def _read_answer(raw: dict[str, Any], *, rec: str, field: str, name: str) -> DropAnswer:
    """One answer object; its three parts may each be absent (real files have ``"date": {}``),
    but at least one must be there, as the official evaluation requires."""
    if not any(key in raw for key in ("number", "date", "spans")):
        raise DataError(name, rec, field, "answer has none of 'number', 'date', 'spans'")
    number = raw.get("number", "")
    check_type(number, (str, int, float), path=name, record=rec, field_name=f"{field}.number")
    spans = raw.get("spans", [])
    check_type(spans, list, path=name, record=rec, field_name=f"{field}.spans")
    for n, span in enumerate(spans):
        check_type(span, str, path=name, record=rec, field_name=f"{field}.spans[{n}]")
    date = raw.get("date", {})
    check_type(date, dict, path=name, record=rec, field_name=f"{field}.date")
    parts = []
    for key in _DATE_KEYS:
        part = date.get(key, "")
        check_type(part, str, path=name, record=rec, field_name=f"{field}.date.{key}")
        parts.append(part)
    return DropAnswer(
        # As the official str(number): a JSON number 12 becomes "12"; 0 counts as no number.
        number=str(number) if number else "",
        date=(parts[0], parts[1], parts[2]),
        spans=tuple(spans),
    )
