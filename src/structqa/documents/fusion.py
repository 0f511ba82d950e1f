"""BM25's weight in the hybrid retriever, fitted on a collection's own labelled questions.

The default weight (0.5: :data:`structqa.documents.index.BM25_WEIGHT`) was chosen on SQuAD
questions; a collection whose language the sentence encoder knows less well (clinical or
legal text, say) does better leaning on BM25, and one with paraphrased questions on the
encoder. With a few hundred labelled questions whose passages are documents of the index (SQuAD
or MRQA format, as ``evaluate-ask`` reads), :func:`fit_weight` tries every weight of a grid
and keeps the one whose hybrid ranking finds the most gold passages among the first
:data:`RECALL_K` documents of the :data:`DEPTH` chunks `ask` reads (a narrower count than
``evaluate-ask``'s recall@5, which ranks 5 documents however deep; ties: the weight nearest
the default); it is saved in the index
(``fusion.json``) and used by every hybrid search from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from structqa.data.records import Example
from structqa.documents.evaluate import check_passages_indexed, gold_found
from structqa.documents.index import BM25_WEIGHT, FUSION_FILE, DocumentIndex
from structqa.documents.mixing import combine
from structqa.io import write_json

GRID = tuple(round(0.05 * i, 2) for i in range(21))  # 0.0 (dense alone) .. 1.0 (BM25 alone)
RECALL_K = 5  # documents
DEPTH = 10  # chunks ranked, as `ask` reads them


@dataclass(frozen=True)
class FusionFit:
    bm25_weight: float
    fitted_on: str
    questions: int
    # by weight (the grid), on the fitting questions: the gold passage among the first 5
    # documents of the 10 chunks ask reads (the fit's objective; not evaluate-ask's recall@5)
    recall_at_5: dict[str, float]

    def summary(self) -> str:
        at = self.recall_at_5
        others = [
            f"{what} {at[key]:.3f}"
            for what, key in (
                (f"default {BM25_WEIGHT}:", str(BM25_WEIGHT)),
                ("BM25 alone", "1.0"),
                ("dense alone", "0.0"),
            )
            if key in at  # (a grid of the caller's may hold none of them)
        ]
        return (
            f"BM25 weight {self.bm25_weight} (gold among the first {RECALL_K} documents of the "
            f"{DEPTH} chunks read: {at[str(self.bm25_weight)]:.3f} "
            f"on the {self.questions} answerable questions of {self.fitted_on}"
            + (f"; {', '.join(others)}" if others else "")
            + ")"
        )


def fit_weight(
    index: DocumentIndex,
    examples: Sequence[Example],
    fitted_on: str,
    grid: Sequence[float] = GRID,
    progress: Callable[[int, int], None] | None = None,
) -> FusionFit:
    """The grid weight that finds the gold passage among the first 5 documents of the 10
    chunks `ask` reads for the most of ``examples`` (questions whose passages are documents
    of ``index``)."""
    examples = [ex for ex in examples if ex.gold_texts]
    if not examples:
        raise ValueError(f"{fitted_on}: no answerable questions to fit the fusion weight on")
    check_passages_indexed(index, examples, fitted_on)
    both = []
    for start in range(0, len(examples), 64):
        part = examples[start : start + 64]
        both += index.ranked_both([ex.question for ex in part], 100)
        if progress is not None:
            progress(min(start + 64, len(examples)), len(examples))
    doc_of = index.doc_ids([c for s, d in both for c, _ in (*s, *d)])
    recall: dict[str, float] = {}
    for w in grid:
        found = 0
        for (sparse, dense), ex in zip(both, examples, strict=True):
            ranked = combine(sparse, dense, w)[:DEPTH]
            found += gold_found([doc_of[c] for c, _ in ranked if c in doc_of], ex, RECALL_K)
        recall[str(w)] = found / len(examples)
    best = max(grid, key=lambda w: (recall[str(w)], -abs(w - BM25_WEIGHT)))
    return FusionFit(best, fitted_on, len(examples), recall)


def save(index: DocumentIndex, fit: FusionFit) -> Path:
    """Write the fit into the index folder and use it for this index's searches from now on
    (a reopened index reads it)."""
    path = index.directory / FUSION_FILE
    write_json(path, asdict(fit))
    index.bm25_weight = fit.bm25_weight
    return path
