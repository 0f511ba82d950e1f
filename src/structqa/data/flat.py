"""Reader for flat SQuAD records: one question per record, as Hugging Face ``datasets`` writes
SQuAD and SQuAD 2.0 (``Dataset.to_json``)::

    {"id": "q1", "title": "Bees", "context": "...", "question": "...",
     "answers": {"text": ["..."], "answer_start": [12]}}

one record a line (``.jsonl``, optionally ``.gz``), or a JSON list of such records. An empty
``answers.text`` is an unanswerable question (the file is then read as SQuAD 2.0).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from structqa.data.records import Answer, DataError, Dataset, Example, ReadReport
from structqa.data.squad import (
    QuestionIds,
    check_clean_text,
    check_type,
    file_lines,
    get_field,
    load_json,
    located_answer,
    make_example,
    parse_json,
    read_records,
    skip_unreadable,
    starts_with,
)

#: The keys that tell a flat record from an MRQA context line (which has "qas").
FLAT_KEYS = ("context", "question", "answers")


def is_flat_record(value: Any) -> bool:
    """Whether ``value`` looks like one flat SQuAD record (not an MRQA context or header)."""
    return isinstance(value, dict) and all(k in value for k in FLAT_KEYS) and "qas" not in value


def read_flat(
    path: str | Path, *, dedupe_ids: bool = False, answers_optional: bool = False
) -> Dataset:
    """Read flat SQuAD records (see the module docs) into examples; ``dedupe_ids``: see
    :class:`~structqa.data.squad.QuestionIds`; ``answers_optional``: a record without
    ``answers`` is a question to answer (an example without answers), not an error."""
    path = Path(path)
    if starts_with(path, b"["):
        return read_flat_list(
            load_json(path), path, dedupe_ids=dedupe_ids, answers_optional=answers_optional
        )
    read = partial(_read_record, answers_optional=answers_optional)
    return read_records(_lines(path), str(path), dedupe_ids, read)


def read_flat_list(
    doc: Any, path: str | Path, *, dedupe_ids: bool = False, answers_optional: bool = False
) -> Dataset:
    """Flat SQuAD records already parsed from ``path`` (a JSON list) into examples."""
    name = str(path)
    check_type(doc, list, path=name, record="(top level)", field_name="(records)")
    records = ((f"record {i}", r) for i, r in enumerate(doc))
    read = partial(_read_record, answers_optional=answers_optional)
    return read_records(records, name, dedupe_ids, read)


def _lines(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) of each JSON line."""
    name = str(path)
    for lineno, line in file_lines(path):
        if line.strip():
            yield f"line {lineno}", parse_json(line, name, lineno)


def _read_record(
    record: Any,
    where: str,
    *,
    seen: QuestionIds,
    report: ReadReport,
    answers_optional: bool = False,
) -> Example | None:
    name = report.path
    check_type(record, dict, path=name, record=where, field_name="(record)")
    qid = get_field(record, "id", (str, int), path=name, record=where)
    qid = str(qid) if isinstance(qid, int) else qid
    if not qid:
        raise DataError(name, where, "id", "empty question id")
    qid = seen.claim(qid, f"{qid} ({where})")
    rec = f"{qid} ({where})"
    context = get_field(record, "context", str, path=name, record=rec)
    check_clean_text(context, path=name, record=rec, field_name="context")
    question = get_field(record, "question", str, path=name, record=rec)
    check_clean_text(question, path=name, record=rec, field_name="question")
    title = check_type(record.get("title", ""), str, path=name, record=rec, field_name="title")
    if skip_unreadable(report, qid, where, context=context, question=question):
        return None
    if answers_optional and "answers" not in record:  # a question alone, to be answered
        return Example(qid, question, context, title=title)
    answers = get_field(record, "answers", dict, path=name, record=rec)
    texts = get_field(answers, "text", list, path=name, record=rec, field_name="answers.text")
    starts = get_field(
        answers, "answer_start", list, path=name, record=rec, field_name="answers.answer_start"
    )
    if len(texts) != len(starts):
        raise DataError(
            name,
            rec,
            "answers",
            f"{len(texts)} answers.text but {len(starts)} answers.answer_start; give one start "
            "per text",
        )
    located: list[Answer] = []
    for m, (text, start) in enumerate(zip(texts, starts, strict=True)):
        field = f"answers.text[{m}]"
        check_type(text, str, path=name, record=rec, field_name=field)
        check_type(start, int, path=name, record=rec, field_name=f"answers.answer_start[{m}]")
        found = located_answer(report, context, qid, field, text, start)
        if found is not None:
            located.append(found)
    return make_example(
        report, qid, question, context, located, texts, is_impossible=not texts, title=title
    )
