"""SQuAD v1.1 / v2.0 JSON reader, and the checks every SQuAD-family reader shares.

Rules for bad input (the project standard): structural problems (invalid JSON, a missing or
mistyped field, a duplicate question id, contradictory answer fields) raise ``DataError``
naming file, record and field; problems that are safe to skip or repair are counted in the
``ReadReport`` and the first few of each kind are logged.
"""

from __future__ import annotations

import codecs
import gzip
import json
import logging
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from structqa.data.hygiene import has_readable_text, text_problem
from structqa.data.records import Answer, DataError, Dataset, Example, ReadReport

# One logger for every reader's reports and problems, so they are filtered together.
logger = logging.getLogger("structqa.data")

#: How far (chars) a SQuAD ``answer_start`` may be off and still be repaired. Real data has
#: off-by-one offsets and offsets shifted by whitespace normalisation, rarely more.
REPAIR_WINDOW = 20
# The summary line counts every problem; logging each one would flood the log on big files.
_LOGGED_PER_REASON = 5

# Failures of decompression or decoding that mean the file itself is unreadable.
UNREADABLE = (UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error)


def open_text(path: Path, newline: str | None = None) -> IO[str]:
    """Open a UTF-8 text file for reading, decompressing ``.gz`` (any case) transparently;
    ``newline``: as for :func:`open` (``""`` for the :mod:`csv` module)."""
    # utf-8-sig: tolerate a byte-order mark, which some editors write into JSON files.
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline=newline)
    return path.open(encoding="utf-8-sig", newline=newline)


def load_json(path: Path) -> Any:
    """Parse a whole (optionally gzipped) JSON file, raising DataError on invalid content."""
    try:
        with open_text(path) as handle:
            text = handle.read()
    except UNREADABLE as err:
        if isinstance(err, UnicodeDecodeError):
            raise DataError(str(path), *decode_failure(path, err)) from None
        raise DataError(str(path), "(file)", "(encoding)", unreadable(err)) from None
    return parse_json(text, str(path), None)


def unreadable(err: BaseException, what: str = "file") -> str:
    """The problem text of a decompression or decoding failure (``UNREADABLE``)."""
    if isinstance(err, EOFError):
        return f"unreadable {what}: compressed data cut short ({err}); copy the file again"
    return f"unreadable {what}: {err}"


_LINE_BREAK = re.compile(rb"\r\n?|\n")


def not_utf8(byte: int, offset: int, hint: str = "") -> str:
    """The problem text of a byte that is not UTF-8, ``offset`` bytes into its line; ``hint``:
    how the user's tool saves UTF-8, e.g. " (a spreadsheet's 'CSV UTF-8')"."""
    return (
        f"byte {byte:#04x} at offset {offset} of the line is not UTF-8; save the file as "
        f"UTF-8{hint}"
    )


def decode_failure(path: Path, err: BaseException, hint: str = "") -> tuple[str, str, str]:
    """(record, field, problem) of a file that cannot be read: the line of the first byte
    that is not UTF-8 (a text reader decodes in blocks, so its own position says little);
    ``hint``: see :func:`not_utf8`."""
    if not isinstance(err, UnicodeDecodeError):
        return "(file)", "(file)", unreadable(err, "data")
    with open_bytes(path) as handle:
        raw = handle.read().removeprefix(codecs.BOM_UTF8)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        line, line_start = 1, 0
        for end in _LINE_BREAK.finditer(raw, 0, bad.start):  # a lone \r ends a line too
            line, line_start = line + 1, end.end()
        problem = not_utf8(raw[bad.start], bad.start - line_start, hint)
        return f"line {line}", "(encoding)", problem
    return "(file)", "(encoding)", unreadable(err, "data")


def parse_json(text: str, path: str, lineno: int | None) -> Any:
    """Parse ``text`` (a whole file, or its line ``lineno``), raising DataError on invalid JSON
    and on nesting deeper than Python's parser recurses (a RecursionError otherwise)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        line = err.lineno if lineno is None else lineno
        raise DataError(
            path, f"line {line}", "(json)", f"invalid JSON at column {err.colno}: {err.msg}"
        ) from None
    except RecursionError:
        where = "(file)" if lineno is None else f"line {lineno}"
        raise DataError(
            path, where, "(json)", "JSON nested too deeply to parse (a damaged or hostile file)"
        ) from None


def check_clean_text(text: str, *, path: str, record: str, field_name: str) -> str:
    """Return ``text`` if it is valid Unicode without NUL (:mod:`structqa.data.hygiene`), else
    raise DataError naming the record and field."""
    problem = text_problem(text)
    if problem is not None:
        raise DataError(path, record, field_name, f"contains {problem}; fix the file's text")
    return text


def file_lines(path: Path, mended: list[int] | None = None) -> Iterator[tuple[int, str]]:
    """``(line_number, line)`` from 1 of a UTF-8 (optionally gzipped) file, each line decoded
    alone, so that a byte that is not UTF-8 is placed on its own line (decoded in blocks, it
    was named at the first line of its block): DataError, or (``mended`` given) read as
    U+FFFD and its line number appended there."""
    name = str(path)
    lineno = 0
    try:
        with open_bytes(path) as handle:
            for raw in handle:  # lines end at \n; a lone \r ends one too, as in text mode
                pieces = raw.splitlines(keepends=True) if b"\r" in raw else (raw,)
                for piece in pieces:
                    lineno += 1
                    if lineno == 1:
                        piece = piece.removeprefix(codecs.BOM_UTF8)
                    try:
                        line = piece.decode("utf-8")
                    except UnicodeDecodeError as err:
                        if mended is None:
                            problem = not_utf8(piece[err.start], err.start)
                            raise DataError(name, f"line {lineno}", "(file)", problem) from None
                        line = piece.decode("utf-8", errors="replace")
                        mended.append(lineno)
                    yield lineno, line
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # a .gz cut short or damaged
        raise DataError(name, f"line {lineno + 1}", "(file)", unreadable(err, "data")) from None


def open_bytes(path: Path) -> IO[bytes]:
    """A file's bytes, decompressing ``.gz`` (any case) transparently."""
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rb")
    return path.open("rb")


def starts_with(path: Path, mark: bytes) -> bool:
    """Whether a (optionally gzipped) file's first character past a byte-order mark and
    whitespace is ``mark`` (read as bytes: a stray byte further on is the reader's to name)."""
    with open_bytes(path) as handle:
        head = handle.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
    return head.startswith(mark)


def numbered_lines(handle: Iterable[str], path: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` from 1, turning decoding failures into DataError."""
    lineno = 0
    try:
        for lineno, line in enumerate(handle, start=1):
            yield lineno, line
    except UNREADABLE as err:
        raise DataError(path, f"line {lineno + 1}", "(file)", unreadable(err, "data")) from None


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "string", int: "integer", list: "list", dict: "object", bool: "boolean"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def check_type(
    value: Any, kind: type | tuple[type, ...], *, path: str, record: str, field_name: str
) -> Any:
    """Return ``value`` if it has type ``kind``, else raise DataError."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is a subclass of int, but `true` is never a valid offset.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise DataError(
            path, record, field_name, f"expected {_type_name(kind)}, got {type(value).__name__}"
        )
    return value


def get_field(
    obj: dict[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    *,
    path: str,
    record: str,
    field_name: str | None = None,
) -> Any:
    """Return ``obj[key]``, raising DataError if it is missing or of the wrong type."""
    name = field_name or key
    if key not in obj:
        raise DataError(path, record, name, "missing required field")
    return check_type(obj[key], kind, path=path, record=record, field_name=name)


class QuestionIds:
    """The question ids of one file, each with where it was first read. A repeat is an
    error naming the id and both places (scorers key predictions by id), or, with
    ``dedupe``, is renamed ``ID#2``, ``ID#3``, ... in file order and counted in the report
    (``duplicate_id_renamed``), e.g. for published contrast sets that reuse ids."""

    def __init__(self, report: ReadReport, dedupe: bool = False) -> None:
        self.report, self.dedupe = report, dedupe
        self.first: dict[str, str] = {}

    def claim(self, qid: str, where: str, field_name: str = "id") -> str:
        """``qid``, or its new name when it repeats and ``dedupe`` is on."""
        if qid not in self.first:
            self.first[qid] = where
            return qid
        if not self.dedupe:
            raise DataError(
                self.report.path,
                where,
                field_name,
                f"duplicate question id {qid!r}, first at {self.first[qid]}; rename one, or "
                "have repeats renamed (ID#2, ID#3, ...): --data.dedupe_ids=true for train "
                "and evaluate, --dedupe-ids for predict, calibrate, score and compare",
            )
        n = 2
        while f"{qid}#{n}" in self.first:
            n += 1
        renamed = f"{qid}#{n}"
        self.first[renamed] = where
        note_warning(
            self.report,
            "duplicate_id_renamed",
            f"question {qid!r} at {where} (first at {self.first[qid]}) renamed {renamed!r}",
        )
        return renamed


def note_skip(report: ReadReport, reason: str, detail: str) -> None:
    """Count one skipped question and log the first few of each reason."""
    report.skip(reason, detail)
    if report.skipped[reason] <= _LOGGED_PER_REASON:
        logger.warning("%s: skipped %s [%s]", report.path, detail, reason)


def note_warning(
    report: ReadReport, reason: str, detail: str, *, level: int = logging.WARNING
) -> None:
    """Count one kept-but-suspect item and log the first few of each reason at ``level``."""
    report.warn(reason, detail)
    if report.warnings[reason] <= _LOGGED_PER_REASON:
        logger.log(level, "%s: %s [%s]", report.path, detail, reason)


def answer_text(item: Any, field: str, path: str, record: str) -> str:
    """The text of one gold-answer object ``field`` (e.g. ``answers[0]``) of a record; a
    :class:`DataError` naming the file, record and field when it is not one."""
    check_type(item, dict, path=path, record=record, field_name=field)
    return get_field(item, "text", str, path=path, record=record, field_name=f"{field}.text")


def make_example(
    report: ReadReport,
    qid: str,
    question: str,
    context: str,
    located: Iterable[Answer],
    gold_texts: Iterable[str],
    *,
    is_impossible: bool = False,
    title: str = "",
) -> Example:
    """Build an Example, de-duplicating located answers and flagging answerable ones without any
    (``located``: the gold answers found in the context; ``gold_texts``: every gold text, for
    scoring)."""
    # Repeated annotations add nothing as training targets; order is kept so the first
    # annotator's answer stays first. gold_texts keep repeats: scorers take a max over them.
    answers = tuple(dict.fromkeys(located))
    if not is_impossible and not answers:
        note_warning(
            report,
            "no_located_answer",
            f"question {qid!r}: no gold answer located in the context (kept; scored only)",
        )
    return Example(
        id=qid,
        question=question,
        context=context,
        answers=answers,
        gold_texts=tuple(gold_texts),
        is_impossible=is_impossible,
        title=title,
    )


def skip_unreadable(report: ReadReport, qid: str, where: str, **texts: str) -> bool:
    """Whether a question is skipped (and counted as ``empty_<field>``) because one of its
    ``texts`` (field name -> text) holds no character a model reads."""
    for field, text in texts.items():
        if not has_readable_text(text):
            note_skip(
                report,
                f"empty_{field}",
                f"question {qid!r} ({where}): no character a model reads in its {field}",
            )
            return True
    return False


def read_records(
    records: Iterable[tuple[str, Any]],
    name: str,
    dedupe_ids: bool,
    read_record: Callable[..., Example | None],
) -> Dataset:
    """Examples of one-question records (``(where, record)`` pairs): each read by
    ``read_record(record, where, seen=, report=)`` (None: skipped); SQuAD 2.0 when any is
    unanswerable."""
    report = ReadReport(path=name)
    seen = QuestionIds(report, dedupe_ids)
    examples: list[Example] = []
    for where, record in records:
        example = read_record(record, where, seen=seen, report=report)
        if example is not None:
            examples.append(example)
    version = "2.0" if any(ex.is_impossible for ex in examples) else "1.1"
    return finish(report, examples, version)


def finish(report: ReadReport, examples: list[Example], version: str) -> Dataset:
    """Close the report, log its summary and wrap the examples."""
    report.read = len(examples)
    logger.info("%s", report.summary())
    return Dataset(examples=tuple(examples), report=report, version=version)


def locate_answer(context: str, text: str, start: int) -> int | None:
    """Return a verified start for ``text``: ``start`` itself if it matches, else the nearest
    exact occurrence within ``REPAIR_WINDOW`` chars (the earlier one on a tie), else None."""
    if start >= 0 and context.startswith(text, start):
        return start
    low, end = max(0, start - REPAIR_WINDOW), start + REPAIR_WINDOW + len(text)
    if end <= 0:  # str.find would count a negative end from the back: the whole context
        return None
    best: int | None = None
    found = context.find(text, low, end)
    while found != -1:
        if best is None or abs(found - start) < abs(best - start):
            best = found
        found = context.find(text, found + 1, end)
    return best


def located_answer(
    report: ReadReport, context: str, qid: str, field: str, text: str, start: int
) -> Answer | None:
    """The gold answer ``text`` at (or repaired near) ``start`` in ``context``, spaces around
    it left out, or None with a warning in ``report`` (empty text, or not found near
    ``start``: kept for scoring only)."""
    if not text.strip():
        note_warning(report, "empty_answer_text", f"question {qid!r}: {field} has empty text")
        return None
    found = locate_answer(context, text, start)
    if found is None:
        note_warning(
            report,
            "answer_start_mismatch",
            f"question {qid!r}: {field} {text!r} not found near answer_start {start} "
            "(text kept for scoring, not located)",
        )
        return None
    if found != start:
        note_warning(
            report,
            "answer_start_repaired",
            f"question {qid!r}: {field} answer_start {start} -> {found}",
        )
    # spaces around the text are not the answer: "Denver " at 4 trained as "Denver Broncos"
    lead = len(text) - len(text.lstrip())
    return Answer(text=text.strip(), start=found + lead)


def first_occurrence(
    report: ReadReport, context: str, qid: str, field: str, text: str
) -> Answer | None:
    """The gold answer ``text`` (``field`` of question ``qid``) where the file gives no start:
    its first occurrence in ``context`` as a whole word (not "10" inside "2010"), else its
    first occurrence inside a word, noted; a second whole-word occurrence is noted as
    ambiguous; None, noted, when it does not occur (kept for scoring, not located)."""
    anywhere = [m.start() for m in re.finditer(re.escape(text), context)]
    if not anywhere:
        note_warning(
            report,
            "answer_not_in_context",
            f"question {qid!r}: {field} {text!r} does not occur in the context (text kept "
            "for scoring, not located)",
        )
        return None
    words = [i for i in anywhere if _whole_word(context, i, i + len(text))]
    if not words:
        note_warning(
            report,
            "answer_inside_word",
            f"question {qid!r}: {field} {text!r} occurs only inside longer words; the first, "
            f"at {anywhere[0]}, is taken (give answer_start to choose)",
        )
        return Answer(text=text, start=anywhere[0])
    if len(words) > 1:
        note_warning(
            report,
            "answer_start_ambiguous",
            f"question {qid!r}: {field} {text!r} occurs {len(words)} times and no "
            f"answer_start is given; the first, at {words[0]}, is taken",
        )
    return Answer(text=text, start=words[0])


def _whole_word(context: str, start: int, end: int) -> bool:
    """Whether ``context[start:end]`` does not continue a word on either side."""
    before = context[start - 1] if start > 0 else " "
    after = context[end] if end < len(context) else " "
    inner_first, inner_last = context[start], context[end - 1]
    return not (before.isalnum() and inner_first.isalnum()) and not (
        after.isalnum() and inner_last.isalnum()
    )


_KNOWN_VERSIONS = ("1.0", "1.1", "2.0")


def _warn_unknown_version(doc: dict[str, Any], version: str, report: ReadReport) -> None:
    """A declared ``version`` this reader does not know is read anyway, with a warning that
    names it and how the file was read."""
    if "version" not in doc:
        return
    declared = str(doc["version"])
    if declared.lstrip("vV") in _KNOWN_VERSIONS:
        return
    how = "its questions carry is_impossible" if version == "2.0" else "no is_impossible fields"
    note_warning(
        report,
        "unknown_version",
        f"declares version {declared!r}, which this reader does not know (known: 1.1, 2.0); "
        f"read as SQuAD v{version} ({how})",
    )


def _squad_version(doc: dict[str, Any], saw_is_impossible: bool) -> str:
    # Content wins over the declared version: v2.0 questions carry is_impossible.
    if saw_is_impossible:
        return "2.0"
    declared = str(doc.get("version", "")).lstrip("vV")
    return "2.0" if declared.startswith("2") else "1.1"


def read_squad(path: str | Path, *, dedupe_ids: bool = False) -> Dataset:
    """Read a SQuAD v1.1 or v2.0 JSON file (optionally ``.gz``) into examples.

    v2.0 unanswerable questions get ``is_impossible=True`` and no answers; their
    ``plausible_answers`` are not gold and are ignored. A file without a ``version`` key
    (as hand-made files often are) is read all the same: its questions decide (any
    ``is_impossible`` makes it v2.0). An answer without ``answer_start`` is taken at its
    first occurrence in the context, as a table's is (:func:`first_occurrence`; counted in the
    report). ``dedupe_ids``: see :class:`QuestionIds`.
    """
    path = Path(path)
    name = str(path)
    report = ReadReport(path=name)
    doc = load_json(path)
    top = "(top level)"
    check_type(doc, dict, path=name, record=top, field_name="data")
    articles = get_field(doc, "data", list, path=name, record=top)
    seen = QuestionIds(report, dedupe_ids)
    examples: list[Example] = []
    saw_is_impossible = False
    for i, article in enumerate(articles):
        where = f"data[{i}]"
        check_type(article, dict, path=name, record=where, field_name="data")
        title = check_type(
            article.get("title", ""), str, path=name, record=where, field_name="title"
        )
        paragraphs = get_field(article, "paragraphs", list, path=name, record=where)
        for j, paragraph in enumerate(paragraphs):
            where = f"data[{i}].paragraphs[{j}]"
            check_type(paragraph, dict, path=name, record=where, field_name="paragraphs")
            context = get_field(paragraph, "context", str, path=name, record=where)
            check_clean_text(context, path=name, record=where, field_name="context")
            qas = get_field(paragraph, "qas", list, path=name, record=where)
            for k, qa in enumerate(qas):
                check_type(qa, dict, path=name, record=f"{where}.qas[{k}]", field_name="qas")
                saw_is_impossible = saw_is_impossible or "is_impossible" in qa
                example = _read_question(
                    qa, context, title, where=f"{where}.qas[{k}]", seen=seen, report=report
                )
                if example is not None:
                    examples.append(example)
    version = _squad_version(doc, saw_is_impossible)
    _warn_unknown_version(doc, version, report)
    if "version" not in doc:
        logger.info(
            "%s: no 'version' key; read as SQuAD v%s (%s)",
            name,
            version,
            "questions with is_impossible" if saw_is_impossible else "no is_impossible field",
        )
    return finish(report, examples, version)


def _read_question(
    qa: dict[str, Any],
    context: str,
    title: str,
    *,
    where: str,
    seen: QuestionIds,
    report: ReadReport,
) -> Example | None:
    name = report.path
    # integer ids (COVID-QA and other SQuAD-like releases) are read as their decimal text
    qid = get_field(qa, "id", (str, int), path=name, record=where)
    qid = str(qid) if isinstance(qid, int) else qid
    if not qid:
        raise DataError(name, where, "id", "empty question id")
    qid = seen.claim(qid, where)
    question = get_field(qa, "question", str, path=name, record=qid)
    check_clean_text(question, path=name, record=qid, field_name="question")
    if not has_readable_text(context):
        note_skip(
            report, "empty_context", f"question {qid!r}: no character a model reads in its context"
        )
        return None
    if not has_readable_text(question):
        note_skip(
            report,
            "empty_question",
            f"question {qid!r}: no character a model reads in its question",
        )
        return None
    is_impossible = check_type(
        qa.get("is_impossible", False), bool, path=name, record=qid, field_name="is_impossible"
    )
    answers = get_field(qa, "answers", list, path=name, record=qid)
    if is_impossible and answers:
        raise DataError(name, qid, "answers", "is_impossible is true but answers is not empty")
    if not is_impossible and not answers:
        raise DataError(name, qid, "answers", "no answers, and the question is not is_impossible")

    gold_texts: list[str] = []
    located: list[Answer] = []
    for m, answer in enumerate(answers):
        field = f"answers[{m}]"
        text = answer_text(answer, field, name, qid)
        gold_texts.append(text)
        start = answer.get("answer_start")
        if start is not None:
            field_name = f"{field}.answer_start"
            check_type(start, int, path=name, record=qid, field_name=field_name)
            found = located_answer(report, context, qid, field, text, start)
        elif not text.strip():
            found = located_answer(report, context, qid, field, text, -1)  # (noted: empty)
        else:  # as a hand-made file gives it: found as a table's answer is (or noted)
            found = first_occurrence(report, context, qid, field, text.strip())
            if found is not None:
                note_warning(
                    report,
                    "answer_start_missing",
                    f"question {qid!r}: {field} has no answer_start; its first occurrence, at "
                    f"{found.start}, is taken",
                )
        if found is not None:
            located.append(found)
    return make_example(
        report,
        qid,
        question,
        context,
        located,
        gold_texts,
        is_impossible=is_impossible,
        title=title,
    )
