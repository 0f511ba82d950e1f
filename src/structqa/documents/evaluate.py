"""Questions with gold answers asked of a whole document index, scored end to end.

For a SQuAD/MRQA file whose passages are documents of the index (``structqa index`` reads each
context of such a file as a document), every question is asked of the whole index (`ask`):
retrieval recall@k of its gold passage, and SQuAD EM/F1 of the best answer (forced: the best
span of the retrieved chunks), beside the same reader given the gold passage itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from structqa.data.records import Example
from structqa.documents.ask import ask
from structqa.documents.index import RETRIEVERS, DocumentIndex
from structqa.documents.ingest import context_key
from structqa.documents.metrics import ranked_documents
from structqa.features.squad import cut_questions
from structqa.metrics.squad import exact_match, f1_v1
from structqa.prediction import Predictor

log = logging.getLogger(__name__)

RECALL_AT = (1, 5, 10)


def check_passages_indexed(index: DocumentIndex, examples: Sequence[Example], source: str) -> None:
    """Refuse labelled questions none of whose passages is a document of ``index`` (every
    recall and fit would silently be 0); warn when only some are."""
    keys = {d.rsplit("#", 1)[1] for d in index.documents() if "#" in d}
    missing = sum(context_key(ex.context) not in keys for ex in examples)
    if examples and missing == len(examples):
        raise ValueError(
            f"{source}: none of its {len(examples)} questions' passages is a document of "
            f"{index.directory}. A question is matched to its passage among the documents "
            "indexed from a SQuAD/MRQA file (each context a document): index the labelled "
            f"file with the collection (`structqa index FOLDER {source} --out "
            f"{index.directory}`)"
        )
    if missing:
        log.warning(
            "%s: %d of %d questions' passages are not documents of %s: they count as not found",
            source,
            missing,
            len(examples),
            index.directory,
        )


def gold_found(ranked_doc_ids: Sequence[str], example: Example, k: int) -> bool:
    """Whether the example's passage is among the first ``k`` documents of a ranking of
    document ids (best first; a document counts once, at its first place)."""
    key = "#" + context_key(example.context)
    return any(d.endswith(key) for d in list(dict.fromkeys(ranked_doc_ids))[:k])


@dataclass
class OpenScores:
    questions: int
    recall: dict[str, dict[int, float]]  # retriever -> k -> share with the gold passage in top k
    open_em: float
    open_f1: float
    gold_em: float
    gold_f1: float

    def to_json(self) -> dict[str, float]:
        out: dict[str, float] = {"questions": self.questions}
        for retriever, at in self.recall.items():
            out.update({f"{retriever} recall@{k}": v for k, v in at.items()})
        out.update(
            {
                "open_em": self.open_em,
                "open_f1": self.open_f1,
                "gold_passage_em": self.gold_em,
                "gold_passage_f1": self.gold_f1,
                "open_f1_share_of_gold": self.open_f1 / self.gold_f1 if self.gold_f1 else 0.0,
            }
        )
        return out


def evaluate_open(
    index: DocumentIndex,
    reader: Predictor | None,
    examples: Sequence[Example],
    top_k_chunks: int = 10,
    retriever: str = "hybrid",
    batch: int = 64,
    progress: Callable[[int, int], None] | None = None,
    read: bool = True,
    gold_answers: Mapping[str, str] | None = None,
    source: str = "the labelled questions",
) -> OpenScores:
    """Recall@k of the gold passage by every retriever, and end-to-end EM/F1 with
    ``retriever`` (the best answer over the retrieved chunks, no abstention), beside the
    reader on the gold passage alone. ``read`` False: retrieval only (``reader`` may be
    None; the EM/F1 are then 0). ``gold_answers`` (question id -> text): the same reader's
    answers on the gold passages, saved before, in place of reading them again. ``source``
    names the questions' file in the error when none of their passages is indexed."""
    answerable = [ex for ex in examples if ex.gold_texts]
    if len(answerable) < len(examples):
        log.warning(
            "%s: %d of %d questions have no answer and are left out: the scores are over the "
            "%d answerable ones (fit-no-answer is what weighs abstaining)",
            source,
            len(examples) - len(answerable),
            len(examples),
            len(answerable),
        )
    examples = answerable
    check_passages_indexed(index, examples, source)
    if read and reader is not None:  # cut once, as `evaluate` cuts a file's long questions
        examples = cut_questions(examples, reader.tokenizer, reader.features.max_query_len)
    found = {r: {k: 0 for k in RECALL_AT} for r in RETRIEVERS}
    open_em = open_f1 = gold_em = gold_f1 = 0.0
    empty_saved = 0
    for start in range(0, len(examples), batch):
        part = examples[start : start + batch]
        questions = [ex.question for ex in part]
        for name in RETRIEVERS:
            # documents, not chunks: a long document's chunks once filled the first ten
            ranked = ranked_documents(index, questions, max(RECALL_AT), name)
            for ex, docs in zip(part, ranked, strict=True):
                for k in RECALL_AT:
                    found[name][k] += gold_found(docs, ex, k)
        if not read:
            continue
        results = ask(
            index, reader, questions, top_k_chunks, retriever, forced=True, set_threshold=None
        )
        if gold_answers is None:
            read_gold = reader.predict_batch([(ex.question, ex.context) for ex in part])
            gold = [g.text or (g.nbest[0].text if g.nbest else "") for g in read_gold]
        else:
            gold = [_saved_answer(gold_answers, ex) for ex in part]
            empty_saved += sum(not g for g in gold)
        for ex, result, gold_text in zip(part, results, gold, strict=True):
            best = result.answers[0].text if result.answers else ""
            golds = list(ex.gold_texts)
            open_em += max(exact_match(best, t) for t in golds)
            open_f1 += max(f1_v1(best, t) for t in golds)
            gold_em += max(exact_match(gold_text, t) for t in golds)
            gold_f1 += max(f1_v1(gold_text, t) for t in golds)
        if progress is not None:
            progress(min(start + batch, len(examples)), len(examples))
    if empty_saved:
        log.warning(
            "%d of the saved gold-passage answers are empty (the reader abstained there): they "
            "score 0, where reading the gold passages (no --gold-answers) takes the best span",
            empty_saved,
        )
    n = max(len(examples), 1)
    return OpenScores(
        len(examples),
        {r: {k: found[r][k] / n for k in RECALL_AT} for r in RETRIEVERS},
        100 * open_em / n,
        100 * open_f1 / n,
        100 * gold_em / n,
        100 * gold_f1 / n,
    )


def _saved_answer(answers: Mapping[str, str], example: Example) -> str:
    if example.id not in answers:
        raise ValueError(
            f"question {example.id!r} has no saved gold-passage answer: pass the predictions "
            "of every question asked (e.g. each test fold's), or leave --gold-answers out"
        )
    return answers[example.id]
