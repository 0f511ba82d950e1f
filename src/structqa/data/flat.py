"""Reader for flat SQuAD records: one question per record, as Hugging Face ``datasets`` writes
SQuAD and SQuAD 2.0 (``Dataset.to_json``)::

    {"id": "q1", "title": "Bees", "context": "...", "question": "...",
     "answers": {"text": ["..."], "answer_start": [12]}}

one record a line (``.jsonl``, optionally ``.gz``), or a JSON list of such records. An empty
``answers.text`` is an unanswerable question (the file is then read as SQuAD 2.0). A record
without ``id`` is named by where it is: ``line-N`` (its line), ``record-N`` (its place in a
list, from 1).
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

#: The keys of a flat record, a question over its context (an MRQA context line has "qas").
FLAT_KEYS = ("context", "question", "answers")

#: The records a file of one record a line (or a JSON list of them) may hold, for an error
#: that finds others.
RECORD_SHAPES = (
    'a flat SQuAD record {"id": "q1", "question": "...", "context": "...", "answers": '
    '{"text": ["..."], "answer_start": [12]}} (answer_start: the answer\'s character offset in '
    "the context; text and answer_start [] for an unanswerable question; id optional), or an "
    'MRQA context line {"context": "...", "qas": [{"id": "q1", "question": "...", "answers": '
    '["..."], "detected_answers": [{"text": "...", "char_spans": [[12, 14]]}]}]}; a table '
    "(.csv or .tsv with question, context and answer columns) needs no offsets"
)


def is_flat_record(value: Any) -> bool:
    """Whether ``value`` is a question over its context, as flat SQuAD records are (with or
    without ``answers``; not an MRQA context, which has ``qas``, nor its header)."""
    return (
        isinstance(value, dict)
        and set(FLAT_KEYS[:2]) <= value.keys()
        and not {"qas", "header"} & value.keys()
    )


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
    records = ((f"record {i}", r) for i, r in enumerate(doc, start=1))
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
    _check_keys(record, where, name, answers_optional)
    # a record without id is named by where it is, as a table's row is (row-N)
    qid = check_type(
        record.get("id", where.replace(" ", "-")),
        (str, int),
        path=name,
        record=where,
        field_name="id",
    )
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
    answers = record["answers"]
    if not isinstance(answers, dict):
        raise DataError(
            name,
            rec,
            "answers",
            f"expected an object of lists, got {type(answers).__name__}; a record is read as "
            f"{RECORD_SHAPES}",
        )
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


def _check_keys(record: dict[str, Any], where: str, name: str, answers_optional: bool) -> None:
    """Every required key the record lacks, named at once with the records that are read."""
    required = FLAT_KEYS[:2] if answers_optional else FLAT_KEYS
    missing = [k for k in required if k not in record]
    if missing:
        qid = record.get("id")
        rec = f"{qid} ({where})" if isinstance(qid, (str, int)) and qid != "" else where
        keys = ", ".join(map(str, record)) or "none"
        raise DataError(
            name,
            rec,
            ", ".join(missing),
            f"missing required field(s) {', '.join(missing)} (the record's keys: {keys}); "
            f"a record is read as {RECORD_SHAPES}",
        )
