"""Reader for question-answer tables: CSV (``.csv``) or tab-separated (``.tsv``), optionally
``.gz``, one question per row, a header row naming the columns::

    id,title,context,question,answer,answer_start
    q1,Bees,"Bees make honey from nectar.",What do bees make?,honey,10

Columns: ``question``, ``context`` and ``answer`` (or ``answer_text``, as Kaggle's chaii
files name it) are required; ``id`` (default ``row-N``, N the row's line), ``answer_start``
(the answer's character offset in the context; empty or absent: its first occurrence) and
``title`` are optional; other columns are ignored. An empty answer is an unanswerable
question (the file is then read as SQuAD 2.0). A spreadsheet's ``;``-separated CSV is read
too: the delimiter is the one that splits the header into the required columns.

Written by hand over the standard library's :mod:`csv` (quoting, embedded newlines) because
the checks and the read report are the same as for every other reader here.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from pathlib import Path

from structqa.data.records import DataError, Dataset, Example, ReadReport
from structqa.data.squad import (
    UNREADABLE,
    QuestionIds,
    check_clean_text,
    decode_failure,
    first_occurrence,
    located_answer,
    make_example,
    open_text,
    read_records,
    skip_unreadable,
)

#: File name endings read as tables (before an optional ``.gz``).
TABLE_SUFFIXES = (".csv", ".tsv")
_ANSWER_COLUMNS = ("answer", "answer_text")
_DELIMITERS = (",", ";", "\t")
_KNOWN_COLUMNS = ("id", "title", "context", "question", "answer_start", *_ANSWER_COLUMNS)
# how a spreadsheet saves a table as UTF-8, named when a file is not
_SAVE_AS = " (a spreadsheet's 'CSV UTF-8')"

logger = logging.getLogger(__name__)


def is_table(path: str | Path) -> bool:
    """Whether ``path`` is named as a CSV or TSV file (``.gz`` allowed)."""
    name = str(path).lower()
    name = name[: -len(".gz")] if name.endswith(".gz") else name
    return name.endswith(TABLE_SUFFIXES)


def read_table(
    path: str | Path, *, dedupe_ids: bool = False, answers_optional: bool = False
) -> Dataset:
    """Read a question-answer table (see the module docs) into examples; ``dedupe_ids``: see
    :class:`~structqa.data.squad.QuestionIds`; ``answers_optional``: a table without an answer
    column is questions to answer (examples without answers), not an error."""
    path = Path(path)
    return read_records(_rows(path, answers_optional), str(path), dedupe_ids, _read_row)


def _header_delimiter(path: Path, answers_optional: bool = False) -> str:
    """The delimiter that splits the header row into the required columns."""
    try:
        with open_text(path, newline="") as handle:
            header = handle.readline()
    except UNREADABLE as err:
        raise DataError(str(path), *decode_failure(path, err, _SAVE_AS)) from None
    if not header.strip():
        raise DataError(str(path), "line 1", "(header)", "the file is empty or starts blank")
    first = "\t" if str(path).lower().removesuffix(".gz").endswith(".tsv") else ","
    order = (first, *(d for d in _DELIMITERS if d != first))
    for delimiter in order:
        names = {c.strip().lower() for c in next(csv.reader([header], delimiter=delimiter))}
        if {"question", "context"} <= names and (answers_optional or names & set(_ANSWER_COLUMNS)):
            return delimiter
    raise DataError(
        str(path),
        "line 1",
        "(header)",
        f"the header {header.strip()[:200]!r} does not name the columns question, context and "
        "answer (or answer_text), separated by commas, semicolons or tabs; id, answer_start "
        "and title are optional",
    )


def _columns(cells: list[str], name: str) -> list[str]:
    """The header's column names, stripped and lower-cased; a name given twice (``answer``
    and ``answer_text`` count as one) is an error, unknown ones are logged."""
    columns = [c.strip().lower() for c in cells]
    folded = ["answer" if c in _ANSWER_COLUMNS else c for c in columns]
    repeated = sorted({c for c in folded if c and folded.count(c) > 1})
    if repeated:
        raise DataError(
            name,
            "line 1",
            "(header)",
            f"the column(s) {', '.join(repeated)} appear more than once (answer and answer_text "
            "are one column); keep one of each, or rename the others",
        )
    ignored = [c for c in columns if c not in _KNOWN_COLUMNS]
    if ignored:
        logger.info("%s: columns not read: %s", name, ", ".join(repr(c) for c in ignored))
    return columns


def _rows(path: Path, answers_optional: bool = False) -> Iterator[tuple[str, dict[str, str]]]:
    """(where, row) of each data row, keyed by the header's column names."""
    delimiter = _header_delimiter(path, answers_optional)
    name = str(path)
    line = 0
    # a long passage is one cell: the csv module's default limit (131,072 characters) is not
    # a limit of the format (the same text is read from JSON)
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    try:
        with open_text(path, newline="") as handle:  # (newline="": a cell keeps its \r\n)
            reader = csv.reader(handle, delimiter=delimiter, strict=True)
            columns = _columns(next(reader), name)
            line = reader.line_num
            for cells in reader:
                where = f"line {line + 1}"
                line = reader.line_num
                if not any(c.strip() for c in cells):
                    continue  # a blank row
                if len(cells) != len(columns):
                    raise DataError(
                        name,
                        where,
                        "(row)",
                        f"{len(cells)} cells for {len(columns)} columns; quote any cell that "
                        f'holds {delimiter!r}, a quote or a line break ("like, this"), with no '
                        "space between the separator and the opening quote",
                    )
                yield where, dict(zip(columns, cells, strict=True))
    except csv.Error as err:
        hint = (
            "; a cell that begins with a quote must be quoted whole, its quotes doubled"
            if delimiter == "\t"
            else ""
        )
        raise DataError(name, f"line {line + 1}", "(row)", f"not valid CSV: {err}{hint}") from None
    except UNREADABLE as err:
        raise DataError(name, *decode_failure(path, err, _SAVE_AS)) from None


def _read_row(
    row: dict[str, str], where: str, *, seen: QuestionIds, report: ReadReport
) -> Example | None:
    name = report.path
    if "id" in row:
        qid = check_clean_text(row["id"].strip(), path=name, record=where, field_name="id")
        if not qid:
            raise DataError(
                name,
                where,
                "id",
                "empty id; give every row an id, or drop the id column to have the rows "
                "numbered by line (row-N)",
            )
    else:  # (a sheet sorted between training and scoring renumbers these)
        qid = f"row-{where.removeprefix('line ')}"
    qid = seen.claim(qid, f"{qid} ({where})")
    rec = f"{qid} ({where})"
    context = check_clean_text(row["context"], path=name, record=rec, field_name="context")
    question = check_clean_text(row["question"], path=name, record=rec, field_name="question")
    title = row.get("title", "").strip()
    if skip_unreadable(report, qid, where, context=context, question=question):
        return None
    if "answer" not in row and "answer_text" not in row:  # questions alone, to be answered
        return Example(qid, question, context, title=title)
    column = "answer" if "answer" in row else "answer_text"
    text = check_clean_text(row[column].strip(), path=name, record=rec, field_name=column)
    if not text:  # no answer: unanswerable
        return make_example(report, qid, question, context, [], [], is_impossible=True, title=title)
    start = _start(row.get("answer_start", "").strip(), name, rec)
    if start is not None:
        found = located_answer(report, context, qid, column, text, start)
    else:
        found = first_occurrence(report, context, qid, column, text)
    return make_example(
        report, qid, question, context, [] if found is None else [found], [text], title=title
    )


def _start(cell: str, name: str, rec: str) -> int | None:
    """The ``answer_start`` cell as an offset (a spreadsheet's ``10.0`` is 10); empty: None."""
    if not cell:
        return None
    try:
        value = float(cell)
    except ValueError:
        value = float("nan")
    if not value.is_integer():
        raise DataError(
            name,
            rec,
            "answer_start",
            f"{cell!r} is not a whole number; give the answer's character offset in the "
            "context, or leave the cell empty to use its first occurrence",
        )
    return int(value)
