"""Generating synthetic questions (seeded, each checked as it is made) and writing them as
DROP JSON."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from structqa.data.drop import DropAnswer
from structqa.data.synthetic.base import KINDS, MONTHS, STREAM, SynthConfig, SynthExample
from structqa.data.synthetic.numeric import NUMERIC
from structqa.data.synthetic.textual import TEXTUAL
from structqa.io import write_json

_CANONICAL = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]?[1-9])?")


def verify(example: SynthExample) -> None:
    """Raise ValueError unless the answer is well formed: a canonical number, spans found
    verbatim in the passage, or a real calendar date."""
    answer = example.answer
    if answer.number:
        if not _CANONICAL.fullmatch(answer.number):
            raise ValueError(f"{example.id}: non-canonical number {answer.number!r}")
    elif answer.spans:
        for span in answer.spans:
            if not span or span not in example.passage:
                raise ValueError(f"{example.id}: span {span!r} is not in the passage")
    else:
        day, month, year = answer.date
        date(int(year), MONTHS.index(month) + 1, int(day))  # raises ValueError if invalid


def _generate(kind: str, n: int, seed: int, config: SynthConfig | None) -> list[SynthExample]:
    if n < 0 or seed < 0:
        raise ValueError(f"n and seed must be non-negative, got n={n}, seed={seed}")
    cfg = config or SynthConfig()
    table, weights = (NUMERIC, cfg.numeric_ops) if kind == "numeric" else (TEXTUAL, cfg.textual_ops)
    ops = [op for op in table if weights.get(op, 0.0) > 0]
    p = np.array([weights[op] for op in ops], dtype=float)
    rng = np.random.default_rng([seed, STREAM[kind]])
    out: list[SynthExample] = []
    for i in range(n):
        op = ops[int(rng.choice(len(ops), p=p / p.sum()))]
        passage, question, answer = table[op](rng, cfg)
        example = SynthExample(
            id=f"synth-{kind}-{seed}-{i}",
            passage_id=f"synth-{kind}-{seed}-p{i}",
            kind=kind,
            op=op,
            passage=passage,
            question=question,
            answer=answer,
        )
        verify(example)
        out.append(example)
    return out


def generate_numeric(n: int, seed: int, config: SynthConfig | None = None) -> list[SynthExample]:
    """``n`` ND questions (expressions, lists and dates), seeded."""
    return _generate("numeric", n, seed, config)


def generate_textual(n: int, seed: int, config: SynthConfig | None = None) -> list[SynthExample]:
    """``n`` TD questions (templated passages with numbers in context), seeded."""
    return _generate("textual", n, seed, config)


def generate(kind: str, n: int, seed: int, config: SynthConfig | None = None) -> list[SynthExample]:
    """``n`` questions of ``kind`` ``numeric``, ``textual`` or ``both`` (``n // 2`` numeric,
    then the rest textual)."""
    if kind == "both":
        return generate_numeric(n // 2, seed, config) + generate_textual(n - n // 2, seed, config)
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose numeric, textual or both")
    return _generate(kind, n, seed, config)


def _answer_json(answer: DropAnswer) -> dict[str, Any]:
    day, month, year = answer.date
    return {
        "number": answer.number,
        "date": {"day": day, "month": month, "year": year},
        "spans": list(answer.spans),
    }


def to_drop_json(examples: Sequence[SynthExample]) -> dict[str, Any]:
    """DROP JSON (passage id -> passage and its questions); each question also records its
    ``operation`` (readers ignore the extra key)."""
    doc: dict[str, Any] = {}
    for ex in examples:
        if ex.passage_id in doc:
            raise ValueError(f"duplicate passage id {ex.passage_id!r}")
        qa = {
            "question": ex.question,
            "query_id": ex.id,
            "answer": _answer_json(ex.answer),
            "validated_answers": [],
            "operation": ex.op,
        }
        doc[ex.passage_id] = {"passage": ex.passage, "qa_pairs": [qa]}
    return doc


def write_synthetic(path: str | Path, examples: Sequence[SynthExample]) -> None:
    """Write ``examples`` as one DROP JSON file, atomically."""
    write_json(path, to_drop_json(examples))


def summarize(examples: Sequence[SynthExample]) -> dict[tuple[str, str, str], int]:
    """Counts per (kind, operation, answer type), sorted."""
    counts = Counter((ex.kind, ex.op, ex.answer.kind) for ex in examples)
    return dict(sorted(counts.items()))
