"""Math word problems (GenBERT's second benchmark) as DROP questions for ``drop-train``.

Three files, three formats (see the data README):

- MAWPS, ``mawps.jsonl``: one JSON object per line, ``{"input", "target", "type", "idx"}``: the
  problem text (its last sentence asks), the numeric answer and the subset (addsub, singleop,
  singleeq, multiarith);
- SVAMP, ``svamp.json``: a JSON list of ``{"ID", "Body", "Question", "Equation", "Answer",
  "Type"}``;
- SVAMP's training set, ``mawps-asdiv-a-train.csv``: columns ``Question`` (numbers masked as
  ``number0``, ``number1``, ...), ``Numbers`` (space-separated, in that order), ``Equation``
  (prefix) and ``Answer``. The masks are put back from ``Numbers``; a mask without its number is
  an error, not a guess.

Each problem becomes a DROP question whose passage is the problem's statement and whose answer
is its number (written as an integer when it is one: ``43.0`` -> ``43``), so the generative
reader trains and is scored on it as on DROP's number questions (exact match of the number is
the accuracy). A malformed line or record raises ``DataError`` naming the file, the line or
record, and the field.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structqa.data.records import DataError

_MASK = re.compile(r"\bnumber(\d+)\b")
_LAST_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[^.!?]*\?\s*$)")


@dataclass(frozen=True)
class Problem:
    """One word problem: ``body`` states it, ``question`` asks; ``answer`` is the number."""

    id: str
    body: str
    question: str
    answer: str
    subset: str


def format_number(value: float) -> str:
    """``43.0`` -> ``"43"``, ``0.5`` -> ``"0.5"`` (no exponent, no trailing zeros)."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _number(raw: Any, path: str, record: str, field_name: str) -> str:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise DataError(path, record, field_name, f"expected a number, got {raw!r}")
    try:
        return format_number(float(raw))
    except ValueError:
        raise DataError(path, record, field_name, f"not a number: {raw!r}") from None


def _text(raw: Any, path: str, record: str, field_name: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise DataError(path, record, field_name, f"expected non-empty text, got {raw!r}")
    return " ".join(raw.split())


def split_question(text: str) -> tuple[str, str]:
    """A MAWPS problem's statement and its question (the last sentence, where it asks)."""
    parts = _LAST_SENTENCE.split(text.strip(), maxsplit=1)
    if len(parts) == 2:
        return parts[0], parts[1]
    return text, text


def read_mawps(path: str | Path) -> list[Problem]:
    name = str(path)
    problems = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            record = f"line {n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(name, record, "(line)", f"not JSON: {e.msg}") from None
            if not isinstance(obj, dict):
                raise DataError(name, record, "(line)", "expected a JSON object")
            for key in ("input", "target", "type"):
                if key not in obj:
                    raise DataError(name, record, key, "missing")
            body, question = split_question(_text(obj["input"], name, record, "input"))
            answer = _number(obj["target"], name, record, "target")
            subset = _text(obj["type"], name, record, "type").lower()
            problems.append(Problem(f"mawps-{obj.get('idx', n)}", body, question, answer, subset))
    return problems


def read_svamp(path: str | Path) -> list[Problem]:
    name = str(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(name, "(file)", "(top level)", f"not JSON: {e.msg}") from None
    if not isinstance(doc, list):
        raise DataError(name, "(file)", "(top level)", "expected a JSON list of problems")
    problems = []
    for i, obj in enumerate(doc):
        record = f"[{i}]" + (f" ({obj.get('ID')})" if isinstance(obj, dict) else "")
        if not isinstance(obj, dict):
            raise DataError(name, record, "(record)", "expected a JSON object")
        for key in ("ID", "Body", "Question", "Answer"):
            if key not in obj:
                raise DataError(name, record, key, "missing")
        problems.append(
            Problem(
                id=f"svamp-{obj['ID']}",
                body=_text(obj["Body"], name, record, "Body"),
                question=_text(obj["Question"], name, record, "Question"),
                answer=_number(obj["Answer"], name, record, "Answer"),
                subset=str(obj.get("Type", "")).lower(),
            )
        )
    return problems


def unmask(text: str, numbers: Sequence[str], path: str, record: str) -> str:
    """``text`` with ``numberK`` replaced by the K-th of ``numbers``."""

    def put(m: re.Match) -> str:
        k = int(m.group(1))
        if k >= len(numbers):
            raise DataError(
                path,
                record,
                "Numbers",
                f"{m.group(0)} in the text, but only {len(numbers)} numbers",
            )
        return numbers[k]

    return _MASK.sub(put, text)


def read_masked_csv(path: str | Path) -> list[Problem]:
    """SVAMP's training CSV, numbers put back."""
    name = str(path)
    problems = []
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.DictReader(f)
        missing = {"Question", "Numbers", "Answer"} - set(rows.fieldnames or ())
        if missing:
            raise DataError(name, "(header)", ", ".join(sorted(missing)), "missing column")
        for n, row in enumerate(rows, start=2):  # line 1 is the header
            record = f"line {n}"
            raw = (row.get("Numbers") or "").split()
            numbers = [_number(x, name, record, "Numbers") for x in raw]
            question_text = unmask(
                _text(row["Question"], name, record, "Question"), numbers, name, record
            )
            body, question = split_question(question_text)
            if row.get("Body") and row.get("Ques"):
                body = unmask(_text(row["Body"], name, record, "Body"), numbers, name, record)
                question = unmask(_text(row["Ques"], name, record, "Ques"), numbers, name, record)
            answer = _number(row["Answer"], name, record, "Answer")
            problems.append(Problem(f"asdiv-a-{n}", body, question, answer, "mawps-asdiv-a"))
    return problems


def read_problems(path: str | Path) -> list[Problem]:
    """Any of the three formats, by the file's name."""
    name = Path(path).name
    if name.endswith(".jsonl"):
        return read_mawps(path)
    if name.endswith(".csv"):
        return read_masked_csv(path)
    if name.endswith(".json"):
        return read_svamp(path)
    raise ValueError(
        f"{path}: not a word-problem file (.jsonl MAWPS, .json SVAMP, .csv SVAMP's training set)"
    )


def to_drop_json(problems: Sequence[Problem]) -> dict[str, Any]:
    """DROP JSON: a passage per problem, its one question with a number answer."""
    empty_date = {"day": "", "month": "", "year": ""}
    return {
        p.id: {
            "passage": p.body,
            "qa_pairs": [
                {
                    "query_id": p.id,
                    "question": p.question,
                    "answer": {"number": p.answer, "date": empty_date, "spans": []},
                    "subset": p.subset,
                }
            ],
        }
        for p in problems
    }


def folds(problems: Sequence[Problem], k: int, seed: int = 0) -> list[list[Problem]]:
    """``problems`` dealt into ``k`` folds after a seeded shuffle (sizes differ by at most 1)."""
    if k < 2:
        raise ValueError(f"folds: k={k}; give at least 2")
    order = list(problems)
    random.Random(seed).shuffle(order)
    return [order[i::k] for i in range(k)]


def dev_split(
    problems: Sequence[Problem], fraction: float, seed: int = 0
) -> tuple[list[Problem], list[Problem]]:
    """``(train, dev)``: a seeded ``fraction`` of ``problems`` (at least one) held out as dev."""
    if not 0 < fraction < 1:
        raise ValueError(f"dev fraction {fraction}: give a share between 0 and 1, e.g. 0.1")
    order = list(problems)
    random.Random(seed).shuffle(order)
    n = max(1, round(fraction * len(order)))
    return order[n:], order[:n]
