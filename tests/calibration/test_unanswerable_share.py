"""Fitting the no-answer threshold and the probabilities for another share of unanswerable
questions than the validation questions have (``decode.unanswerable_share``)."""

from __future__ import annotations

import numpy as np
import pytest

from structqa.calibration.fit import (
    expected_calibration_error,
    fit_calibrator,
    fit_isotonic,
    fit_platt,
    fit_temperatures,
    outcomes,
    returned_correct,
    scores_from_predictions,
)
from structqa.calibration.report import calibrate
from structqa.cli import main
from structqa.config import ConfigError, load_config, validate
from structqa.data.records import Answer, Example
from structqa.decoding import Candidate, Prediction
from structqa.evaluation import best_null_threshold, share_weights


def test_weights_give_the_share_and_keep_the_number_of_questions():
    unanswerable = np.array([True, False, False, False, False])  # a fifth
    w = share_weights(unanswerable, 0.5)
    assert w.sum() == pytest.approx(5.0)
    assert w[unanswerable].sum() / w.sum() == pytest.approx(0.5)
    assert w[0] == pytest.approx(2.5) and w[1] == pytest.approx(0.625)
    assert np.array_equal(share_weights(unanswerable, None), np.ones(5))


@pytest.mark.parametrize("share", [0.0, 1.0, -0.2, 1.5])
def test_a_share_outside_zero_one_is_refused(share: float):
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        share_weights(np.array([True, False]), share)


def test_a_share_needs_both_kinds_of_question():
    with pytest.raises(ValueError, match="all unanswerable"):
        share_weights(np.array([True, True]), 0.5)
    with pytest.raises(ValueError, match="none unanswerable"):
        share_weights(np.array([False, False]), 0.5)


def _pred(qid: str, text: str, null_odds: float) -> Prediction:
    nbest = (Candidate(text, 0, 1, 5.0), Candidate(f"{text} 1", 0, 1, 1.0))
    return Prediction(qid, text, 0, len(text), 5.0, 5.0 + null_odds, null_odds, nbest)


def _mixed() -> tuple[dict[str, list[str]], dict[str, Prediction]]:
    """Eight answerable questions answered right at odds -3..-2, then, at odds 0, one more
    answerable question answered right and two unanswerable ones the model answers."""
    gold: dict[str, list[str]] = {}
    preds: dict[str, Prediction] = {}
    for i in range(8):
        gold[f"a{i}"] = ["x"]
        preds[f"a{i}"] = _pred(f"a{i}", "x", -3.0 + i / 8)
    gold["a8"], preds["a8"] = ["x"], _pred("a8", "x", 0.0)
    for i in range(2):
        gold[f"u{i}"], preds[f"u{i}"] = [], _pred(f"u{i}", "y", 0.0)
    return gold, preds


def test_the_threshold_abstains_more_where_more_questions_are_unanswerable():
    gold, preds = _mixed()
    # at its own share (2 of 11): abstaining at odds 0 gets 8 + 2 right, answering there 9
    own = best_null_threshold(gold, preds)
    assert [preds[k].answer(own) for k in ("a8", "u0")] == ["", ""]
    # a group at odds 1 of one answerable question (answered right) and four unanswerable ones
    gold["a9"] = ["x"]
    preds["a9"] = _pred("a9", "x", 1.0)
    for i in range(2, 6):
        gold[f"u{i}"] = []
        preds[f"u{i}"] = _pred(f"u{i}", "y", 1.0)
    # at the own share (6 of 16): abstain there (14 right against 13 and 10)
    assert preds["a9"].answer(best_null_threshold(gold, preds)) == ""
    # weighted to a twentieth unanswerable, the two right answers outweigh six abstentions
    low = best_null_threshold(gold, preds, unanswerable_share=0.05)
    assert preds["a9"].answer(low) == "x"
    # and to half unanswerable, answering the confident eight alone
    high = best_null_threshold(gold, preds, unanswerable_share=0.5)
    assert [preds[k].answer(high) for k in ("a8", "a9", "u0")] == ["", "", ""]


def test_integer_weights_fit_as_repeated_questions():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, 60)
    correct = rng.uniform(size=60) < p
    w = rng.integers(1, 4, 60).astype(float)
    rep = np.repeat(np.arange(60), w.astype(int))
    weighted = fit_isotonic(p, correct, w * 60 / w.sum())
    repeated = fit_isotonic(p[rep], correct[rep])
    # the same blocks at the same means (the smoothing counts weights of mean 1 as sizes,
    # so the knots' heights differ from the repeated rows', not their places)
    assert weighted.x == pytest.approx(repeated.x)
    assert expected_calibration_error(p, correct, weights=w) == pytest.approx(
        expected_calibration_error(p[rep], correct[rep])
    )
    # weights of one value change nothing: the blocks' effective sizes are their sizes
    same = fit_isotonic(p, correct, np.full(60, 2.5))
    assert same.x == pytest.approx(fit_isotonic(p, correct).x)
    assert same.y == pytest.approx(fit_isotonic(p, correct).y)
    a = fit_platt(p, correct, w)
    b = fit_platt(p[rep], correct[rep])
    assert (a.a, a.b) == pytest.approx((b.a, b.b), abs=1e-3)


def test_accuracy_and_temperatures_follow_the_weights():
    gold, preds = _mixed()
    ids = list(gold)
    scores = scores_from_predictions(preds, ids, True)
    out = outcomes(gold, preds, ids)
    w = share_weights(np.array([not gold[q] for q in ids]), 0.5)
    # at threshold -1: a0-a7 answered (right), a8 abstained on (wrong), u0 and u1 abstained
    # on (right): 10 of 11; weighted to half unanswerable, (8/9 + 1) / 2
    plain = fit_calibrator(scores, out, -1.0, "temperature")
    weighted = fit_calibrator(scores, out, -1.0, "temperature", w)
    assert plain.fit["accuracy"] == pytest.approx(10 / 11)
    assert weighted.fit["accuracy"] == pytest.approx((8 / 9 + 1) / 2)
    # the temperatures minimize the weighted log-loss: other weights, other temperatures
    correct = returned_correct(scores, out, -1.0)
    assert fit_temperatures(scores, correct, -1.0, w) != fit_temperatures(scores, correct, -1.0)


def _example(qid: str, no: bool, i: int) -> Example:
    ctx = f"word{i} is here"
    answers = () if no else (Answer(f"word{i}", 0),)
    gold = () if no else (f"word{i}",)
    return Example(qid, "what?", ctx, answers, gold, is_impossible=no)


def _noisy() -> tuple[list[Example], dict[str, Prediction]]:
    """A fifth unanswerable; the null odds overlap between the kinds, so where to put the
    threshold depends on how many of each there are."""
    rng = np.random.default_rng(1)
    examples, preds = [], {}
    for i in range(200):
        no = i % 5 == 0
        examples.append(_example(f"q{i}", no, i))
        odds = rng.normal(1.0 if no else -1.0, 1.0)
        nbest = (Candidate(f"word{i}", 0, 1, 5.0), Candidate(f"other{i}", 0, 1, 1.0))
        preds[f"q{i}"] = Prediction(f"q{i}", f"word{i}", 0, 5, 5.0, 0.0, odds, nbest)
    return examples, preds


def test_calibrate_fits_for_the_share_and_records_it():
    examples, preds = _noisy()
    own = calibrate(examples, preds, version_2=True, method="temperature")
    half = calibrate(examples, preds, version_2=True, method="temperature", unanswerable_share=0.5)
    assert half.null_threshold < own.null_threshold  # abstains on more questions
    assert half.fit["unanswerable_share"] == 0.5
    assert half.fit["unanswerable_share_of_questions"] == pytest.approx(0.2)
    assert "unanswerable_share" not in own.fit
    # on a set that really is half unanswerable (the answerable ones thinned out to 40),
    # the threshold fitted for 0.5 on the fifth-unanswerable set scores at least as well
    kept = [e for e in examples if e.is_impossible or int(e.id[1:]) % 4 == 1][:80]
    gold = {e.id: list(e.gold_texts) for e in kept}
    sub = {e.id: preds[e.id] for e in kept}
    assert 0.4 <= np.mean([e.is_impossible for e in kept]) <= 0.6

    def right(t: float) -> float:  # every span is right: the share of right decisions
        return float(np.mean([(sub[k].answer(t) == "") == (not gold[k]) for k in gold]))

    assert right(half.null_threshold) >= right(own.null_threshold)


def test_config_and_command_refuse_a_share_outside_zero_one(tmp_path, capsys):
    with pytest.raises(ConfigError, match="decode.unanswerable_share"):
        validate(load_config(None, ["decode.unanswerable_share=1.5"]))
    cfg = validate(load_config(None, ["decode.unanswerable_share=0.5"]))
    assert cfg.decode.unanswerable_share == 0.5
    with pytest.raises(SystemExit):
        main(["calibrate", str(tmp_path), "--on", "x.json", "--unanswerable-share", "1"])
    assert "not in (0, 1)" in capsys.readouterr().err


def test_a_file_of_one_kind_cannot_be_weighted_and_the_error_names_it():
    examples, preds = _noisy()
    answerable = [e for e in examples if not e.is_impossible]
    with pytest.raises(ValueError, match=r"val\.json: .*none unanswerable.*without"):
        calibrate(answerable, preds, version_2=True, source="val.json", unanswerable_share=0.5)
