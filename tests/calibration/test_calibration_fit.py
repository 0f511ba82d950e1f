"""Threshold, temperature and isotonic fitting on synthetic scores with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from structqa.calibration.fit import (
    Calibrator,
    Outcomes,
    Scores,
    expected_calibration_error,
    fit_calibrator,
    fit_isotonic,
    fit_temperatures,
    raw_probability,
    returned_correct,
)
from structqa.calibration.report import calibrate
from structqa.data.records import Answer, Example
from structqa.decoding import Candidate, Prediction


def _scores(gaps: np.ndarray, odds: np.ndarray | None = None) -> Scores:
    q = len(gaps)
    v2 = odds is not None
    return Scores(
        [f"q{i}" for i in range(q)],
        gaps,
        np.zeros(q) if odds is None else odds,
        np.ones(q, dtype=bool),
        v2,
    )


def test_ece_by_hand():
    # bins of width 1/15: 0.05 -> bin 0 (1 right of 2: |0.5 - 0.05|); 0.95, 1.0 -> bin 14
    p = np.array([0.05, 0.05, 0.95, 1.0])
    correct = np.array([True, False, True, True])
    expected = (2 * abs(0.5 - 0.05) + 2 * abs(1.0 - 0.975)) / 4
    assert expected_calibration_error(p, correct) == pytest.approx(expected)
    assert expected_calibration_error(np.array([0.7] * 10), np.arange(10) < 7) == 0.0


def test_isotonic_pools_adjacent_violators():
    iso = fit_isotonic(np.array([0.1, 0.2, 0.3, 0.4]), np.array([1, 0, 1, 1], dtype=bool))
    # [1][0] violate -> one block (1 of 2 right at x 0.15); [1][1] tie -> one block (2 of 2
    # at 0.35); each block's accuracy smoothed to (right + 1) / (size + 2): 0.5 and 0.75
    assert iso.x == pytest.approx([0.15, 0.35]) and iso.y == pytest.approx([0.5, 0.75])
    assert iso(np.array([0.0, 0.25, 0.9])) == pytest.approx([0.5, 0.625, 0.75])
    # all right: never certain, but the more evidence the closer to 1
    few = fit_isotonic(np.array([0.9] * 5), np.ones(5, dtype=bool))
    many = fit_isotonic(np.array([0.9] * 500), np.ones(500, dtype=bool))
    assert few.y[-1] == pytest.approx(6 / 7) and 0.99 < many.y[-1] < 1.0
    # smoothing never makes the map decrease (a big 0.8 block, then a small 2-of-2 block)
    p = np.linspace(0.1, 0.9, 102)
    correct = np.concatenate([np.arange(100) % 5 != 0, [True, True]])
    assert np.all(np.diff(fit_isotonic(p, correct).y) >= 0)


@pytest.mark.parametrize("t_true", [0.5, 2.0])
def test_temperature_is_recovered_from_known_correctness(t_true: float):
    """Answers are right with probability share(T_true) of their n-best: the fit finds T_true."""
    rng = np.random.default_rng(0)
    n = 20_000
    gaps = np.concatenate([np.zeros((n, 1)), -rng.exponential(2.0, size=(n, 3))], axis=1)
    scores = _scores(gaps)
    truth = raw_probability(scores, None, t_true)
    correct = rng.random(n) < truth
    t_span, t_null = fit_temperatures(scores, correct, None)
    assert t_span == pytest.approx(t_true, rel=0.08) and t_null == 1.0
    fitted = raw_probability(scores, None, t_span)
    assert expected_calibration_error(fitted, correct) < 0.015
    assert expected_calibration_error(raw_probability(scores, None), correct) > 0.05


def test_v2_null_temperature_and_abstention_correctness():
    """SQuAD 2.0: "no answer" is right iff the question is unanswerable; with spans always
    right when answerable, P(correct) is p_null or 1 - p_null at the true T_null."""
    rng = np.random.default_rng(1)
    n, t_null_true, thr = 20_000, 3.0, 0.5
    odds = rng.normal(0, 4, size=n)
    p_null = 1 / (1 + np.exp(-(odds - thr) / t_null_true))
    unanswerable = rng.random(n) < p_null
    gaps = np.array([[0.0, -50.0]] * n)  # one dominant span: share 1
    scores = _scores(gaps, odds)
    gold = Outcomes(unanswerable, ~unanswerable, (~unanswerable).astype(float))
    correct = returned_correct(scores, gold, thr)
    assert np.array_equal(correct[odds > thr], unanswerable[odds > thr])
    assert np.array_equal(correct[odds <= thr], ~unanswerable[odds <= thr])
    _, t_null = fit_temperatures(scores, correct, thr)
    assert t_null == pytest.approx(t_null_true, rel=0.1)


def test_auto_keeps_the_map_that_calibrates_held_back_halves_best():
    """Answers right 20 % of the time below p 0.5 and 90 % above: no temperature fits that
    step, a map after it does; an honest temperature error is fitted by the temperature."""
    rng = np.random.default_rng(2)
    n = 4000
    gaps = np.concatenate([np.zeros((n, 1)), -rng.exponential(1.0, size=(n, 2))], axis=1)
    scores = _scores(gaps)
    p = raw_probability(scores, None)
    step = Outcomes(np.zeros(n, bool), rng.random(n) < np.where(p < 0.5, 0.2, 0.9), p)
    cal = fit_calibrator(scores, step, None)
    cv = cal.fit["two_fold_ece"]
    assert cal.method == min(cv, key=cv.get) and cal.method != "temperature"
    assert cv[cal.method] < cv["temperature"] - 0.02
    for method, most in (("platt", 0.15), ("isotonic", 0.03)):  # a step is no sigmoid
        again = Calibrator.from_dict(fit_calibrator(scores, step, None, method).to_dict())
        assert again.method == method
        ece = expected_calibration_error(again.probability(scores), step.span_correct)
        assert ece < min(most, again.fit["ece_uncalibrated"])
    honest = Outcomes(np.zeros(n, bool), rng.random(n) < raw_probability(scores, None, 2.0), p)
    cal = fit_calibrator(scores, honest, None, "temperature")
    assert cal.t_span == pytest.approx(2.0, rel=0.15)


def _prediction(qid: str, text: str, odds: float, scores: list[float]) -> Prediction:
    nbest = tuple(Candidate(f"{text} {i}" if i else text, 0, 1, s) for i, s in enumerate(scores))
    return Prediction(qid, text, 0, len(text), scores[0], 0.0, odds, nbest)


def test_calibrate_picks_the_threshold_that_separates_known_answers():
    """Unanswerable questions have null odds 2..3, answerable ones -3..-2 with the right span:
    the fitted threshold lies between the groups and every returned answer is correct."""
    examples, preds = [], {}
    for i in range(40):
        no = i % 2 == 0
        ctx = f"word{i} is here"
        answers = () if no else (Answer(f"word{i}", 0),)
        gold = () if no else (f"word{i}",)
        examples.append(Example(f"q{i}", "what?", ctx, answers, gold, is_impossible=no))
        odds = 2.0 + i / 40 if no else -2.0 - i / 40
        preds[f"q{i}"] = _prediction(f"q{i}", f"word{i}", odds, [5.0, 1.0])
    cal = calibrate(examples, preds, version_2=True, method="temperature")
    assert -2.025 <= cal.null_threshold < 2.0  # answer iff odds <= threshold
    assert cal.fit["accuracy"] == 1.0
    # everything right: the fitted probabilities go up towards 1
    s = [preds[e.id] for e in examples]
    assert min(cal.probability(_scores_of(s))) > 0.9


def _scores_of(preds: list[Prediction]) -> Scores:
    from structqa.calibration.fit import scores_from_predictions

    return scores_from_predictions({p.id: p for p in preds}, [p.id for p in preds], True)


@pytest.mark.parametrize("order", [[1, 1, 0, 0], [0, 0, 1, 1], [0, 1, 0, 1]])
def test_isotonic_pools_questions_of_one_score_whatever_their_order(order) -> None:
    """Four questions at one score, half right: (2 + 1) / (4 + 2) = 0.5 in any order (the
    order once split them into blocks, and the map said 0.75 at that score)."""
    from structqa.calibration.fit import fit_isotonic

    one = fit_isotonic(np.full(4, 0.3), np.array(order))
    assert one(np.array([0.3]))[0] == pytest.approx(0.5)
    two = fit_isotonic(np.array([0.2, 0.2, 0.6, 0.6]), np.array(order))
    rising = order == [0, 0, 1, 1]  # both wrong at 0.2, both right at 0.6: 1/4 and 3/4
    expected = [0.25, 0.75] if rising else [0.5, 0.5]
    assert np.allclose(two(np.array([0.2, 0.6])), expected)


def test_platt_never_reverses_the_scores_nor_says_certain() -> None:
    """One distinct score, all right, or a fit that would decrease: the constant accuracy,
    smoothed (3 right of 4 at one score: 4/6, never a map that falls from 0.91 to 0.15)."""
    from structqa.calibration.fit import fit_platt

    flat = fit_platt(np.full(4, 0.2), np.array([1, 0, 1, 1]))
    assert flat.a == 0.0 and np.allclose(flat(np.array([0.05, 0.9])), 4 / 6)
    sure = fit_platt(np.array([0.3, 0.6, 0.8]), np.array([1, 1, 1]))
    assert np.allclose(sure(np.array([0.3, 0.99])), 4 / 5)
    reversed_ = fit_platt(np.array([0.1, 0.4, 0.6, 0.9] * 5), np.array([1, 1, 0, 0] * 5))
    assert reversed_.a == 0.0 and np.allclose(reversed_(np.array([0.1, 0.9])), 11 / 22)
    rising = fit_platt(np.array([0.1, 0.4, 0.6, 0.9] * 5), np.array([0, 0, 1, 1] * 5))
    assert rising.a > 0 and rising(np.array([0.9]))[0] > rising(np.array([0.1]))[0]


def test_a_question_without_a_span_reads_back_with_the_decoders_score(tmp_path) -> None:
    """Fitted from the saved files (as train and the grids fit) and applied to live answers,
    a span-less question's span score must be one value: the decoder's sentinel, not 0.0."""
    from structqa.calibration.report import predictions_from_files
    from structqa.decoding import NEG
    from structqa.evaluation import EvalResult, write_outputs

    live = {
        "q": Prediction("q", "", -1, -1, NEG, 2.0, 2.0 - NEG),
        "r": Prediction("r", "x", 0, 1, 3.0, 1.0, -2.0, (Candidate("x", 0, 1, 3.0, 1.0),)),
    }
    write_outputs(EvalResult({"f1": 0.0}, live, 0.0), tmp_path)
    saved = predictions_from_files(tmp_path)
    assert saved["q"].score == live["q"].score == NEG
    assert saved["r"].score == 3.0 and saved["q"].null_odds == pytest.approx(live["q"].null_odds)
