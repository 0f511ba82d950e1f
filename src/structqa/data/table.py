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
from collections.abc import Iterator
from pathlib import Path

from structqa.data.records import Answer, DataError, Dataset, Example, ReadReport
from structqa.data.squad import (
    UNREADABLE,
    QuestionIds,
    check_clean_text,
    located_answer,
    make_example,
    note_warning,
    open_text,
    read_records,
    skip_unreadable,
    unreadable,
)

#: File name endings read as tables (before an optional ``.gz``).
TABLE_SUFFIXES = (".csv", ".tsv")
_ANSWER_COLUMNS = ("answer", "answer_text")
_DELIMITERS = (",", ";", "\t")


def is_table(path: str | Path) -> bool:
    """Whether ``path`` is named as a CSV or TSV file (``.gz`` allowed)."""
    name = str(path).lower()
    name = name[: -len(".gz")] if name.endswith(".gz") else name
    return name.endswith(TABLE_SUFFIXES)


def read_table(path: str | Path, *, dedupe_ids: bool = False) -> Dataset:
    """Read a question-answer table (see the module docs) into examples; ``dedupe_ids``: see
    :class:`~structqa.data.squad.QuestionIds`."""
    path = Path(path)
    return read_records(_rows(path), str(path), dedupe_ids, _read_row)


def _header_delimiter(path: Path) -> str:
    """The delimiter that splits the header row into the required columns."""
    try:
        with open_text(path) as handle:
            header = handle.readline()
    except UNREADABLE as err:
        raise DataError(str(path), "(file)", "(encoding)", _unreadable(err)) from None
    if not header.strip():
        raise DataError(str(path), "line 1", "(header)", "the file is empty or starts blank")
    first = "\t" if str(path).lower().removesuffix(".gz").endswith(".tsv") else ","
    order = (first, *(d for d in _DELIMITERS if d != first))
    for delimiter in order:
        names = {c.strip().lower() for c in next(csv.reader([header], delimiter=delimiter))}
        if {"question", "context"} <= names and names & set(_ANSWER_COLUMNS):
            return delimiter
    raise DataError(
        str(path),
        "line 1",
        "(header)",
        f"the header {header.strip()[:200]!r} does not name the columns question, context and "
        "answer (or answer_text), separated by commas, semicolons or tabs; id, answer_start "
        "and title are optional",
    )


def _rows(path: Path) -> Iterator[tuple[str, dict[str, str | None]]]:
    """(where, row) of each data row, column names stripped and lower-cased."""
    delimiter = _header_delimiter(path)
    name = str(path)
    line = 1
    try:
        with open_text(path) as handle:
            reader = csv.reader(handle, delimiter=delimiter, strict=True)
            columns = [c.strip().lower() for c in next(reader)]
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
                        f'holds {delimiter!r}, a quote or a line break ("like, this")',
                    )
                yield where, dict(zip(columns, cells, strict=True))
    except csv.Error as err:
        raise DataError(name, f"line {line + 1}", "(row)", f"not valid CSV: {err}") from None
    except UNREADABLE as err:
        raise DataError(name, f"line {line + 1}", "(file)", _unreadable(err)) from None


def _unreadable(err: BaseException) -> str:
    hint = "; save it as UTF-8 (a spreadsheet's 'CSV UTF-8')"
    return unreadable(err, "data") + (hint if isinstance(err, UnicodeDecodeError) else "")


def _read_row(
    row: dict[str, str | None], where: str, *, seen: QuestionIds, report: ReadReport
) -> Example | None:
    name = report.path
    qid = (row.get("id") or "").strip() or f"row-{where.removeprefix('line ')}"
    qid = seen.claim(qid, f"{qid} ({where})")
    rec = f"{qid} ({where})"
    context = check_clean_text(
        row.get("context") or "", path=name, record=rec, field_name="context"
    )
    question = check_clean_text(
        row.get("question") or "", path=name, record=rec, field_name="question"
    )
    title = (row.get("title") or "").strip()
    if skip_unreadable(report, qid, where, context=context, question=question):
        return None
    column = "answer" if "answer" in row else "answer_text"
    text = (row.get(column) or "").strip()  # a spreadsheet's stray spaces
    if not text:  # no answer: unanswerable
        return make_example(report, qid, question, context, [], [], is_impossible=True, title=title)
    located = _locate(report, context, qid, column, text, (row.get("answer_start") or "").strip())
    return make_example(
        report, qid, question, context, [] if located is None else [located], [text], title=title
    )


def _locate(
    report: ReadReport, context: str, qid: str, column: str, text: str, start_cell: str
) -> Answer | None:
    """The answer at its ``answer_start`` (repaired nearby as for SQuAD), or at its first
    occurrence when the table gives no start (a second occurrence is noted as ambiguous)."""
    if start_cell:
        try:
            start = int(start_cell)
        except ValueError:
            raise DataError(
                report.path,
                qid,
                "answer_start",
                f"{start_cell!r} is not a whole number; give the answer's character offset in "
                "the context, or leave the cell empty to use its first occurrence",
            ) from None
        return located_answer(report, context, qid, column, text, start)
    found = context.find(text)
    if found < 0:
        note_warning(
            report,
            "answer_not_in_context",
            f"question {qid!r}: {column} {text!r} does not occur in the context (text kept "
            "for scoring, not located)",
        )
        return None
    if context.find(text, found + 1) >= 0:
        note_warning(
            report,
            "answer_start_ambiguous",
            f"question {qid!r}: {column} {text!r} occurs more than once and no answer_start "
            f"is given; the first, at {found}, is taken",
        )
    return Answer(text=text, start=found)
