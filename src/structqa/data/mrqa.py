"""Reader for the MRQA 2019 shared-task format (``.jsonl`` or ``.jsonl.gz``).

The first line is a ``{"header": ...}`` object; every other line is one context with its
questions. Located answers come from ``detected_answers[*].char_spans`` (end inclusive) with
the text taken from the context, so they always match it; ``answers`` are the gold strings.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from structqa.data.flat import RECORD_SHAPES
from structqa.data.hygiene import has_readable_text
from structqa.data.records import Answer, DataError, Dataset, Example, ReadReport
from structqa.data.squad import (
    QuestionIds,
    answer_text,
    check_clean_text,
    check_type,
    file_lines,
    finish,
    get_field,
    make_example,
    note_skip,
    note_warning,
    parse_json,
)


def read_mrqa(path: str | Path, *, dedupe_ids: bool = False) -> Dataset:
    """Read an MRQA jsonl(.gz) file into examples (version ``"mrqa"``); ``dedupe_ids``: see
    :class:`~structqa.data.squad.QuestionIds`."""
    path = Path(path)
    name = str(path)
    report = ReadReport(path=name)
    seen = QuestionIds(report, dedupe_ids)
    examples: list[Example] = []
    first = True
    for lineno, line in file_lines(path):
        if not line.strip():
            continue
        where = f"line {lineno}"
        record = parse_json(line, name, lineno)
        check_type(record, dict, path=name, record=where, field_name="(line)")
        if first and "header" in record:
            first = False
            continue
        if first:
            # No data is lost by reading on, but the file is not quite MRQA.
            note_warning(report, "missing_header", f"{where}: first line is not a header")
            first = False
        examples.extend(_read_context(record, lineno, seen=seen, report=report))
    return finish(report, examples, "mrqa")


def _question_id(qa: dict[str, Any], *, path: str, where: str) -> str:
    # MRQA keeps the source dataset's id in `id` (used by its official scorer) and adds its
    # own `qid`; some MRQA files leave `id` empty, so `qid` is the fallback.
    for key in ("id", "qid"):
        value = qa.get(key)
        if value is None or value == "":
            continue
        # integer ids are read as their decimal text, as the SQuAD reader reads them
        value = check_type(value, (str, int), path=path, record=where, field_name=key)
        return str(value) if isinstance(value, int) else value
    raise DataError(path, where, "id", "missing question id (neither 'id' nor 'qid' is set)")


def _read_context(
    record: dict[str, Any], lineno: int, *, seen: QuestionIds, report: ReadReport
) -> list[Example]:
    name = report.path
    where = f"line {lineno}"
    context = get_field(record, "context", str, path=name, record=where)
    check_clean_text(context, path=name, record=where, field_name="context")
    if "qas" not in record:  # e.g. a flat record read as MRQA: say what is read
        raise DataError(
            name, where, "qas", f"missing required field; a record is read as {RECORD_SHAPES}"
        )
    qas = get_field(record, "qas", list, path=name, record=where)
    examples: list[Example] = []
    for k, qa in enumerate(qas):
        qa_where = f"line {lineno} qas[{k}]"
        check_type(qa, dict, path=name, record=qa_where, field_name="qas")
        qid = _question_id(qa, path=name, where=qa_where)
        qid = seen.claim(qid, f"{qid} ({where})")
        rec = f"{qid} ({where})"
        question = get_field(qa, "question", str, path=name, record=rec)
        check_clean_text(question, path=name, record=rec, field_name="question")
        if not has_readable_text(context):
            note_skip(
                report,
                "empty_context",
                f"question {qid!r} ({where}): no character a model reads in its context",
            )
            continue
        if not has_readable_text(question):
            note_skip(
                report,
                "empty_question",
                f"question {qid!r} ({where}): no character a model reads in its question",
            )
            continue
        gold_texts = get_field(qa, "answers", list, path=name, record=rec)
        if not gold_texts:
            raise DataError(name, rec, "answers", "no gold answers (MRQA has no unanswerables)")
        for m, text in enumerate(gold_texts):
            check_type(text, str, path=name, record=rec, field_name=f"answers[{m}]")
        located = _located_answers(qa, context, rec=rec, report=report)
        examples.append(make_example(report, qid, question, context, located, gold_texts))
    return examples


def _located_answers(
    qa: dict[str, Any], context: str, *, rec: str, report: ReadReport
) -> list[Answer]:
    name = report.path
    detected = get_field(qa, "detected_answers", list, path=name, record=rec)
    # Several annotators often give the same answer; judge each distinct span once.
    spans: dict[tuple[int, int, str], str] = {}
    for m, item in enumerate(detected):
        field = f"detected_answers[{m}]"
        text = answer_text(item, field, name, rec)
        char_spans = get_field(
            item, "char_spans", list, path=name, record=rec, field_name=f"{field}.char_spans"
        )
        for n, span in enumerate(char_spans):
            span_field = f"{field}.char_spans[{n}]"
            if not (isinstance(span, list) and len(span) == 2):
                raise DataError(name, rec, span_field, f"expected [start, end], got {span!r}")
            for bound in span:
                check_type(bound, int, path=name, record=rec, field_name=span_field)
            spans.setdefault((span[0], span[1], text), span_field)

    located: list[Answer] = []
    for (start, end, text), span_field in spans.items():
        if not 0 <= start <= end < len(context):
            note_warning(
                report,
                "char_span_out_of_range",
                f"question {rec}: {span_field} [{start}, {end}] outside the context "
                f"(length {len(context)})",
            )
            continue
        sliced = context[start : end + 1]
        if sliced != text:
            # MRQA matched answers after normalisation (case, articles), so the span can
            # differ from the detected text; the span is what the context really says.
            note_warning(
                report,
                "span_text_differs",
                f"question {rec}: {span_field} covers {sliced!r}, detected text is {text!r}",
                # Expected in every MRQA file (a few % of spans): counted, but not alarming.
                level=logging.DEBUG,
            )
        located.append(Answer(text=sliced, start=start))
    return located
