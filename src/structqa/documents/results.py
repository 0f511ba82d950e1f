"""What asking an index returns: answers with their sources, and a question's result (the
types :mod:`structqa.documents.ask` makes and :mod:`structqa.documents.no_answer` decides on)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from structqa.documents.index import Hit


@dataclass(frozen=True)
class SourcedAnswer:
    """An answer found in the documents, and where."""

    text: str
    # the reader's chance that the answer is right (calibrated where the reader is); for a
    # span read where the reader declined (``declined``), the span's share of its n-best
    probability: float
    score: float  # the span's start + end logit
    doc_id: str
    title: str
    source: str  # the file
    page: int | None
    start: int  # character offsets in the document's extracted text
    end: int
    chunk_id: int
    chunk_start: int  # the answer's offsets in the chunk's text
    chunk_end: int
    chunk_text: str
    chunks: int = 1  # overlapping chunks that gave this answer
    retrieval_rank: int = 0  # of the chunk it was read in (0: the best)
    rank_score: float = 0.0  # what orders the answers: probability x exp(-decay x rank)
    # the reader declined its chunk: the span was taken anyway, for a decision over the whole
    # retrieved set (a collection's no-answer fit) or --forced scoring
    declined: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class AskResult:
    question: str
    answers: list[SourcedAnswer]
    hits: list[Hit] = field(default_factory=list)

    @property
    def no_answer(self) -> bool:
        """True when the retrieved documents hold no answer (see the module docstring)."""
        return not self.answers

    def to_json(self, top: int = 5) -> dict[str, Any]:
        return {
            "question": self.question,
            "no_answer": self.no_answer,
            "answers": [a.to_json() for a in self.answers[:top]],
            "retrieved": [
                {"doc_id": h.doc_id, "source": h.source, "page": h.page, "score": h.score}
                for h in self.hits
            ],
        }
