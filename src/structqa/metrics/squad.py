"""SQuAD v1.1 and v2.0 scoring, following the official evaluation scripts' definitions.

Everything here works on plain mappings: ``gold`` maps a question id to its gold answer texts
(in dataset order, exactly as the JSON's ``answers`` list gives them; an empty list means the
question is unanswerable), ``preds`` maps a question id to a predicted answer string and
``na_probs`` maps a question id to the model's no-answer probability.

Results agree with ``evaluate-v1.1.py`` and ``evaluate-v2.0.py``: same normalisation, same
per-question scores, same aggregation order and the same threshold search.
"""

from __future__ import annotations

import logging
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "best_thresholds",
    "exact_match",
    "f1_v1",
    "f1_v2",
    "get_tokens",
    "gold_from_squad_json",
    "normalize_answer",
    "question_scores_v1",
    "raw_scores_v2",
    "squad_v1",
    "squad_v2",
]

# Deleting every string.punctuation character one by one, as a translate table.
_PUNCT_TABLE = {ord(ch): None for ch in string.punctuation}
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_SHOW_IDS = 5


def normalize_answer(s: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace (that order)."""
    text = s.lower()
    text = text.translate(_PUNCT_TABLE)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def get_tokens(s: str) -> list[str]:
    """Whitespace tokens of the normalised answer (``[]`` for an empty string)."""
    if not s:
        return []
    return normalize_answer(s).split()


def exact_match(pred: str, gold: str) -> int:
    """1 when the normalised prediction equals the normalised gold answer, else 0."""
    return int(normalize_answer(pred) == normalize_answer(gold))


def _overlap_f1(pred_toks: Sequence[str], gold_toks: Sequence[str]) -> float:
    """Harmonic mean of token precision and recall under multiset intersection."""
    num_same = sum((Counter(pred_toks) & Counter(gold_toks)).values())
    if num_same == 0:
        return 0.0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def f1_v1(pred: str, gold: str) -> float:
    """SQuAD v1.1 token F1: 0 whenever no token overlaps (even if both answers are empty)."""
    return _overlap_f1(normalize_answer(pred).split(), normalize_answer(gold).split())


def f1_v2(pred: str, gold: str) -> float:
    """SQuAD v2.0 token F1: if either side has no tokens, 1 when both have none, else 0."""
    pred_toks = get_tokens(pred)
    gold_toks = get_tokens(gold)
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    return _overlap_f1(pred_toks, gold_toks)


def _check_pred(qid: str, pred: Any) -> str:
    """Return ``pred`` if it is a string; otherwise raise a TypeError naming the question."""
    if not isinstance(pred, str):
        raise TypeError(f"prediction for {qid!r} must be a str, got {type(pred).__name__}")
    return pred


def first_ids(ids: Iterable[str]) -> str:
    """Comma-joined repr of the first few ids, for error messages."""
    shown = []
    for qid in ids:
        if len(shown) == _SHOW_IDS:
            shown.append("...")
            break
        shown.append(repr(qid))
    return ", ".join(shown)


def warn_missing(missing: Sequence[str], total: int) -> None:
    """Log, once per scoring, the questions without a prediction (they score 0)."""
    if missing:
        logger.warning(
            "%d of %d questions have no prediction and score 0 (first: %s)",
            len(missing),
            total,
            first_ids(missing),
        )


def _require_covered(gold: Mapping[str, Any], table: Mapping[str, Any], what: str) -> None:
    """Raise a ValueError when some gold question id is absent from ``table``."""
    missing = [qid for qid in gold if qid not in table]
    if missing:
        raise ValueError(
            f"{len(missing)} of {len(gold)} question ids have no {what} "
            f"(first: {first_ids(missing)})"
        )


def question_scores_v1(
    gold: Mapping[str, Sequence[str]], preds: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question v1.1 exact match and F1 (0-1, max over ground truths), in gold order.

    A question without a prediction scores 0 (logged as one warning with the count), as in
    ``evaluate-v1.1.py``; predictions for unknown ids are ignored. A question that has a
    prediction but no ground truths is a ValueError, as it is an error for the official script.
    """
    exact_scores: dict[str, int] = {}
    f1_scores: dict[str, float] = {}
    missing: list[str] = []
    for qid, truths in gold.items():
        if qid not in preds:
            missing.append(qid)
            exact_scores[qid], f1_scores[qid] = 0, 0.0
            continue
        if not truths:
            raise ValueError(f"question {qid!r} has no ground-truth answers (SQuAD v1.1 needs one)")
        pred = _check_pred(qid, preds[qid])
        exact_scores[qid] = max(exact_match(pred, truth) for truth in truths)
        f1_scores[qid] = max(f1_v1(pred, truth) for truth in truths)
    warn_missing(missing, len(gold))
    return exact_scores, f1_scores


def squad_v1(gold: Mapping[str, Sequence[str]], preds: Mapping[str, str]) -> dict[str, float]:
    """Score predictions as ``evaluate-v1.1.py`` does; returns ``{"exact_match", "f1"}`` in %.

    Each gold question scores the max over its ground truths; a question without a prediction
    scores 0 (logged as one warning with the count); predictions for unknown ids are ignored.
    Totals divide by the number of gold questions. Like the official script, a question that
    has a prediction but no ground truths is an error (ValueError here).
    """
    if not gold:
        raise ValueError("no gold questions to score")
    exact_scores, f1_scores = question_scores_v1(gold, preds)
    exact_total = 0
    f1_total = 0.0
    for qid in gold:  # one += at a time, as the official script adds (not sum()'s compensation)
        exact_total += exact_scores[qid]
        f1_total += f1_scores[qid]
    total = len(gold)
    return {"exact_match": 100.0 * exact_total / total, "f1": 100.0 * f1_total / total}


def _v2_gold_answers(truths: Sequence[str]) -> list[str]:
    """Gold answers that survive normalisation, or ``[""]`` (the no-answer) if none do."""
    kept = [text for text in truths if normalize_answer(text)]
    return kept or [""]


def raw_scores_v2(
    gold: Mapping[str, Sequence[str]], preds: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question v2.0 exact and F1 (max over gold answers), before any no-answer threshold.

    Raises ValueError when a gold question has no prediction (see :func:`squad_v2`).
    """
    _require_covered(gold, preds, "prediction")
    exact_scores: dict[str, int] = {}
    f1_scores: dict[str, float] = {}
    for qid, truths in gold.items():
        pred = _check_pred(qid, preds[qid])
        answers = _v2_gold_answers(truths)
        exact_scores[qid] = max(exact_match(pred, answer) for answer in answers)
        f1_scores[qid] = max(f1_v2(pred, answer) for answer in answers)
    return exact_scores, f1_scores


def _apply_no_ans_threshold(
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
    na_prob_thresh: float,
) -> dict[str, float]:
    """Replace the score of every question predicted unanswerable by 1 if it is, else 0."""
    return {
        qid: float(not has_ans[qid]) if na_probs[qid] > na_prob_thresh else score
        for qid, score in scores.items()
    }


def _eval_block(
    exact_scores: Mapping[str, float], f1_scores: Mapping[str, float], qids: Sequence[str]
) -> dict[str, float | int]:
    """``exact``/``f1`` percentages and ``total`` over ``qids``."""
    total = len(qids)
    return {
        "exact": 100.0 * sum(exact_scores[qid] for qid in qids) / total,
        "f1": 100.0 * sum(f1_scores[qid] for qid in qids) / total,
        "total": total,
    }


def _find_best_thresh(
    preds: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
) -> tuple[float, float]:
    """The official threshold sweep: best score (%) and the na_prob at which it is reached.

    Starts from "every question answered as no-answer" (score = number of unanswerable
    questions, threshold 0.0), then walks questions by increasing na_prob (ties keep the
    ``na_probs`` mapping's order), switching each one to its prediction: +score for answerable
    ones, -1 for an unanswerable one with a non-empty raw prediction string, 0 otherwise.
    """
    cur_score = sum(1 for qid in has_ans if not has_ans[qid])
    best_score = cur_score
    best_thresh = 0.0
    for qid in sorted(na_probs, key=na_probs.__getitem__):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if preds[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def _best_from_raw(
    preds: Mapping[str, str],
    exact_raw: Mapping[str, float],
    f1_raw: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_ans: Mapping[str, bool],
) -> dict[str, float]:
    """best_exact, best_exact_thresh, best_f1, best_f1_thresh (in that order)."""
    best_exact, exact_thresh = _find_best_thresh(preds, exact_raw, na_probs, has_ans)
    best_f1, f1_thresh = _find_best_thresh(preds, f1_raw, na_probs, has_ans)
    return {
        "best_exact": best_exact,
        "best_exact_thresh": exact_thresh,
        "best_f1": best_f1,
        "best_f1_thresh": f1_thresh,
    }


def best_thresholds(
    gold: Mapping[str, Sequence[str]],
    preds: Mapping[str, str],
    na_probs: Mapping[str, float],
) -> dict[str, float]:
    """The official v2.0 no-answer threshold search, for tuning the decoder's threshold.

    Returns ``best_exact``, ``best_exact_thresh``, ``best_f1`` and ``best_f1_thresh``: the
    best score (%) reachable by predicting no-answer when ``na_prob > thresh``, and that
    threshold, exactly as ``squad_v2`` reports them. Every gold id needs a prediction and an
    na_prob (ValueError otherwise); extra ids are ignored.
    """
    if not gold:
        raise ValueError("no gold questions to score")
    _require_covered(gold, na_probs, "na_prob")
    exact_raw, f1_raw = raw_scores_v2(gold, preds)
    has_ans = {qid: bool(truths) for qid, truths in gold.items()}
    return _best_from_raw(preds, exact_raw, f1_raw, na_probs, has_ans)


def squad_v2(
    gold: Mapping[str, Sequence[str]],
    preds: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float | int]:
    """Score predictions as ``evaluate-v2.0.py`` does; returns its ``out_eval`` dict.

    Keys, in order: ``exact``, ``f1``, ``total``; ``HasAns_exact/_f1/_total`` if some question
    is answerable; ``NoAns_exact/_f1/_total`` if some is not; and, when ``na_probs`` is given,
    ``best_exact``, ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh``. Scores are in %.

    A question is answerable when its gold list is non-empty (the official ``bool(answers)``);
    it is scored against the gold texts that normalise to something non-empty, or against
    ``""`` if none does. A question whose ``na_probs`` value exceeds ``na_prob_thresh`` counts
    as a no-answer prediction. Without ``na_probs`` every question gets 0.0, as officially.

    Deliberate difference: the official script silently skips questions without a prediction
    and then crashes while splitting HasAns/NoAns; here a missing prediction (or, when
    ``na_probs`` is given, a missing na_prob) raises a ValueError naming how many ids are
    missing and the first few. Predictions and na_probs for unknown ids are ignored.
    """
    if not gold:
        raise ValueError("no gold questions to score")
    if na_probs is not None:
        _require_covered(gold, na_probs, "na_prob")
    exact_raw, f1_raw = raw_scores_v2(gold, preds)
    has_ans = {qid: bool(truths) for qid, truths in gold.items()}
    probs: Mapping[str, float] = na_probs if na_probs is not None else dict.fromkeys(preds, 0.0)
    exact_thr = _apply_no_ans_threshold(exact_raw, probs, has_ans, na_prob_thresh)
    f1_thr = _apply_no_ans_threshold(f1_raw, probs, has_ans, na_prob_thresh)

    out: dict[str, float | int] = dict(_eval_block(exact_thr, f1_thr, list(exact_thr)))
    has_ans_qids = [qid for qid, answerable in has_ans.items() if answerable]
    no_ans_qids = [qid for qid, answerable in has_ans.items() if not answerable]
    for prefix, qids in (("HasAns", has_ans_qids), ("NoAns", no_ans_qids)):
        if qids:
            block = _eval_block(exact_thr, f1_thr, qids)
            out.update({f"{prefix}_{key}": value for key, value in block.items()})
    if na_probs is not None:
        out.update(_best_from_raw(preds, exact_raw, f1_raw, na_probs, has_ans))
    return out


def _field(record: Any, key: str, where: str, kind: type) -> Any:
    """``record[key]``, checked: a ValueError naming the record and field otherwise."""
    if not isinstance(record, Mapping):
        raise ValueError(f"record {where!r}: expected an object, got {type(record).__name__}")
    if key not in record:
        raise ValueError(f"record {where!r}, field {key!r}: missing required field")
    value = record[key]
    if not isinstance(value, kind):
        raise ValueError(
            f"record {where!r}, field {key!r}: expected {_KIND_NAMES[kind]}, "
            f"got {type(value).__name__}"
        )
    return value


_KIND_NAMES = {list: "a list", str: "a string"}


def gold_from_squad_json(
    obj: Mapping[str, Any] | Sequence[Mapping[str, Any]],
) -> tuple[dict[str, list[str]], dict[str, bool]]:
    """Gold answer texts and answerability per question id from a parsed SQuAD JSON.

    ``obj`` is the whole file (with ``"data"``) or its article list. Returns every answer text of
    every question, unfiltered and in order (what ``evaluate-v1.1.py`` uses; ``squad_v2`` does
    the v2.0 filtering itself), and ``bool(answers)`` per id, the official ``qid_to_has_ans``.
    A repeated id keeps its first position and its last answers (as the v2.0 script's dicts
    do; the v1.1 script would count it twice), with a warning.
    """
    articles = _field(obj, "data", "top level", list) if isinstance(obj, Mapping) else obj
    if not isinstance(articles, Sequence) or isinstance(articles, str):
        raise ValueError(
            f"the top level must be an object with a 'data' list, not {type(obj).__name__}"
        )
    gold: dict[str, list[str]] = {}
    has_ans: dict[str, bool] = {}
    repeated: list[str] = []
    for a, article in enumerate(articles):
        paragraphs = _field(article, "paragraphs", f"data[{a}]", list)
        for p, paragraph in enumerate(paragraphs):
            qas = _field(paragraph, "qas", f"data[{a}].paragraphs[{p}]", list)
            for q, qa in enumerate(qas):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                # integer ids (COVID-QA and other SQuAD-like releases) are their decimal
                # text, as the readers take them and structqa's predictions.json keys them
                raw = qa.get("id") if isinstance(qa, Mapping) else None
                if isinstance(raw, int) and not isinstance(raw, bool):
                    qid = str(raw)
                else:
                    qid = _field(qa, "id", where, str)
                if qid in gold:
                    repeated.append(qid)
                answers = _field(qa, "answers", where, list)
                gold[qid] = [
                    _field(answer, "text", f"{where}.answers[{i}]", str)
                    for i, answer in enumerate(answers)
                ]
                has_ans[qid] = bool(answers)
    if repeated:
        logger.warning(
            "%d repeated question ids; keeping the last answers (first: %s)",
            len(repeated),
            first_ids(repeated),
        )
    return gold, has_ans
