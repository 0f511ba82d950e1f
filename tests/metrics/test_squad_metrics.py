"""Tests for structqa.metrics.squad: hand-worked cases and the reading of gold answers."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from structqa.metrics.squad import (
    best_thresholds,
    exact_match,
    f1_v1,
    f1_v2,
    get_tokens,
    gold_from_squad_json,
    normalize_answer,
    raw_scores_v2,
    squad_v1,
    squad_v2,
)

V2_KEYS = ["exact", "f1", "total"]
HAS_KEYS = ["HasAns_exact", "HasAns_f1", "HasAns_total"]
NO_KEYS = ["NoAns_exact", "NoAns_f1", "NoAns_total"]
BEST_KEYS = ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]


def approx(value: float) -> Any:
    """Tight float comparison for hand-computed expectations."""
    return pytest.approx(value, abs=1e-9)


# --------------------------------------------------------------------------------------------
# Normalisation and per-answer scores
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Cat", "cat"),  # case + leading article
        ("An apple a day", "apple day"),  # all three articles, as whole words only
        ("theory anthem about", "theory anthem about"),  # "the"/"a"/"an" inside words stay
        ("Hello, World!", "hello world"),  # punctuation
        ("  x\t\n y  ", "x y"),  # whitespace collapsed and stripped
        ("ÉCOLE Normale", "école normale"),  # unicode lowercasing
        ("the.cat", "thecat"),  # punctuation goes before articles: "thecat" is one word
        ("a-b", "ab"),  # hyphen removed, not split
        ("The a AN the", ""),  # nothing but articles
        ("it's", "its"),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_get_tokens() -> None:
    assert get_tokens("") == []
    assert get_tokens("The a an") == []
    assert get_tokens("The Big, big dog.") == ["big", "big", "dog"]


def test_exact_match() -> None:
    assert exact_match("The Eiffel Tower!", "eiffel   tower") == 1
    assert exact_match("Eiffel", "Eiffel Tower") == 0
    assert exact_match("", "the") == 1  # both normalise to ""
    assert exact_match("an", "") == 1


def test_f1_partial_overlap() -> None:
    # pred tokens [big, red, dog], gold tokens [red, dog, barked]: 2 shared.
    # precision = 2/3, recall = 2/3, F1 = 2 * (2/3)(2/3) / (4/3) = 2/3.
    assert f1_v1("the big red dog", "a red dog barked") == approx(2 / 3)
    # pred [red, dog] vs gold [big, red, dog, barked, loudly]: 2 shared.
    # precision = 2/2 = 1, recall = 2/5, F1 = 2 * 1 * 0.4 / 1.4 = 4/7.
    assert f1_v1("Red dog.", "big red dog barked loudly") == approx(4 / 7)
    assert f1_v2("Red dog.", "big red dog barked loudly") == approx(4 / 7)
    # F1 is symmetric in (pred, gold).
    assert f1_v1("big red dog barked loudly", "Red dog.") == approx(4 / 7)
    assert f1_v1("Paris", "Paris") == 1.0
    assert f1_v1("London", "Paris") == 0.0


def test_f1_duplicate_tokens_use_multiset_intersection() -> None:
    # pred [dog, dog, dog, cat], gold [dog, dog]: min(3, 2) = 2 shared dogs.
    # precision = 2/4, recall = 2/2, F1 = 2 * 0.5 * 1 / 1.5 = 2/3.
    assert f1_v1("dog dog dog cat", "dog dog") == approx(2 / 3)
    # pred [dog] vs gold [dog, dog, dog]: 1 shared.
    # precision = 1, recall = 1/3, F1 = 2 * (1/3) / (4/3) = 1/2.
    assert f1_v1("dog", "dog dog dog") == approx(0.5)
    assert f1_v2("dog", "dog dog dog") == approx(0.5)


def test_f1_empty_answers_v1_vs_v2() -> None:
    # v1.1: no overlapping token -> 0, even when both are empty.
    assert f1_v1("", "") == 0.0
    assert f1_v1("the", "An") == 0.0
    assert f1_v1("", "Paris") == 0.0
    # v2.0: if either side is empty, 1 exactly when both are.
    assert f1_v2("", "") == 1.0
    assert f1_v2("the", "An") == 1.0
    assert f1_v2("", "Paris") == 0.0
    assert f1_v2("Paris", "") == 0.0
    assert f1_v2("Paris", "the") == 0.0


# --------------------------------------------------------------------------------------------
# SQuAD v1.1 aggregate
# --------------------------------------------------------------------------------------------


def test_squad_v1_max_over_ground_truths_and_missing(caplog: pytest.LogCaptureFixture) -> None:
    gold = {
        "q1": ["Denver Broncos", "Broncos", "the Denver Broncos team"],
        "q2": ["New York City"],
        "q3": ["Mars"],
    }
    preds = {"q1": "broncos!", "q2": "York", "unknown": "ignored"}
    # q1: EM 1 (second truth), F1 1.   q2: EM 0; pred [york] vs [new, york, city]:
    # precision 1, recall 1/3, F1 = 2 * (1/3) / (4/3) = 1/2.   q3: missing -> 0 and 0.
    # EM = 100 * 1 / 3, F1 = 100 * 1.5 / 3 = 50.
    with caplog.at_level(logging.WARNING, logger="structqa.metrics.squad"):
        result = squad_v1(gold, preds)
    assert list(result) == ["exact_match", "f1"]
    assert result["exact_match"] == approx(100 / 3)
    assert result["f1"] == approx(50.0)
    assert "1 of 3 questions have no prediction" in caplog.text
    assert "'q3'" in caplog.text


def test_squad_v1_empty_cases() -> None:
    # "a": gold "The" normalises to "", pred "" too: EM 1 but v1.1 F1 0 (no overlap).
    # "b": empty pred vs real answer: 0 and 0.
    result = squad_v1({"a": ["The"], "b": ["Paris"]}, {"a": "", "b": ""})
    assert result == {"exact_match": approx(50.0), "f1": approx(0.0)}


def test_squad_v1_errors() -> None:
    with pytest.raises(ValueError, match="no gold"):
        squad_v1({}, {})
    with pytest.raises(ValueError, match="no ground-truth"):
        squad_v1({"q": []}, {"q": "x"})
    # A question without answers is fine when it has no prediction (scores 0, like officially).
    assert squad_v1({"q": [], "r": ["x"]}, {"r": "x"}) == {"exact_match": 50.0, "f1": 50.0}
    with pytest.raises(TypeError, match="'q'"):
        squad_v1({"q": ["x"]}, {"q": None})  # type: ignore[dict-item]


# --------------------------------------------------------------------------------------------
# SQuAD v2.0 aggregate
# --------------------------------------------------------------------------------------------

# a, b answerable; c, d unanswerable.
V2_GOLD: dict[str, list[str]] = {
    "a": ["Paris"],
    "b": ["blue whale", "the blue whale"],
    "c": [],
    "d": [],
}
V2_PREDS = {"a": "Paris", "b": "whale", "c": "", "d": "something"}
# raw exact: a 1, b 0, c 1 (gold is [""], pred ""), d 0.
# raw F1:    a 1, b 2/3 (pred [whale] vs [blue, whale]: P 1, R 1/2, F1 2/3), c 1, d 0.
V2_NA_PROBS = {"a": 0.1, "b": 0.6, "c": 0.9, "d": 0.7}


def test_raw_scores_v2() -> None:
    exact, f1 = raw_scores_v2(V2_GOLD, V2_PREDS)
    assert exact == {"a": 1, "b": 0, "c": 1, "d": 0}
    assert f1 == {"a": 1.0, "b": approx(2 / 3), "c": 1.0, "d": 0.0}


def test_squad_v2_has_ans_no_ans_split() -> None:
    result = squad_v2(V2_GOLD, V2_PREDS)
    assert list(result) == V2_KEYS + HAS_KEYS + NO_KEYS
    # exact: (1 + 0 + 1 + 0) / 4 = 50%;  F1: (1 + 2/3 + 1 + 0) / 4 = (8/3) / 4 = 66.67%.
    assert result["exact"] == approx(50.0)
    assert result["f1"] == approx(100 * (8 / 3) / 4)
    assert result["total"] == 4
    # HasAns = {a, b}: exact 1/2, F1 (1 + 2/3) / 2 = 5/6.
    assert result["HasAns_exact"] == approx(50.0)
    assert result["HasAns_f1"] == approx(100 * 5 / 6)
    assert result["HasAns_total"] == 2
    # NoAns = {c, d}: exact 1/2, F1 1/2.
    assert result["NoAns_exact"] == approx(50.0)
    assert result["NoAns_f1"] == approx(50.0)
    assert result["NoAns_total"] == 2


def test_squad_v2_only_answerable_has_no_noans_keys() -> None:
    result = squad_v2({"a": ["Paris"]}, {"a": "paris."})
    assert result == {
        "exact": 100.0,
        "f1": 100.0,
        "total": 1,
        "HasAns_exact": 100.0,
        "HasAns_f1": 100.0,
        "HasAns_total": 1,
    }


def test_squad_v2_only_unanswerable_has_no_hasans_keys() -> None:
    result = squad_v2({"c": [], "d": []}, {"c": "", "d": "x"})
    assert list(result) == V2_KEYS + NO_KEYS
    assert result["exact"] == approx(50.0)
    assert result["NoAns_f1"] == approx(50.0)


def test_squad_v2_answerability_comes_from_raw_answers() -> None:
    # Official: has_ans = bool(qa["answers"]); the only gold text "The" normalises to "",
    # so the question is scored against [""] but still counts as answerable.
    result = squad_v2({"q": ["The"]}, {"q": ""})
    assert list(result) == V2_KEYS + HAS_KEYS
    assert result["HasAns_exact"] == 100.0
    assert result["HasAns_f1"] == 100.0
    # Predicting no-answer (0.9 > 0.5) on an answerable question scores float(not True) = 0.
    result = squad_v2({"q": ["The"]}, {"q": ""}, {"q": 0.9}, na_prob_thresh=0.5)
    assert result["exact"] == 0.0
    assert result["f1"] == 0.0


def test_squad_v2_na_prob_thresh_effect() -> None:
    # thresh 0.5: b (0.6), c (0.9), d (0.7) are predicted no-answer, a keeps its raw score.
    # a 1 (raw) | b answerable -> 0 | c unanswerable -> 1 | d unanswerable -> 1.
    # exact = F1 = 3/4 = 75%; HasAns 1/2; NoAns 2/2.
    result = squad_v2(V2_GOLD, V2_PREDS, V2_NA_PROBS, na_prob_thresh=0.5)
    assert list(result) == V2_KEYS + HAS_KEYS + NO_KEYS + BEST_KEYS
    assert result["exact"] == approx(75.0)
    assert result["f1"] == approx(75.0)
    assert result["HasAns_exact"] == approx(50.0)
    assert result["HasAns_f1"] == approx(50.0)
    assert result["NoAns_exact"] == approx(100.0)
    assert result["NoAns_f1"] == approx(100.0)
    # thresh 0.6: "greater than" is strict, so b (0.6) keeps raw exact 0 / F1 2/3;
    # only c, d switch (both to 1): exact (1+0+1+1)/4 = 75%, F1 (1 + 2/3 + 1 + 1)/4 = 91.67%.
    result = squad_v2(V2_GOLD, V2_PREDS, V2_NA_PROBS, na_prob_thresh=0.6)
    assert result["exact"] == approx(75.0)
    assert result["f1"] == approx(100 * (11 / 3) / 4)
    # Default thresh 1.0: no probability exceeds it, so the raw scores stand.
    result = squad_v2(V2_GOLD, V2_PREDS, V2_NA_PROBS)
    assert result["exact"] == approx(50.0)
    assert result["f1"] == approx(100 * (8 / 3) / 4)


def test_squad_v2_negative_thresh_without_na_probs() -> None:
    # Without na_probs all are 0.0, and 0.0 > -1 predicts no-answer everywhere:
    # a, b -> 0 and c, d -> 1, so 50% on both metrics; no best_* keys.
    result = squad_v2(V2_GOLD, V2_PREDS, na_prob_thresh=-1.0)
    assert list(result) == V2_KEYS + HAS_KEYS + NO_KEYS
    assert result["exact"] == approx(50.0)
    assert result["f1"] == approx(50.0)
    assert result["HasAns_f1"] == 0.0


def test_best_thresh_hand_worked() -> None:
    # Start: every question answered "no answer" -> score = #unanswerable = 2, thresh 0.0.
    # Walk by na_prob: a (0.1), b (0.6), d (0.7), c (0.9).
    # exact: a +1 -> 3 (best, thresh 0.1); b +0 -> 3; d has a non-empty pred -> -1 -> 2;
    #        c empty pred -> +0 -> 2.  best_exact = 100 * 3 / 4 = 75, thresh 0.1.
    # F1:    a +1 -> 3 (best, 0.1); b +2/3 -> 11/3 (best, 0.6); d -1 -> 8/3; c +0.
    #        best_f1 = 100 * (11/3) / 4 = 91.67, thresh 0.6.
    expected = {
        "best_exact": approx(75.0),
        "best_exact_thresh": 0.1,
        "best_f1": approx(100 * (11 / 3) / 4),
        "best_f1_thresh": 0.6,
    }
    assert best_thresholds(V2_GOLD, V2_PREDS, V2_NA_PROBS) == expected
    result = squad_v2(V2_GOLD, V2_PREDS, V2_NA_PROBS)
    assert {key: result[key] for key in BEST_KEYS} == expected


def test_best_thresh_stays_at_start() -> None:
    # x unanswerable, y answerable, both predictions wrong. Start 1 (x), thresh 0.0.
    # y (0.2): +0 -> 1, not better; x (0.3): -1 -> 0. best = 100 * 1 / 2 = 50 at 0.0.
    result = best_thresholds(
        {"x": [], "y": ["foo"]}, {"x": "bar", "y": "baz"}, {"x": 0.3, "y": 0.2}
    )
    assert result == {
        "best_exact": 50.0,
        "best_exact_thresh": 0.0,
        "best_f1": 50.0,
        "best_f1_thresh": 0.0,
    }


def test_best_thresh_ties_follow_na_probs_order() -> None:
    gold = {"p": ["yes"], "q": []}
    preds = {"p": "yes", "q": "no"}
    # Equal na_probs; the sort is stable over the na_probs mapping's order. Start 1 (q).
    # Order p, q: p +1 -> 2 (best, thresh 0.5); q -1 -> 1. best = 100 * 2 / 2 = 100.
    p_first = best_thresholds(gold, preds, {"p": 0.5, "q": 0.5})
    assert (p_first["best_exact"], p_first["best_exact_thresh"]) == (100.0, 0.5)
    # Order q, p: q -1 -> 0; p +1 -> 1, not better than 1. best = 50 at 0.0.
    q_first = best_thresholds(gold, preds, {"q": 0.5, "p": 0.5})
    assert (q_first["best_exact"], q_first["best_exact_thresh"]) == (50.0, 0.0)


def test_best_thresh_uses_raw_prediction_string() -> None:
    # q unanswerable with pred "the": raw exact is 1 ("the" normalises to ""), yet the sweep
    # tests the raw string, which is non-empty, so diff = -1.
    # Start 1; q (0.1): -1 -> 0; r (0.2): +1 -> 1, not better. best = 100 * 1 / 2 = 50 at 0.0.
    # (Had the diff for q been 0, r would reach 2 -> 100 at 0.2.)
    gold = {"q": [], "r": ["ok"]}
    preds = {"q": "the", "r": "ok"}
    result = squad_v2(gold, preds, {"q": 0.1, "r": 0.2, "extra": 0.0})
    assert result["exact"] == 100.0
    assert result["best_exact"] == 50.0
    assert result["best_exact_thresh"] == 0.0


def test_squad_v2_missing_inputs_raise() -> None:
    gold = {f"q{i}": ["x"] for i in range(8)}
    preds = {"q0": "x", "q7": "x"}
    with pytest.raises(ValueError, match=r"6 of 8 question ids have no prediction") as info:
        squad_v2(gold, preds)
    assert "'q1', 'q2', 'q3', 'q4', 'q5'" in str(info.value)
    full = {qid: "x" for qid in gold}
    with pytest.raises(ValueError, match=r"1 of 8 question ids have no na_prob \(first: 'q3'\)"):
        squad_v2(gold, full, {qid: 0.1 for qid in gold if qid != "q3"})
    with pytest.raises(ValueError, match="no gold"):
        squad_v2({}, {})


# --------------------------------------------------------------------------------------------
# Gold from raw SQuAD JSON
# --------------------------------------------------------------------------------------------


def test_gold_from_squad_json_inline(caplog: pytest.LogCaptureFixture) -> None:
    obj = {
        "version": "v2.0",
        "data": [
            {
                "title": "T",
                "paragraphs": [
                    {
                        "context": "ctx",
                        "qas": [
                            {"id": "q1", "answers": [{"text": "A", "answer_start": 0}]},
                            {
                                "id": "q2",
                                "answers": [],
                                "is_impossible": True,
                                "plausible_answers": [{"text": "P", "answer_start": 0}],
                            },
                            {"id": "q3", "answers": [{"text": "."}, {"text": "B"}]},
                            {"id": "q1", "answers": [{"text": "C"}]},
                        ],
                    }
                ],
            }
        ],
    }
    with caplog.at_level(logging.WARNING, logger="structqa.metrics.squad"):
        gold, has_ans = gold_from_squad_json(obj)
    assert gold == {"q1": ["C"], "q2": [], "q3": [".", "B"]}
    assert list(gold) == ["q1", "q2", "q3"]
    assert has_ans == {"q1": True, "q2": False, "q3": True}
    assert "1 repeated question ids" in caplog.text
    assert gold_from_squad_json(obj["data"]) == (gold, has_ans)


def test_integer_question_ids_are_read_as_their_text():
    """COVID-QA numbers its questions; the readers and predictions.json use the decimal text."""
    obj = {"data": [{"paragraphs": [{"qas": [{"id": 917, "answers": [{"text": "x"}]}]}]}]}
    gold, _ = gold_from_squad_json(obj)
    assert gold == {"917": ["x"]}
    assert squad_v1(gold, {"917": "x"})["f1"] == 100.0
    with pytest.raises(ValueError, match="field 'id': expected a string, got bool"):
        gold_from_squad_json({"data": [{"paragraphs": [{"qas": [{"id": True, "answers": []}]}]}]})


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        (
            {"data": [{"paragraphs": [{"qas": [{"answers": []}]}]}]},
            "'data[0].paragraphs[0].qas[0]', field 'id': missing",
        ),
        (
            {"data": [{"paragraphs": [{"qas": [{"id": "q", "answers": {"text": "x"}}]}]}]},
            "field 'answers': expected a list, got dict",
        ),
        ({"data": {"paragraphs": []}}, "record 'top level', field 'data': expected a list"),
        (
            {"data": [{"paragraphs": [{"qas": [{"id": "q", "answers": [{"txt": "x"}]}]}]}]},
            "qas[0].answers[0]', field 'text': missing",
        ),
    ],
)
def test_gold_reading_names_the_record_and_field(obj, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        gold_from_squad_json(obj)
