"""The answerability verifier: its features, its fit, and that calibrate, evaluate, predict and
serve all apply it before the null threshold."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from structqa.calibration import Calibrator, load_calibration, save_calibration
from structqa.calibration.report import calibrate
from structqa.calibration.verifier import (
    FEATURES,
    Verifier,
    feature_matrix,
    features,
    fit_verifier,
    verifier_kind,
)
from structqa.cli import main
from structqa.data.records import Answer, Example
from structqa.decoding import Candidate, Prediction
from structqa.prediction.predictor import Predictor
from structqa.serving.app import create_app

CONTEXT = "The Broncos won the game in Denver. It rained all day in the mountains."


def _prediction(qid: str, text: str, start: int, null_odds: float = 0.0) -> Prediction:
    cands = (Candidate(text, start, start + len(text), 5.0, 0.7), Candidate("x", 0, 1, 4.0, 0.2))
    return Prediction(qid, text, start, start + len(text), 5.0, 0.0, null_odds, cands)


def _f(values: np.ndarray) -> dict[str, float]:
    return dict(zip(FEATURES, values.tolist(), strict=True))


def test_features_measure_how_the_passage_supports_the_question():
    supported = _f(features("Who won the game?", CONTEXT, _prediction("a", "The Broncos", 0, 1.5)))
    assert supported["null_odds"] == 1.5
    assert supported["top_probability"] == pytest.approx(0.7)
    assert supported["top_margin"] == pytest.approx(0.5)
    # "won", "game": both in the passage, in the answer's sentence
    assert supported["question_words"] == 2 and supported["missing_words"] == 0
    assert supported["question_coverage"] == supported["answer_sentence_coverage"] == 1.0
    assert supported["coverage_gap"] == 0.0 and supported["negation"] == 0.0

    at = CONTEXT.index("all day")
    unsupported = _f(
        features("Who did not win the final game?", CONTEXT, _prediction("b", "all day", at))
    )
    # content words "win", "final", "game": only "game" is in the passage ("won" is not "win")
    assert unsupported["negation"] == 1.0
    assert unsupported["missing_words"] == 2 and unsupported["question_words"] == 3
    assert unsupported["best_sentence_coverage"] == pytest.approx(1 / 3)
    assert unsupported["answer_sentence_coverage"] == 0.0  # the answer's sentence has none
    assert unsupported["coverage_gap"] == pytest.approx(1 / 3)
    assert unsupported["answer_window_coverage"] == pytest.approx(1 / 3)  # its neighbour has one


def test_fit_verifier_learns_a_separating_feature_out_of_fold_and_round_trips():
    rng = np.random.default_rng(0)
    n = 200
    y = rng.random(n) < 0.5
    x = rng.normal(size=(n, len(FEATURES)))
    x[:, 3] = np.where(y, 0.2, 0.8) + rng.normal(scale=0.1, size=n)  # coverage separates
    verifier, oof = fit_verifier(x, y)
    assert verifier.fit["auc_out_of_fold"] > 95  # scored by fits that never saw the question
    assert 35 < verifier.fit["auc_null_odds"] < 65  # column 0 is noise here
    assert oof.shape == (n,) and verifier.coef[3] < 0  # more coverage: less "no answer"
    again = Verifier.from_dict(json.loads(json.dumps(verifier.to_dict())))
    assert np.allclose(again.score(x), verifier.score(x))
    with pytest.raises(ValueError, match="at least 5 answerable and 5 unanswerable"):
        fit_verifier(x[:10], np.array([True] * 8 + [False] * 2))


def _synthetic_v2(n: int = 80) -> tuple[list[Example], dict[str, Prediction]]:
    """Answerable questions ask about the passage's words; unanswerable ones about words it
    lacks. The model's null odds are noise: only the verifier can tell them apart."""
    rng = np.random.default_rng(1)
    examples, predictions = [], {}
    for i in range(n):
        unanswerable = i % 2 == 1
        topic = "volcano eruption" if unanswerable else "Broncos game"
        ex = Example(
            id=f"q{i}",
            question=f"Who watched the {topic} in Denver?",
            context=CONTEXT,
            answers=() if unanswerable else (Answer("The Broncos", 0),),
            gold_texts=() if unanswerable else ("The Broncos",),
            is_impossible=unanswerable,
        )
        examples.append(ex)
        predictions[ex.id] = _prediction(ex.id, "The Broncos", 0, float(rng.normal()))
    return examples, predictions


def test_calibrate_fits_the_threshold_on_the_verifiers_out_of_fold_odds():
    examples, predictions = _synthetic_v2()
    plain = calibrate(examples, predictions, version_2=True)
    assert plain.verifier is None
    cal = calibrate(examples, predictions, version_2=True, verifier=True)
    assert cal.verifier is not None and cal.verifier.fit["auc_out_of_fold"] > 95
    verified = cal.verify(examples, predictions)
    answers = {q: p.answer(cal.null_threshold) for q, p in verified.items()}
    right = sum((answers[ex.id] == "") == ex.is_impossible for ex in examples)
    assert right == len(examples)  # the model's own odds could not do this
    assert Calibrator.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


def _negation_verifier() -> Verifier:
    """Abstains exactly on questions with a negation (log-odds +50 against -50)."""
    coef = [100.0 if name == "negation" else 0.0 for name in FEATURES]
    zeros, ones = [0.0] * len(FEATURES), [1.0] * len(FEATURES)
    return Verifier(list(FEATURES), zeros, ones, coef, -50.0)


@pytest.fixture
def checkpoint(tiny_trained_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_trained_run / "best", tmp_path / "best"))


def test_predict_serve_and_evaluate_apply_the_saved_verifier(checkpoint, shared_data, tmp_path):
    save_calibration(checkpoint, Calibrator("temperature", 0.0, verifier=_negation_verifier()))
    assert load_calibration(checkpoint).verifier == _negation_verifier()
    predictor = Predictor.from_checkpoint(checkpoint, bf16="off")
    context = "The Denver Broncos won the game."
    assert not predictor.predict("Who won?", context).no_answer
    refused = predictor.predict("Who did not win?", context)
    assert refused.no_answer and refused.null_odds == pytest.approx(50.0)
    from fastapi.testclient import TestClient

    app = create_app(predictor)
    with TestClient(app) as client:  # the service's micro-batched path
        assert app.state.service.wait_ready(60), app.state.service.status
        pairs = [("Who won?", context), ("Who did not win?", context)]
        replies = [
            client.post("/v1/answer", json={"question": q, "context": c}).json() for q, c in pairs
        ]
    assert [r["no_answer"] for r in replies] == [False, True]

    # evaluate: the mini fixture as SQuAD 2.0, no question negated, so every one is answered
    data = json.loads((shared_data / "fixtures/squad-v1.1-mini.json").read_text())
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for k, qa in enumerate(paragraph["qas"]):
                qa["is_impossible"] = k == 0
                if k == 0:
                    qa["answers"] = []
    v2 = tmp_path / "v2.json"
    v2.write_text(json.dumps(data))
    out = tmp_path / "eval"
    assert main(["evaluate", str(checkpoint), "--eval", str(v2), "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    odds = json.loads((out / "null_odds.json").read_text())
    assert set(odds.values()) == {-50.0} and metrics["NoAns_f1"] == 0.0


def test_calibrating_from_saved_answers_fits_and_saves_the_verifier(tmp_path):
    """The runner's path (``calibrate_evaluated``, as ``decode.verifier: true`` takes it):
    best/'s saved n-best answers and null odds in, calibration.json with the verifier out."""
    from structqa.calibration.report import calibrate_evaluated

    examples, predictions = _synthetic_v2()
    nbest = {
        q: [
            {"text": c.text, "probability": c.probability, "score": c.score}
            | {"start_char": c.start_char, "end_char": c.end_char}
            for c in p.nbest
        ]
        for q, p in predictions.items()
    }
    (tmp_path / "nbest_predictions.json").write_text(json.dumps(nbest))
    (tmp_path / "null_odds.json").write_text(
        json.dumps({q: p.null_odds for q, p in predictions.items()})
    )
    cal = calibrate_evaluated(tmp_path, examples, True, source="synthetic", verifier=True)
    saved = load_calibration(tmp_path)
    assert saved == cal and saved.verifier is not None
    assert saved.verifier.fit["auc_out_of_fold"] > saved.verifier.fit["auc_null_odds"]


def test_names_numbers_and_span_score_features():
    context = "In 1998 the Denver Broncos won the Super Bowl."
    p = _prediction("c", "the Denver Broncos", context.index("the Denver"))
    got = _f(features("Did the Denver Broncos win in 1998?", context, p))
    assert got["missing_names"] == 0 and got["missing_numbers"] == 0
    assert got["span_score"] == 5.0
    got = _f(features("Did the Chicago Bears win in 2004 or 1998?", context, p))
    assert got["missing_names"] == 2 and got["missing_numbers"] == 1  # Chicago, Bears; 2004


@pytest.mark.parametrize(
    ("value", "version_2", "kind"),
    [
        (True, True, "lexical"),
        (False, True, None),
        ("none", True, None),
        ("lexical", True, "lexical"),
        ("similarity", True, "similarity"),
        ("similarity", False, "similarity"),  # asked for by name: calibrate() warns instead
        ("auto", True, "similarity"),
        ("auto", False, None),  # all answerable: nothing to verify
    ],
)
def test_verifier_kinds(value, version_2, kind):
    assert verifier_kind(value, version_2) == kind


def test_unknown_verifier_kind_and_feature_are_refused():
    with pytest.raises(ValueError, match="give auto, true"):
        verifier_kind("semantic")
    examples, predictions = _synthetic_v2(4)
    with pytest.raises(ValueError, match="unknown verifier features"):
        feature_matrix(examples, predictions, ["null_odds", "answer_type"])
    from structqa.config import ConfigError, load_config, validate

    cfg = load_config(None, ["decode.verifier=semantic"])
    with pytest.raises(ConfigError, match="decode.verifier"):
        validate(cfg)


def test_a_verifier_saved_with_fewer_features_still_applies():
    """A calibration.json from an earlier version (its own feature list) keeps working."""
    examples, predictions = _synthetic_v2()
    old = ["null_odds", "question_coverage", "negation"]
    v = Verifier(old, [0.0] * 3, [1.0] * 3, [0.0, -4.0, 1.0], 2.0)
    x = feature_matrix(examples, predictions, old)
    assert x.shape == (len(examples), 3)
    odds = [p.null_odds for p in v.apply(examples, predictions).values()]
    assert np.allclose(odds, 2.0 - 4.0 * x[:, 1] + x[:, 2])


def test_similarity_features_use_the_shipped_sentence_encoder():
    """The default encoder as shipped: a question about the passage's second sentence is
    closest to that sentence; an unrelated one is far from every sentence."""
    from structqa.calibration.similarity import DEFAULT, SIMILARITY_FEATURES

    names = ["null_odds", *SIMILARITY_FEATURES]
    context = CONTEXT
    at = context.index("The Broncos")
    ex = [
        Example("a", "How was the weather in the mountains?", context, (), (), True),
        Example("b", "Which team won the game in Denver?", context, (), (), False),
        Example("c", "What is the boiling point of mercury?", context, (), (), True),
    ]
    preds = {e.id: _prediction(e.id, "The Broncos", at) for e in ex}
    x = dict(zip("abc", feature_matrix(ex, preds, names, DEFAULT), strict=True))
    sim, own, gap = 1, 2, 3
    assert x["a"][gap] > 0.2  # closest to the rain sentence, the answer is in the other
    assert x["b"][gap] == pytest.approx(0.0) and x["b"][own] > 0.5
    assert x["c"][sim] < x["a"][sim] and x["c"][sim] < x["b"][sim]
    with pytest.raises(ValueError, match="need a sentence encoder"):
        feature_matrix(ex, preds, names)


def test_a_full_embedding_cache_makes_room_without_losing_what_a_call_reads(monkeypatch):
    """Past the cache's size a call cleared it, then looked up texts it had counted as cached
    (a KeyError in serve once the cache filled, and in any fit over more texts)."""
    from structqa.calibration import similarity

    monkeypatch.setattr(similarity, "CACHE_TEXTS", 4)
    from structqa.paths import default_encoder_path

    encoder = similarity.SentenceEncoder(str(default_encoder_path()), cache=True)
    first = encoder(["s1", "s2", "q1"])
    again = encoder(["s1", "s2", "q2", "q3"])  # 3 cached + 2 new > 4
    assert np.allclose(again[:2], first[:2]) and again.shape == (4, first.shape[1])
    assert set(encoder.cache) == {"s1", "s2", "q2", "q3"}


def test_calibrate_fits_and_saves_a_similarity_verifier(tmp_path):
    examples, predictions = _synthetic_v2()
    cal = calibrate(examples, predictions, version_2=True, verifier="similarity")
    assert cal.verifier.encoder == "default" and "similarity_gap" in cal.verifier.names
    assert cal.verifier.fit["auc_out_of_fold"] > 95
    save_calibration(tmp_path, cal)
    again = load_calibration(tmp_path)
    assert again == cal
    verified = again.verify(examples, predictions)
    answers = {q: p.answer(cal.null_threshold) for q, p in verified.items()}
    assert sum((answers[ex.id] == "") == ex.is_impossible for ex in examples) == len(examples)


def test_auto_fits_the_similarity_verifier_only_where_it_helps_and_says_why_not(caplog):
    """decode.verifier's default: the similarity verifier where the questions include enough
    unanswerable ones and it ranks them better out of fold than the model's null odds."""
    examples, predictions = _synthetic_v2()  # 40 of each; the model's null odds are noise
    cal = calibrate(examples, predictions, version_2=True, verifier="auto")
    assert cal.verifier is not None and cal.verifier.encoder == "default"
    assert "verifier_note" not in cal.fit
    # too few of a kind to choose by: the model's own odds, and the calibration says why
    few = calibrate(examples[:30], predictions, version_2=True, verifier="auto")
    assert few.verifier is None and "15 answerable and 15 unanswerable" in few.fit["verifier_note"]
    plain = calibrate(examples[:30], predictions, version_2=True)
    assert (few.null_threshold, few.t_span, few.t_null) == (
        plain.null_threshold,
        plain.t_span,
        plain.t_null,
    )
    # the model already ranks every question right: nothing for a verifier to add
    sure = {
        ex.id: _prediction(ex.id, "The Broncos", 0, 5.0 if ex.is_impossible else -5.0)
        for ex in examples
    }
    kept = calibrate(examples, sure, version_2=True, verifier="auto")
    assert kept.verifier is None and "no better than the model's own" in kept.fit["verifier_note"]
    assert "no better than the model's own" in caplog.text
    # all answerable: nothing to verify, and no warning about it
    caplog.clear()
    answerable = [ex for ex in examples if not ex.is_impossible]
    assert calibrate(answerable, predictions, version_2=False, verifier="auto").verifier is None
    assert "verifier" not in caplog.text
