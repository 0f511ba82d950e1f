"""Questions over a document index: retrieve chunks, read them all in one batched pass with a
reader (any runtime the Predictor runs), and rank the answers across documents, each with its
source: document, page, character offsets in the document, and the chunk it was read in.

Answers are ordered by the reader's probability discounted by their chunk's retrieval rank
(:data:`RANK_DECAY`). The same answer read in two overlapping chunks (the same characters of
the same document) is one answer, kept where it ranks higher, with the number of chunks that
gave it. The
question is answered "not in the documents" when no retrieved chunk holds an answer: every
chunk's best span falls below the reader's no-answer threshold (a SQuAD 2.0-style reader), or
below ``min_probability``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from structqa.data.hygiene import has_readable_text, text_problem
from structqa.documents.index import DocumentIndex, Hit
from structqa.documents.no_answer import decide, for_reader, set_score
from structqa.documents.results import AskResult, SourcedAnswer
from structqa.prediction import Answer, InvalidText, Predictor, QuestionTooLong

__all__ = [
    "FITTED",
    "AskResult",
    "SourcedAnswer",
    "ask",
    "check_questions",
    "decide",
    "merged",
    "ranked",
    "set_score",
]

#: ``ask``'s default no-answer decision: the index's set-level fit (``structqa fit-no-answer``)
#: where it was made for this reader, retriever and depth, else the reader's passage threshold
FITTED = "fitted"

#: how much a chunk's retrieval rank discounts its answer: a reader trained on single passages
#: is as sure of a distractor chunk's span as of the right one's, and the retriever's order is
#: the stronger signal (docs/results/documents: chosen on questions of the SQuAD training pool)
RANK_DECAY = 0.75
QUOTED = 30  # characters of a refused question quoted in the error


def ask(
    index: DocumentIndex,
    predictor: Predictor,
    questions: Sequence[str],
    top_k_chunks: int = 10,
    retriever: str = "hybrid",
    min_probability: float = 0.0,
    forced: bool = False,
    rank_decay: float = RANK_DECAY,
    set_threshold: float | str | None = FITTED,
) -> list[AskResult]:
    """Each question answered from its ``top_k_chunks`` retrieved chunks (one batched reading
    pass for all of them), answers ranked by their rank score, best first. ``forced``: every
    chunk's best span counts, even below the no-answer threshold (to score answers as SQuAD
    1.1 does, without abstention). ``set_threshold``: one no-answer decision over the whole
    retrieved set instead (:mod:`structqa.documents.no_answer`): every chunk's best span
    counts, and the question has no answer where the best rank score falls below it. By
    default (:data:`FITTED`) the index's own fit where it was made for this reader
    (``predictor.source``, the checkpoint or export it was loaded from), retriever and
    ``top_k_chunks``, as ``structqa ask`` and the service decide; None: each chunk's passage
    threshold. A question the reader would refuse (empty, not valid text, longer than it
    reads) is refused first, named by its place in ``questions`` and its first words."""
    check_questions(predictor, questions)
    if set_threshold == FITTED:
        set_threshold = _fitted_threshold(index, predictor, retriever, top_k_chunks)
    if isinstance(set_threshold, str):
        raise ValueError(f"set_threshold {set_threshold!r}: a number, {FITTED!r} or None")
    retrieved = index.search_many(list(questions), top_k_chunks, retriever)
    pairs = [(q, h.text) for q, hits in zip(questions, retrieved, strict=True) for h in hits]
    read = iter(predictor.predict_batch(pairs) if pairs else [])
    forced = forced or set_threshold is not None
    results = [
        ranked(question, hits, [next(read) for _ in hits], min_probability, forced, rank_decay)
        for question, hits in zip(questions, retrieved, strict=True)
    ]
    if set_threshold is None:
        return results
    return [decide(r, set_threshold) for r in results]


def check_questions(predictor: Predictor, questions: Sequence[str]) -> None:
    """ValueError (:class:`InvalidText`, :class:`QuestionTooLong`) for the first question the
    reader would refuse, named ``question I ('its first words')`` (the reader, given each
    question with each chunk, named a pair: "pair 10" of 5 questions)."""

    def name(i: int) -> str:
        if len(questions) == 1:
            return "the question"
        q = questions[i]
        return f"question {i} ({q if len(q) <= QUOTED else q[:QUOTED] + '...'!r})"

    for i, q in enumerate(questions):
        if not q.strip():
            raise ValueError(f"{name(i)}: empty; give the question to ask")
        if (problem := text_problem(q)) is not None:
            raise InvalidText(f"{name(i)}: contains {problem}; send valid UTF-8 text without it")
        if not has_readable_text(q):
            raise InvalidText(
                f"{name(i)}: no character a model reads (only spaces, zero-width, control or "
                "combining characters)"
            )
    limit = predictor.features.max_query_len
    tokens = predictor.tokenizer(list(questions), add_special_tokens=False)["input_ids"]
    for i, ids in enumerate(tokens):
        if len(ids) > limit:
            raise QuestionTooLong(i, len(ids), limit, name(i))


def _fitted_threshold(
    index: DocumentIndex, predictor: Predictor, retriever: str, top_k_chunks: int
) -> float | None:
    if predictor.source is None:  # (built from a model in memory: no reader to match a fit to)
        return None
    fitted = for_reader(
        index.directory, predictor.source, retriever, top_k_chunks, predictor.runtime
    )
    return None if fitted is None else fitted.threshold


def ranked(
    question: str,
    hits: Sequence[Hit],
    read: Sequence[Answer],
    min_probability: float = 0.0,
    forced: bool = False,
    rank_decay: float = RANK_DECAY,
) -> AskResult:
    """The answers the reader gave (``read``, one per hit, in retrieval order) as ranked,
    merged answers with their sources: what :func:`ask` and the service's POST /v1/ask return."""
    found = [
        (h, _best_span(a) if forced else a, forced and not a.text)
        for h, a in zip(hits, read, strict=True)
    ]
    answers = merged(
        [
            _sourced(h, a, rank, rank_decay, declined)
            for rank, (h, a, declined) in enumerate(found)
            if _answers(a, min_probability)
        ]
    )
    return AskResult(question, answers, list(hits))


def _best_span(a: Answer) -> Answer:
    """``a`` answered with its best span even where it abstains, at that span's share of the
    n-best. Ranked instead by the chance a returned span is right, ``(1 - p_null) x share``
    (the scale of the chunks the reader answered), the general reader's SQuAD-open F1 fell
    from 61.29 to 60.12 on 2,177 held-out questions (docs/results/documents/README.md): a
    reader trained on rewrites declines gold chunks too, and their spans are then lost."""
    if a.text or not a.nbest:
        return a
    c = a.nbest[0]
    return replace(
        a,
        text=c.text,
        start=c.start_char,
        end=c.end_char,
        no_answer=False,
        probability=c.probability,
    )


def _answers(a: Answer, min_probability: float) -> bool:
    return bool(a.text) and not a.no_answer and a.probability >= min_probability


def _sourced(h: Hit, a: Answer, rank: int, decay: float, declined: bool) -> SourcedAnswer:
    return SourcedAnswer(
        text=a.text,
        probability=a.probability,
        score=a.score,
        doc_id=h.doc_id,
        title=h.title,
        source=h.source,
        page=h.page,
        start=h.start + a.start,
        end=h.start + a.end,
        chunk_id=h.chunk_id,
        chunk_start=a.start,
        chunk_end=a.end,
        chunk_text=h.text,
        retrieval_rank=rank,
        rank_score=a.probability * math.exp(-decay * rank),
        declined=declined,
    )


def merged(answers: Sequence[SourcedAnswer]) -> list[SourcedAnswer]:
    """One answer per span of a document (overlapping chunks read the same characters), as
    read where it ranks highest, counting the chunks that gave it; best first. A document is
    its file and id together: two corpus files may use the same ids for different texts."""
    best: dict[tuple[str, str, int, int], SourcedAnswer] = {}
    count: dict[tuple[str, str, int, int], int] = {}
    for a in answers:
        key = (a.source, a.doc_id, a.start, a.end)
        count[key] = count.get(key, 0) + 1
        if key not in best or a.rank_score > best[key].rank_score:
            best[key] = a
    out = [SourcedAnswer(**{**vars(a), "chunks": count[key]}) for key, a in best.items()]
    return sorted(out, key=lambda a: (-a.rank_score, -a.score, a.doc_id, a.start))
