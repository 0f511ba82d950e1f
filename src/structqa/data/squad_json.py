"""Examples written back as a SQuAD JSON document (v2.0 when a question is unanswerable)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from structqa.data.records import Example
from structqa.io import write_json


def _squad_answers(example: Example, targets: bool) -> list[dict[str, Any]]:
    """The ``answers`` of one SQuAD question.

    ``targets`` (the training part): the located answers, so that reading the file back gives
    the same training targets. Otherwise (the part that is scored): every gold text in order,
    so that scoring sees the same gold answers; a gold text with no located span gets
    ``answer_start`` -1.
    """
    located = [{"text": a.text, "answer_start": a.start} for a in example.answers]
    if targets and located:
        return located
    starts: dict[str, list[int]] = {}
    for answer in example.answers:
        starts.setdefault(answer.text, []).append(answer.start)
    used: dict[str, int] = {}
    out = []
    for text in example.gold_texts:
        # a located answer is the gold text without the spaces around it (data.squad's
        # located_answer): found by that, its start moved back over the leading spaces
        key, lead = text.strip(), len(text) - len(text.lstrip())
        options = starts.get(key, [-1])
        start = options[used.get(key, 0) % len(options)]
        out.append({"text": text, "answer_start": start - lead if start >= 0 else -1})
        used[key] = used.get(key, 0) + 1
    return out


def to_squad_json(examples: Iterable[Example], targets: bool) -> dict[str, Any]:
    """Examples as a SQuAD JSON document (v2.0 if any question is unanswerable, else v1.1):
    articles by title and paragraphs by context, in order of first appearance."""
    examples = list(examples)
    v2 = any(e.is_impossible for e in examples)
    articles: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for ex in examples:
        qa: dict[str, Any] = {"id": ex.id, "question": ex.question}
        qa["answers"] = [] if ex.is_impossible else _squad_answers(ex, targets)
        if v2:
            qa["is_impossible"] = ex.is_impossible
        articles.setdefault(ex.title, {}).setdefault(ex.context, []).append(qa)
    data = [
        {
            "title": title,
            "paragraphs": [{"context": c, "qas": qas} for c, qas in paragraphs.items()],
        }
        for title, paragraphs in articles.items()
    ]
    return {"version": "v2.0" if v2 else "1.1", "data": data}


def write_squad_json(
    path: str | Path, examples: Iterable[Example], version_2: bool = True, targets: bool = True
) -> None:
    """``examples`` written (atomically) as compact SQuAD JSON, marked ``"version": "v2.0"``
    when ``version_2`` (read as SQuAD 2.0 even with no unanswerable question in it): with
    their training targets, or (``targets`` false: a file to score) every gold text."""
    doc = to_squad_json(examples, targets=targets)
    if version_2:
        doc["version"] = "v2.0"
    write_json(Path(path), doc, indent=None)
