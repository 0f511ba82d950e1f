"""One "the documents do not answer this" decision per question, over the whole retrieved set.

A reader's single-passage no-answer threshold judges one chunk at a time: across ten retrieved
chunks, one distractor whose best span clears it is enough for an answer. The set-level decision
instead looks at the question's best answer over every retrieved chunk (each chunk's best span,
even below the passage threshold), by its rank score (calibrated probability discounted by the
chunk's retrieval rank, :mod:`structqa.documents.ask`), and answers only where that clears a
threshold **fitted on validation questions** of the collection, some of which it does not answer
(SQuAD 2.0's unanswerable questions, say): the threshold that maximises their mean F1, where an
abstention scores 1 on an unanswerable question and 0 on an answerable one, as SQuAD 2.0 scores.

The fit belongs to a reader, an index, a retriever and a number of chunks read: it is saved in
the index directory (``no_answer.json``) with the reader's identity, and ``ask`` uses it only
for that reader.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from structqa.data.records import Example
from structqa.documents.results import AskResult
from structqa.io import write_json
from structqa.metrics.squad import f1_v1

log = logging.getLogger(__name__)

FILE = "no_answer.json"


def reader_id(checkpoint: str | Path) -> str:
    """A reader's identity: the hash of its manifest (which lists its weights' hashes)."""
    manifest = Path(checkpoint) / "manifest.json"
    if not manifest.is_file():
        return "unknown"
    return hashlib.sha256(manifest.read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class SetThreshold:
    """A fitted set-level no-answer threshold, and what it was fitted for and on."""

    threshold: float  # answer where the best rank score is at least this
    reader: str  # :func:`reader_id`
    retriever: str
    top_k_chunks: int
    fitted_on: str
    questions: int
    unanswerable: int
    f1: float  # mean F1 of the fitting questions at the threshold
    f1_always_answer: float  # and with no abstention
    # the hybrid's BM25 share when fitted (None: a fit made before it was recorded)
    bm25_weight: float | None = None
    # the runtime whose probabilities it was fitted on (None: a fit made before it was
    # recorded); another one's (int8 against bf16) differ a little: warned, not refused
    runtime: str | None = None

    def applies_to(
        self, reader: str, retriever: str, top_k_chunks: int, bm25_weight: float | None = None
    ) -> bool:
        """Whether the fit holds for this reader, retriever and depth, and (hybrid) the
        index's BM25 weight now: `fit-fusion` changes the ranking that the threshold was
        fitted on."""
        same = (self.reader, self.retriever, self.top_k_chunks) == (
            reader,
            retriever,
            top_k_chunks,
        )
        fitted_weight = self.bm25_weight
        if same and retriever == "hybrid" and fitted_weight is not None and bm25_weight is not None:
            same = abs(fitted_weight - bm25_weight) < 1e-9
        return same


def set_score(result: AskResult) -> float:
    """The question's best rank score over the retrieved chunks (0 with none)."""
    return result.answers[0].rank_score if result.answers else 0.0


def decide(result: AskResult, threshold: float) -> AskResult:
    """``result`` (read with every chunk's best span, ``forced``) with no answer where its best
    rank score falls below ``threshold``."""
    if set_score(result) >= threshold:
        return result
    return replace(result, answers=[])


def question_f1(result: AskResult, example: Example) -> float:
    """SQuAD 2.0's F1 of the question's best answer (none: the abstention), in [0, 1]."""
    text = result.answers[0].text if result.answers else ""
    if example.is_impossible:
        return 0.0 if text else 1.0
    return max(f1_v1(text, g) for g in example.gold_texts) if text else 0.0


def fit(results: Sequence[AskResult], examples: Sequence[Example]) -> tuple[float, float, float]:
    """The threshold with the best mean F1 over ``examples`` (answers read ``forced``); returns
    (threshold, mean F1 there, mean F1 always answering)."""
    if len(results) != len(examples) or not examples:
        raise ValueError("fit needs one result per question, and at least one question")
    scored = []
    for res, ex in zip(results, examples, strict=True):
        gain = question_f1(res, ex) if res.answers else 0.0  # what answering scores
        keep = float(ex.is_impossible)  # and abstaining
        scored.append((set_score(res), gain, keep))
    scored.sort(key=lambda t: t[0])
    # threshold above everything: all abstain; lowering it past a score answers that question
    total = sum(keep for _, _, keep in scored)
    best_total, best_threshold = total, scored[-1][0] + 1e-6
    for i in range(len(scored) - 1, -1, -1):
        score, gain, keep = scored[i]
        total += gain - keep
        if i > 0 and scored[i - 1][0] == score:
            continue  # a threshold cannot split equal scores
        if total > best_total:
            best_total, best_threshold = total, score
    always = sum(gain for _, gain, _ in scored)
    n = len(scored)
    return best_threshold, 100 * best_total / n, 100 * always / n


def scores_at(
    results: Sequence[AskResult], examples: Sequence[Example], threshold: float | None
) -> dict[str, float]:
    """SQuAD 2.0-style F1 (overall, answerable, unanswerable) of ``results`` decided at
    ``threshold`` (None: as read)."""
    f1s: dict[bool, list[float]] = {True: [], False: []}
    for res, ex in zip(results, examples, strict=True):
        if threshold is not None:
            res = decide(res, threshold)
        f1s[not ex.is_impossible].append(question_f1(res, ex))
    every = f1s[True] + f1s[False]

    def mean(xs: list[float]) -> float:
        return 100 * sum(xs) / len(xs) if xs else 0.0

    return {"f1": mean(every), "HasAns_f1": mean(f1s[True]), "NoAns_f1": mean(f1s[False])}


def save(index_dir: str | Path, fitted: SetThreshold) -> Path:
    path = Path(index_dir) / FILE
    write_json(path, asdict(fitted))
    return path


def load(index_dir: str | Path) -> SetThreshold | None:
    path = Path(index_dir) / FILE
    if not path.is_file():
        return None
    try:
        return SetThreshold(**json.loads(path.read_text(encoding="utf-8")))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a set-level no-answer fit ({e}); fit it again") from None


def warn_if_other_runtime(fitted: SetThreshold, runtime: str | None) -> None:
    """Say so where the fit's probabilities came from another runtime than the one reading."""
    if runtime and fitted.runtime and fitted.runtime != runtime:
        log.warning(
            "the no-answer fit was made on the %s runtime's probabilities, these come from %s "
            "(they differ a little); fit it again with this runtime (--runtime %s) to match",
            fitted.runtime,
            runtime,
            runtime,
        )


def for_reader(
    index_dir: str | Path,
    checkpoint: str | Path,
    retriever: str,
    top_k_chunks: int,
    runtime: str | None = None,
) -> SetThreshold | None:
    """The index's fit if it was made for this reader, retriever and depth; else None (and a
    warning when there is a fit for something else, or one made on another ``runtime``)."""
    fitted = load(index_dir)
    if fitted is None:
        return None
    from structqa.documents.index import FUSION_FILE, DocumentIndex

    weight = DocumentIndex.fusion_weight(Path(index_dir) / FUSION_FILE)
    if fitted.applies_to(reader_id(checkpoint), retriever, top_k_chunks, weight):
        warn_if_other_runtime(fitted, runtime)
        return fitted
    log.warning(
        "%s was fitted for another reader, retriever, --top-k-chunks or fusion weight (%s, "
        "%d chunks, BM25 weight %s); the passage threshold decides instead: fit it again with "
        "`structqa fit-no-answer`",
        Path(index_dir) / FILE,
        fitted.retriever,
        fitted.top_k_chunks,
        fitted.bm25_weight,
    )
    return None
