"""Tests for structqa.metrics.drop: hand-worked cases of the official DROP evaluation's
definitions."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from structqa.metrics.drop import (
    NO_GOLD,
    GoldAnswer,
    QuestionScore,
    answer_json_to_strings,
    answer_to_bags,
    drop_question_scores,
    drop_score,
    get_metrics,
    gold_from_drop_json,
    normalize_answer,
    score_question,
)

NO_DATE = {"day": "", "month": "", "year": ""}


def approx(value: float) -> Any:
    return pytest.approx(value, abs=1e-9)


def ans(number: str = "", spans: list[str] | None = None, date: dict | None = None) -> dict:
    return {"number": number, "date": date or NO_DATE, "spans": spans or []}


# --------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Bears", "bears"),
        ("14,506", "14506.0"),  # punctuation goes, then the token is a number
        ("14506", "14506.0"),
        ("14506.0", "14506.0"),
        ("14506.00", "14506.0"),
        ("$1,000", "1000.0"),
        ("5.", "5.0"),  # a number keeps its punctuation: float("5.") parses
        ("3.5%", "35.0"),  # not a number as written, so the "." goes too
        ("-5", "5.0"),  # the hyphen separates tokens, so the sign is lost
        ("1e3", "1000.0"),
        ("1_000", "1000.0"),  # float() accepts digit-group underscores
        ("Infinity", "inf"),
        ("NaN", "nan"),
        ("80-yard", "80.0 yard"),  # hyphens split tokens
        ("a-b", "b"),  # "a" alone is an article
        ("the.cat", "thecat"),  # punctuation is removed before articles
        ("it's", "its"),
        ("  x\t\n y  ", "x y"),  # only spaces split; other whitespace is fixed inside tokens
        ("the\ncat", "cat"),
        ("7 July 1345", "7.0 july 1345.0"),
        ("", ""),
        ("The a an", ""),
        ("one hundred", "one hundred"),  # words are not numbers
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_answer_to_bags() -> None:
    assert answer_to_bags("The 2 Bears") == (["2.0 bears"], [{"2.0", "bears"}])
    assert answer_to_bags(["a b", "b a", ""]) == (["b", "b", ""], [{"b"}, {"b"}, set()])
    assert answer_to_bags([]) == ([], [])


# --------------------------------------------------------------------------------------------
# get_metrics: one prediction against one gold answer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pred", ["14506", "14,506", "14506.0", "14506.00", " 14,506 "])
def test_numbers_written_differently_match(pred: str) -> None:
    assert get_metrics(pred, "14,506") == (1.0, 1.0)


def test_number_mismatch_rule() -> None:
    # Gold has numbers; the prediction shares none: F1 0 despite the overlapping word.
    assert get_metrics("13 yards", "14 yards") == (0.0, 0.0)
    assert get_metrics("yards", "14 yards") == (0.0, 0.0)
    # Sharing one of the gold numbers is enough to be scored: {14.0, yards} vs {14.0, 15.0,
    # yards}: P = 2/2, R = 2/3, F1 = 0.8.
    assert get_metrics("14 yards", "14 15 yards") == (0.0, 0.8)
    # Numbers only in the prediction do not trigger the rule: P = 1/2, R = 1, F1 = 2/3.
    assert get_metrics("14 yards", "yards") == (0.0, 0.67)
    # Empty predictions against a number: 0.
    assert get_metrics("", "5") == (0.0, 0.0)


def test_f1_is_over_word_sets_and_rounded() -> None:
    # {quarter, second} vs {second, half}: P = R = 1/2 -> 0.5; duplicates do not count twice.
    assert get_metrics("second quarter", "the second half") == (0.0, 0.5)
    assert get_metrics("half half half", "half") == (0.0, 1.0)
    # EM compares the normalised strings, F1 the word sets: same set, different order.
    assert get_metrics("bears chicago", "Chicago Bears") == (0.0, 1.0)
    # 1 of 3 words: P = 1, R = 1/3, F1 = 0.5; 1 of 6: P = 1, R = 1/6 -> 2/7 = 0.2857 -> 0.29.
    assert get_metrics("x", "x y z") == (0.0, 0.5)
    assert get_metrics("x", "x b c d e f") == (0.0, 0.29)


def _overlapping(shared: int, size: int) -> tuple[str, str]:
    """Two answers of ``size`` distinct words each, ``shared`` of them in common."""
    common = [f"w{i}" for i in range(shared)]
    pred = common + [f"p{i}" for i in range(size - shared)]
    gold = common + [f"g{i}" for i in range(size - shared)]
    return " ".join(pred), " ".join(gold)


def test_rounding_is_numpy_rounding() -> None:
    # 21 of 40 words shared on both sides: P = R = 0.525, and F1 computes to the double
    # nearest 0.525, just above it in decimal. numpy rounds that to 0.52, Python's round() to
    # 0.53; the official script rounds a numpy float.
    pred, gold = _overlapping(21, 40)
    assert round(2 * 0.525 * 0.525 / 1.05, 2) == 0.53
    assert get_metrics(pred, gold) == (0.0, 0.52)
    pred, gold = _overlapping(3, 40)  # 0.075: numpy 0.08, round() 0.07
    assert get_metrics(pred, gold) == (0.0, 0.08)


def test_multi_span_hungarian_beats_greedy() -> None:
    # Gold A = {x, y}, B = {x}; pred P1 = {x, y, z}, P2 = {y}. Span F1s:
    #   A-P1 0.8, A-P2 2/3;  B-P1 0.5, B-P2 0.
    # Greedy (by gold order, or best pair first) takes A-P1 then B-P2: 0.8 / 2 = 0.4.
    # Optimal: A-P2 + B-P1 = 2/3 + 1/2 = 7/6 -> 7/12 = 0.5833 -> 0.58.
    assert get_metrics(["x y z", "y"], ["x y", "x"]) == (0.0, 0.58)
    # Gold A = {u}, B = {u, v}; pred P1 = {u, v}, P2 = {v}:
    #   A-P1 2/3, A-P2 0;  B-P1 1.0, B-P2 2/3.
    # Best pair first: B-P1 (1.0), then A-P2 (0): 0.5. Optimal A-P1 + B-P2 = 4/3 -> 0.67.
    assert get_metrics(["u v", "v"], ["u", "u v"]) == (0.0, 0.67)
    # Three spans. Gold G1 = {x, y, z}, G2 = {w, y, z}, G3 = {w, x, y};
    # pred P1 = {w, x, y}, P2 = {w}, P3 = {y, z}:
    #   G1: P1 2/3, P2 0,   P3 0.8
    #   G2: P1 2/3, P2 0.5, P3 0.8
    #   G3: P1 1.0, P2 0.5, P3 0.4
    # Greedy by gold order: G1-P3 0.8, G2-P1 2/3, G3-P2 0.5 -> 1.967 / 3 = 0.66.
    # Optimal: G1-P3 0.8 + G2-P2 0.5 + G3-P1 1.0 = 2.3 -> 0.7667 -> 0.77.
    assert get_metrics(["w x y", "w", "y z"], ["x y z", "w y z", "w x y"]) == (0.0, 0.77)


def test_multi_span_averages_over_the_longer_side() -> None:
    # Three gold spans, one right: 1/3 -> 0.33. Extra predicted spans dilute the same way.
    assert get_metrics("Bears", ["Bears", "Lions", "Packers"]) == (0.0, 0.33)
    assert get_metrics(["Bears", "Lions", "Packers"], "Bears") == (0.0, 0.33)
    assert get_metrics(["Lions", "Bears"], ["Bears", "Lions"]) == (1.0, 1.0)  # order-free EM
    assert get_metrics([], ["Bears", "Lions"]) == (0.0, 0.0)
    # Three spans with numbers: gold {1.0}, {2.0}, {3.0 yard}; pred {2.0}, {3.0}, {1.0}.
    # Pairs with no shared number score 0, so the alignment must pair by number:
    # 1 + 1 + F1({3.0}, {3.0, yard}) = 2/3 -> (1 + 1 + 2/3) / 3 = 0.8889 -> 0.89.
    assert get_metrics(["2", "3", "1"], ["1", "2", "3-yard"]) == (0.0, 0.89)


def test_exact_match_counts_repeated_spans() -> None:
    gold = ["43-yard", "54-yard", "54-yard", "57-yard"]  # a real contrast-set answer
    assert get_metrics(["43-yard", "54-yard", "57-yard"], gold) == (0.0, 0.75)
    assert get_metrics(["57-yard", "54-yard", "43-yard", "54-yard"], gold) == (1.0, 1.0)


def test_dates() -> None:
    gold = answer_json_to_strings({"date": {"day": "11", "month": "June", "year": "1734"}})
    assert gold == GoldAnswer(("11 June 1734",), "date")
    assert get_metrics("June 11, 1734", gold.texts) == (0.0, 1.0)  # same words, other order
    assert get_metrics("11 June 1734", gold.texts) == (1.0, 1.0)
    # Two of three: P = 1, R = 2/3 -> 0.8; the year is the only number shared.
    assert get_metrics("June 1734", gold.texts) == (0.0, 0.8)
    # The day and year are numbers: a prediction with neither scores 0.
    assert get_metrics("June", gold.texts) == (0.0, 0.0)
    partial = answer_json_to_strings({"date": {"day": "", "month": "January", "year": "1965"}})
    assert partial.texts == ("January 1965",)
    # The official formats "{day} {month} {year}"; the extra spaces normalise away.
    assert normalize_answer(" January 1965") == normalize_answer(partial.texts[0])


def test_answer_json_to_strings_precedence() -> None:
    assert answer_json_to_strings(ans("23", ["23-yard"])) == GoldAnswer(("23",), "number")
    assert answer_json_to_strings(ans(spans=["x"])) == GoldAnswer(("x",), "span")
    assert answer_json_to_strings(ans(spans=["x", "y"])) == GoldAnswer(("x", "y"), "spans")
    assert answer_json_to_strings(ans()) == GoldAnswer(("",), "date")
    assert answer_json_to_strings({"number": "", "spans": [], "date": {}}).kind == "date"
    with pytest.raises(ValueError, match="no number, spans or date"):
        answer_json_to_strings({"spans": []})


# --------------------------------------------------------------------------------------------
# Per question and overall
# --------------------------------------------------------------------------------------------


def test_question_max_over_candidates_and_type() -> None:
    span = GoldAnswer(("80-yard",), "span")
    number = GoldAnswer(("80",), "number")
    # vs "80-yard": EM 0, F1 2/3; vs "80": EM 1, F1 1 -> the number reaches both maxima.
    assert score_question([span, number], "80") == QuestionScore(1.0, 1.0, "number")
    # vs "80-yard": (1, 1); vs "80": (0, 0.67), below the maxima -> stays "span".
    assert score_question([span, number], "80 yard") == QuestionScore(1.0, 1.0, "span")
    # vs "80-yard": {80.0, yards} vs {80.0, yard}: F1 0.5; vs "80": F1 0.67 -> "number".
    assert score_question([span, number], "80 yards") == QuestionScore(0.0, 0.67, "number")
    # Nothing matches: every candidate ties at (0, 0), so the last one's type counts.
    assert score_question([span, number], "touchdown") == QuestionScore(0.0, 0.0, "number")
    assert score_question([number, span], "touchdown") == QuestionScore(0.0, 0.0, "span")
    # Blank candidates are ignored (only the first text is checked); none usable -> NO_GOLD.
    blank = GoldAnswer(("",), "date")
    assert score_question([blank], "x") == QuestionScore(0.0, 0.0, NO_GOLD)
    assert score_question([blank, span], "80 yard") == QuestionScore(1.0, 1.0, "span")
    assert score_question([GoldAnswer((" ", "x"), "spans")], "x").kind == NO_GOLD


def test_drop_score_per_type_and_missing(caplog: pytest.LogCaptureFixture) -> None:
    gold = {
        "n1": [GoldAnswer(("3",), "number")],
        "n2": [GoldAnswer(("4",), "number")],
        "d1": [GoldAnswer(("1985",), "date")],
        "s1": [GoldAnswer(("Bears", "Lions"), "spans")],
        "s2": [GoldAnswer(("Chicago Bears",), "span")],
    }
    preds = {"n1": "3", "n2": "5", "s1": ["Lions"], "s2": "Bears", "extra": "ignored"}
    with caplog.at_level(logging.WARNING, logger="structqa.metrics.drop"):
        result = drop_score(gold, preds)
    assert "1 of 5 questions have no prediction" in caplog.text
    # F1: n1 1, n2 0, d1 0 (missing), s1 0.5, s2 P = 1, R = 1/2 -> 0.67.
    assert result["global_em"] == approx(1 / 5)
    assert result["global_f1"] == approx((1 + 0.5 + 0.67) / 5)
    assert result["total"] == 5
    assert result["per_type"] == {
        "date": {"count": 1, "em": 0.0, "f1": 0.0},
        "number": {"count": 2, "em": 0.5, "f1": 0.5},
        "span": {"count": 1, "em": 0.0, "f1": approx(0.67)},
        "spans": {"count": 1, "em": 0.0, "f1": 0.5},
    }
    assert list(result["per_type"]) == sorted(result["per_type"])
    # A missing prediction counts under its answer's type even when a validated one differs.
    mixed = {"q": [GoldAnswer(("80-yard",), "span"), GoldAnswer(("80",), "number")]}
    assert drop_question_scores(mixed, {}) == {"q": QuestionScore(0.0, 0.0, "span")}


def test_drop_score_errors() -> None:
    with pytest.raises(ValueError, match="no gold"):
        drop_score({}, {})
    with pytest.raises(ValueError, match="no gold answer"):
        drop_score({"q": []}, {"q": "x"})
    with pytest.raises(TypeError, match="'q'"):
        drop_score({"q": [GoldAnswer(("x",), "span")]}, {"q": {"answer": "x"}})
    with pytest.raises(TypeError, match="'q'"):
        drop_score({"q": [GoldAnswer(("x",), "span")]}, {"q": ["x", 3]})


def test_gold_from_drop_json(caplog: pytest.LogCaptureFixture) -> None:
    obj = {
        "p1": {
            "passage": "...",
            "qa_pairs": [
                {"query_id": "q1", "answer": ans("3"), "validated_answers": [ans(spans=["x"])]},
                {"query_id": "q2", "answer": ans(date={"day": "", "month": "", "year": "1985"})},
            ],
        },
        "p2": {"passage": "...", "qa_pairs": [{"query_id": "q1", "answer": ans(spans=["y"])}]},
    }
    with caplog.at_level(logging.WARNING, logger="structqa.metrics.drop"):
        gold = gold_from_drop_json(obj)
    assert gold == {
        "q1": [GoldAnswer(("y",), "span")],
        "q2": [GoldAnswer(("1985",), "date")],
    }
    assert list(gold) == ["q1", "q2"]
    assert "1 repeated query ids" in caplog.text
    bad = {"p": {"passage": "", "qa_pairs": [{"query_id": "q9", "answer": {"spans": []}}]}}
    with pytest.raises(ValueError, match="question 'q9'.*no number, spans or date"):
        gold_from_drop_json(bad)
    with pytest.raises(ValueError, match="missing 'query_id'"):
        gold_from_drop_json({"p": {"passage": "", "qa_pairs": [{"answer": ans("1")}]}})
