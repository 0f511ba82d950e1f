"""DROP scoring, following the official DROP evaluation (``drop_eval.py``) definitions.

Everything here works on plain mappings: ``gold`` maps a query id to its gold candidates, in
dataset order (the ``answer`` first, then the ``validated_answers``), each a
:class:`GoldAnswer` ``(texts, kind)`` as :func:`answer_json_to_strings` makes it from the JSON;
``preds`` maps a query id to a predicted answer: a string, or a list of strings for several
spans.

The definitions, all as in the official script:

- an answer is a *bag of spans*: each span is normalised token by token (tokens split on
  spaces and hyphens; each lowercased, stripped of punctuation unless it parses as a number,
  a number rewritten as ``str(float(token))``, articles removed) and becomes a set of words;
- exact match: the normalised spans are the same set, and as many (``["a", "a"]`` != ``["a"]``);
- F1: each gold span is paired with at most one predicted span by an optimal (Hungarian)
  assignment on span F1; a pair where the gold span has numbers and shares none with the
  predicted span scores 0; the pair scores are summed and divided by
  ``max(len(gold), len(pred))``, then rounded to 2 decimals with numpy's rounding;
- a question scores the max EM and max F1 over its gold candidates whose first text is not
  blank; the answer type it counts under is that of the last candidate reaching both maxima
  (so a question whose candidates disagree on type may move between types with the
  prediction); a question without a prediction scores 0 under the type of its ``answer``;
- totals are plain means over the gold questions, as fractions (the official output file's
  ``global_em`` / ``global_f1``).
"""

from __future__ import annotations

import logging
import re
import string
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from structqa.metrics.squad import first_ids, warn_missing

logger = logging.getLogger(__name__)

__all__ = [
    "ANSWER_TYPES",
    "NO_GOLD",
    "GoldAnswer",
    "QuestionScore",
    "answer_json_to_strings",
    "answer_to_bags",
    "drop_question_scores",
    "drop_score",
    "get_metrics",
    "gold_from_drop_json",
    "normalize_answer",
]

#: The official answer types, in the official report's (sorted) order.
ANSWER_TYPES = ("date", "number", "span", "spans")
#: Type a question counts under when it has a prediction but no usable (non-blank) gold
#: candidate; the official script files those under ``None``, which JSON cannot key.
NO_GOLD = "none"

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
# Only the space character and the hyphen separate tokens; other whitespace stays inside a
# token until the whitespace fix.
_TOKEN_SEPARATORS = re.compile(" |-")

Prediction = str | Sequence[str]


class GoldAnswer(NamedTuple):
    """One gold candidate: the strings the metric compares, and its official answer type."""

    texts: tuple[str, ...]
    kind: str


class QuestionScore(NamedTuple):
    """One question's official scores and the answer type it is counted under."""

    em: float
    f1: float
    kind: str


def _is_number(text: str) -> bool:
    # Anything Python's float() accepts: "1e3", "1_000", " 7", "nan", "inf" and "infinity" too.
    try:
        float(text)
    except ValueError:
        return False
    return True


def _normalize_token(token: str) -> str:
    text = token.lower()
    if not _is_number(text):
        text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    # Checked again after punctuation removal: "14,506" -> "14506" -> "14506.0".
    if _is_number(text):
        text = str(float(text))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalize_answer(text: str) -> str:
    """Normalise one span, token by token (split on spaces and hyphens).

    Each token is lowercased; stripped of punctuation unless it parses as a float; rewritten
    as ``str(float(token))`` if it then parses as one; stripped of the articles a/an/the; and
    whitespace-collapsed. Blank tokens are dropped and the rest joined by single spaces.
    """
    parts = (_normalize_token(token) for token in _TOKEN_SEPARATORS.split(text))
    return " ".join(part for part in parts if part.strip()).strip()


def _as_spans(answer: Prediction) -> list[str]:
    return [answer] if isinstance(answer, str) else list(answer)


def answer_to_bags(answer: Prediction) -> tuple[list[str], list[set[str]]]:
    """The normalised spans of an answer and, per span, its set of words."""
    normalized = [normalize_answer(span) for span in _as_spans(answer)]
    return normalized, [set(span.split()) for span in normalized]


def _numbers(bag: Iterable[str]) -> set[str]:
    return {word for word in bag if _is_number(word)}


def _numbers_match(gold_bag: set[str], pred_bag: set[str]) -> bool:
    """False when the gold span has numbers and the predicted span shares none of them."""
    gold_numbers = _numbers(gold_bag)
    return not gold_numbers or bool(gold_numbers & _numbers(pred_bag))


def _bag_f1(pred_bag: set[str], gold_bag: set[str]) -> float:
    """Word-set F1; an empty side has precision (or recall) 1, and 0/0 F1 is 0."""
    common = len(pred_bag & gold_bag)
    precision = common / len(pred_bag) if pred_bag else 1.0
    recall = common / len(gold_bag) if gold_bag else 1.0
    if precision == 0.0 and recall == 0.0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def _aligned_f1(pred_bags: Sequence[set[str]], gold_bags: Sequence[set[str]]) -> float:
    """Mean span F1 under the best one-to-one pairing, over max(len(gold), len(pred)) slots."""
    from scipy.optimize import linear_sum_assignment

    scores = np.zeros((len(gold_bags), len(pred_bags)))  # (gold, pred)
    for g, gold_bag in enumerate(gold_bags):
        for p, pred_bag in enumerate(pred_bags):
            if _numbers_match(gold_bag, pred_bag):
                scores[g, p] = _bag_f1(pred_bag, gold_bag)
    rows, cols = linear_sum_assignment(scores, maximize=True)
    # One slot per gold span (or per predicted span when there are more); unpaired slots
    # score 0. Ties between optimal pairings leave the total, hence the mean, unchanged.
    per_slot = np.zeros(max(len(gold_bags), len(pred_bags)))
    per_slot[rows] = scores[rows, cols]
    return float(np.mean(per_slot)) if per_slot.size else float("nan")


def get_metrics(predicted: Prediction, gold: Prediction) -> tuple[float, float]:
    """Exact match and DROP F1 of one prediction against one gold answer.

    Both are a string or a sequence of strings (spans). F1 is rounded to 2 decimals the way
    numpy rounds (``np.round``), which is not always Python's ``round`` (0.475 -> 0.48 here,
    0.47 with ``round``): the official script rounds a numpy float.
    """
    pred_spans, pred_bags = answer_to_bags(predicted)
    gold_spans, gold_bags = answer_to_bags(gold)
    em = float(set(pred_spans) == set(gold_spans) and len(pred_spans) == len(gold_spans))
    f1 = float(np.round(_aligned_f1(pred_bags, gold_bags), 2))
    return em, f1


def answer_json_to_strings(answer: Mapping[str, Any]) -> GoldAnswer:
    """The gold strings and type of one DROP answer object, by the official precedence.

    A non-empty ``number`` wins (``(str(number),)``, ``"number"``); else non-empty ``spans``
    (``"span"`` for one, ``"spans"`` for several); else the ``date``, as one string of its
    non-empty day, month and year joined by spaces (the official script formats all three
    with single spaces between them; both normalise to the same words, and the official
    blank-answer test treats both alike). An answer with none of the three raises ValueError.
    Missing day/month/year keys count as empty (real files have ``"date": {}``).
    """
    number = answer.get("number")
    if number:
        return GoldAnswer((str(number),), "number")
    spans = answer.get("spans")
    if spans:
        return GoldAnswer(tuple(spans), "span" if len(spans) == 1 else "spans")
    if "date" in answer:
        date = answer["date"] or {}
        parts = (str(date.get(key, "")) for key in ("day", "month", "year"))
        return GoldAnswer((" ".join(part for part in parts if part),), "date")
    raise ValueError(f"answer has no number, spans or date: {answer!r}")


def _is_usable(candidate: GoldAnswer) -> bool:
    # The official test: only the first string is checked for being blank.
    return bool(candidate.texts) and candidate.texts[0].strip() != ""


def _check_pred(qid: str, pred: Any) -> Prediction:
    """Return ``pred`` if it is a string or a list/tuple of strings, else raise TypeError."""
    if isinstance(pred, str):
        return pred
    if isinstance(pred, list | tuple) and all(isinstance(span, str) for span in pred):
        return pred
    raise TypeError(
        f"prediction for {qid!r} must be a string or a list of strings, got {pred!r:.80}"
    )


def score_question(candidates: Sequence[GoldAnswer], predicted: Prediction) -> QuestionScore:
    """Max EM and max F1 over the usable candidates, and the type the question counts under.

    The type is that of the last candidate whose (EM, F1) equals the running maxima right after
    it is scored, as in the official script; :data:`NO_GOLD` when no candidate is usable.
    """
    best_em, best_f1 = 0.0, 0.0
    kind = NO_GOLD
    for candidate in candidates:
        if not _is_usable(candidate):
            continue
        em, f1 = get_metrics(predicted, candidate.texts)
        best_em, best_f1 = max(best_em, em), max(best_f1, f1)
        if (best_em, best_f1) == (em, f1):
            kind = candidate.kind
    return QuestionScore(best_em, best_f1, kind)


def drop_question_scores(
    gold: Mapping[str, Sequence[GoldAnswer]], preds: Mapping[str, Any]
) -> dict[str, QuestionScore]:
    """Per-question scores for every gold question, in gold order.

    A question without a prediction scores 0 under its first candidate's type (its
    ``answer``), with one warning for all of them; predictions for unknown ids are ignored.
    A question with no candidates at all is a ValueError (the DROP format always has one).
    """
    scores: dict[str, QuestionScore] = {}
    missing: list[str] = []
    for qid, candidates in gold.items():
        if not candidates:
            raise ValueError(f"question {qid!r} has no gold answer")
        if qid not in preds:
            missing.append(qid)
            scores[qid] = QuestionScore(0.0, 0.0, candidates[0].kind)
            continue
        scores[qid] = score_question(candidates, _check_pred(qid, preds[qid]))
    warn_missing(missing, len(gold))
    return scores


def drop_score(
    gold: Mapping[str, Sequence[GoldAnswer]], preds: Mapping[str, Any]
) -> dict[str, Any]:
    """Score predictions as the official DROP evaluation does.

    Returns ``global_em`` and ``global_f1`` (fractions, as in the official output file),
    ``total`` (gold questions) and ``per_type``: for each answer type that some question
    counts under, sorted by name as the official report prints them, its ``count``, ``em``
    and ``f1`` (fractions). NC-BERT's Table 2 "Others" is ``span`` and ``spans`` together.
    """
    return summarize_drop_scores(drop_question_scores(gold, preds))


def summarize_drop_scores(scores: Mapping[str, QuestionScore]) -> dict[str, Any]:
    """:func:`drop_score`'s report from per-question scores (:func:`drop_question_scores`)."""
    if not scores:
        raise ValueError("no gold questions to score")
    by_type: dict[str, list[QuestionScore]] = defaultdict(list)
    for score in scores.values():
        by_type[score.kind].append(score)
    return {
        "global_em": _mean(s.em for s in scores.values()),
        "global_f1": _mean(s.f1 for s in scores.values()),
        "total": len(scores),
        "per_type": {
            kind: {
                "count": len(group),
                "em": _mean(s.em for s in group),
                "f1": _mean(s.f1 for s in group),
            }
            for kind, group in sorted(by_type.items())
        },
    }


def _mean(values: Iterable[float]) -> float:
    return float(np.mean(np.fromiter(values, dtype=float)))


def gold_from_drop_json(obj: Mapping[str, Any]) -> dict[str, list[GoldAnswer]]:
    """Gold candidates per query id from a parsed DROP JSON file (passage id -> passage).

    Candidates are the ``answer`` then the ``validated_answers`` (if any), unfiltered: blank
    ones are skipped while scoring, as officially. A repeated query id keeps its first
    position and its last candidates, with a warning (the official script would score it
    twice). An answer with no number, spans or date key raises ValueError naming the question.
    """
    gold: dict[str, list[GoldAnswer]] = {}
    repeated: list[str] = []
    for passage_id, passage in obj.items():
        for k, qa in enumerate(_required(passage, "qa_pairs", f"passage {passage_id!r}")):
            where = f"passage {passage_id!r}, qa_pairs[{k}]"
            qid = _required(qa, "query_id", where)
            where = f"question {qid!r}"
            if qid in gold:
                repeated.append(qid)
            answers = [_required(qa, "answer", where), *(qa.get("validated_answers") or ())]
            try:
                gold[qid] = [answer_json_to_strings(answer) for answer in answers]
            except (ValueError, AttributeError) as err:
                raise ValueError(f"{where}: {err}") from None
    if repeated:
        logger.warning(
            "%d repeated query ids; keeping the last answers (first: %s)",
            len(repeated),
            first_ids(repeated),
        )
    return gold


def _required(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise ValueError(f"{where}: missing {key!r}")
    return obj[key]
