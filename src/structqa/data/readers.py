"""Readers by name, and format detection from a file's name and first bytes."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from pathlib import Path

from structqa.data.drop import DropDataset, read_drop
from structqa.data.flat import is_flat_record, read_flat
from structqa.data.mrqa import read_mrqa
from structqa.data.records import DataError, Dataset
from structqa.data.squad import UNREADABLE, file_lines, open_bytes, read_squad, unreadable
from structqa.data.table import is_table, read_table

# DROP's records differ from the SQuAD family's (numbers, dates, several spans). The SQuAD
# family's readers also take ``dedupe_ids=True``.
Reader = Callable[..., Dataset | DropDataset]

#: Format name -> reader. Other modules may add entries (e.g. ``READERS["drop"] = read_drop``).
READERS: dict[str, Reader] = {
    "squad": read_squad,
    "mrqa": read_mrqa,
    "flat": read_flat,
    "table": read_table,
    "drop": read_drop,
}

# Enough of a file to see the first record's keys without loading a large file twice.
_SNIFF_CHARS = 64 * 1024
_LINE_END = re.compile(r"\r\n?|\n")
# Key patterns that identify a JSON format, checked in order.
_JSON_SIGNATURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("squad", re.compile(r'"paragraphs"\s*:|"data"\s*:\s*\[\s*\]')),  # or no article
    ("drop", re.compile(r'"qa_pairs"\s*:')),
)


def get_reader(name: str) -> Reader:
    """Return the reader registered under ``name``, or raise ValueError naming the known ones."""
    try:
        return READERS[name]
    except KeyError:
        known = ", ".join(sorted(READERS))
        raise ValueError(f"unknown data format {name!r}; known formats: {known}") from None


def detect_format(path: str | Path) -> str:
    """Guess a file's format: ``.csv``/``.tsv`` is a question-answer table, ``.jsonl[.gz]`` is
    MRQA unless its first record is a question with its context and no ``qas`` (flat SQuAD
    records, as Hugging Face writes SQuAD, whose reader names what such a record lacks); JSON
    is told apart by its keys."""
    path = Path(path)
    if is_table(path):
        return "table"
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    jsonl = bool(suffixes) and suffixes[-1] == ".jsonl"
    # the format, not the text: read as bytes, a stray byte shown as U+FFFD is the reader's
    # to name, with its line; 4 bytes a character hold the first _SNIFF_CHARS characters
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        with open_bytes(path) as handle:
            raw = handle.read(4 * _SNIFF_CHARS)
            text = decoder.decode(raw).removeprefix("\ufeff")
            head = text[:_SNIFF_CHARS]
            if jsonl and not _LINE_END.search(head.lstrip()):  # a first record past the head
                while not _LINE_END.search(text.lstrip()) and (more := handle.read(1 << 20)):
                    text += decoder.decode(more)
                head = text
    except UNREADABLE as err:  # a corrupt or cut-short .gz
        raise DataError(str(path), "(file)", "(encoding)", unreadable(err)) from None
    if not head.strip():
        raise ValueError(f"{path}: the file is empty")
    first_line = _LINE_END.split(head.lstrip(), maxsplit=1)[0]  # (\r alone ends one too)
    first = _json_or_none(first_line)
    if isinstance(first, dict) and "header" in first:
        return "mrqa"
    if is_flat_record(first) or head.lstrip().startswith("["):  # no other format is a list
        return "flat"
    if jsonl:
        return "mrqa"
    for name, signature in _JSON_SIGNATURES:
        if signature.search(head):
            return name
    if head.count("\ufffd") > raw.count("\ufffd".encode()):  # bytes that are not UTF-8
        raise ValueError(
            f"{path}: not UTF-8 text, and no data format could be told from its first "
            f"{_SNIFF_CHARS} characters; save it as UTF-8"
        )
    raise ValueError(
        f"{path}: cannot tell the data format from its name or first {_SNIFF_CHARS} characters. "
        'Expected SQuAD JSON (a "data" list of articles with "paragraphs"), MRQA JSON lines '
        '(.jsonl or .jsonl.gz, a "header" line first), flat SQuAD records (one question a '
        'line or a JSON list, as Hugging Face datasets writes them: "context", "question", '
        '"answers": {"text", "answer_start"}), DROP JSON (passages with "qa_pairs") or a '
        "question-answer table named .csv or .tsv (columns question, context, answer); from "
        "Python, read_examples(path, format=...) names the format"
    )


def _json_or_none(line: str) -> object:
    try:
        return json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None  # (the reader reports it, naming the line)


def read_examples(
    path: str | Path, format: str | None = None, *, dedupe_ids: bool = False
) -> Dataset | DropDataset:
    """Read ``path`` with the reader for ``format``, detected from the file when None;
    ``dedupe_ids`` renames repeated question ids instead of failing (SQuAD and MRQA)."""
    name = format or detect_format(path)
    if dedupe_ids:
        if name not in ("squad", "mrqa", "flat", "table"):
            raise ValueError(f"{path}: dedupe_ids applies to SQuAD-family files, not {name!r}")
        return get_reader(name)(path, dedupe_ids=True)
    if format is not None:
        return get_reader(format)(path)
    if name not in READERS:
        known = ", ".join(sorted(READERS))
        raise ValueError(
            f"{path} looks like {name!r} data, but no reader is registered for it "
            f"(known formats: {known})"
        )
    return READERS[name](path)


def read_extractive(
    path: str | Path, format: str | None = None, *, dedupe_ids: bool = False
) -> Dataset:
    """Read a file of extractive QA examples (SQuAD / MRQA); other formats are a clear error."""
    ds = read_examples(path, format, dedupe_ids=dedupe_ids)
    if not isinstance(ds, Dataset):
        raise ValueError(
            f"{path}: a {ds.version!r} file, but this command needs extractive QA data "
            "(SQuAD v1.1/v2.0 JSON, MRQA jsonl, flat SQuAD records or a CSV/TSV table)"
        )
    return ds


def read_questions(path: str | Path, *, dedupe_ids: bool = False) -> Dataset:
    """Questions to answer (``structqa predict --file``): any file :func:`read_extractive`
    reads, or the same questions without answers: a CSV/TSV table with ``question`` and
    ``context`` columns (``id`` and ``title`` optional), or flat records without ``answers``
    (JSON lines, or a JSON list, of ``{"question", "context"[, "id", "title"]}``)."""
    path = Path(path)
    if is_table(path):
        return read_table(path, dedupe_ids=dedupe_ids, answers_optional=True)
    try:
        kind = detect_format(path)
    except ValueError:
        if not _first_record_is_a_question(path):
            raise
        kind = "flat"
    if kind == "flat":
        return read_flat(path, dedupe_ids=dedupe_ids, answers_optional=True)
    return read_extractive(path, kind, dedupe_ids=dedupe_ids)


def _first_record_is_a_question(path: Path) -> bool:
    """Whether the first line of ``path`` is a record with a question and a context (not an
    MRQA header or context with its ``qas``)."""
    for _, line in file_lines(path, mended=[]):
        if line.strip():
            return is_flat_record(_json_or_none(line))
    return False
