"""Immutable records that every reader produces and every later stage consumes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """One gold answer: its text and, when known and verified, its char offset in the context.

    ``start`` is -1 when the source gave no usable offset (e.g. an answer_start that did not
    match the text); such an answer still counts for scoring but not as a training target.
    """

    text: str
    start: int = -1

    @property
    def end(self) -> int:
        """Exclusive end char offset (or -1 when the start is unknown)."""
        return self.start + len(self.text) if self.start >= 0 else -1


@dataclass(frozen=True)
class Example:
    """One question over one context.

    ``answers`` holds located answers (training targets); ``gold_texts`` holds every gold
    answer string as the official scorer sees it (may include answers without offsets).
    """

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...] = ()
    gold_texts: tuple[str, ...] = ()
    is_impossible: bool = False
    title: str = ""


@dataclass
class ReadReport:
    """What a reader read and what it skipped, and why."""

    path: str
    read: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)
    examples_of_problems: list[str] = field(default_factory=list)

    def skip(self, reason: str, detail: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self._remember(detail)

    def warn(self, reason: str, detail: str) -> None:
        self.warnings[reason] = self.warnings.get(reason, 0) + 1
        self._remember(detail)

    def _remember(self, detail: str) -> None:
        if len(self.examples_of_problems) < 20:
            self.examples_of_problems.append(detail)

    def summary(self) -> str:
        parts = [f"{self.path}: read {self.read} questions"]
        if self.skipped:
            parts.append("skipped " + ", ".join(f"{n} ({r})" for r, n in self.skipped.items()))
        if self.warnings:
            parts.append("warnings " + ", ".join(f"{n} ({r})" for r, n in self.warnings.items()))
        return "; ".join(parts)


class DataError(ValueError):
    """Bad input that cannot be skipped safely; the message names file, record and field."""

    def __init__(self, path: str, record: str, field_name: str, problem: str) -> None:
        self.path, self.record, self.field_name, self.problem = path, record, field_name, problem
        super().__init__(f"{path}: record {record!r}, field {field_name!r}: {problem}")


@dataclass(frozen=True)
class Dataset:
    """What one reader returned: the examples, its report and the source format version."""

    examples: tuple[Example, ...]
    report: ReadReport
    version: str

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)
