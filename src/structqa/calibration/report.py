"""Calibration with a checkpoint: fit it on validation predictions, save and load it, score it
(expected calibration error and a reliability diagram) on any evaluated file."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from structqa.calibration.fit import (
    CORRECT_F1,
    ECE_BINS,
    Calibrator,
    expected_calibration_error,
    fit_calibrator,
    outcomes,
    raw_probability,
    reliability_bins,
    returned_correct,
    scores_from_predictions,
)
from structqa.calibration.verifier import (
    Verifier,
    feature_matrix,
    fit_verifier,
    kind_features,
    verifier_kind,
    with_null_odds,
)
from structqa.config import VERIFIER_AUTO
from structqa.data.overlap import passage_key
from structqa.data.records import Example
from structqa.decoding import NEG, Candidate, Prediction
from structqa.evaluation import (
    NULL_ODDS_VERIFIED,
    TUNED_HERE,
    EvalResult,
    best_null_threshold,
    share_weights,
)
from structqa.io import write_json

log = logging.getLogger(__name__)

# decode.verifier auto fits a verifier only on at least this many answerable and this many
# unanswerable validation questions: below it, five folds hold three or fewer of a kind each
# and the out-of-fold comparison that decides is noise (the recipes were measured with 687)
AUTO_MIN_PER_CLASS = 20
#: fewer distinct passages than this under a calibration, and a warning says its fit follows
#: their difficulty (on COVID-QA, a fit on the ~8 articles of a validation slice missed the
#: test articles by 0.12-0.15 ECE, one on ~16 other articles by 0.05-0.08 per fold)
MIN_PASSAGES = 15

CALIBRATION_FILE = "calibration.json"  # in a checkpoint directory, beside metrics.json
RELIABILITY_PNG = "reliability.png"


def calibrate(
    examples: Sequence[Example],
    predictions: Mapping[str, Prediction],
    version_2: bool,
    method: str = "auto",
    source: str = "",
    verifier: bool | str = False,
    unanswerable_share: float | None = None,
    threshold_offset: float = 0.0,
) -> Calibrator:
    """The null threshold (SQuAD 2.0: the F1-best one on these questions) and the probability
    map fitted on ``examples`` (validation questions the model did not train on); with
    ``unanswerable_share`` (SQuAD 2.0), both fitted for questions of which that share is
    unanswerable, the questions weighted to it (:func:`structqa.evaluation.share_weights`). With
    ``verifier`` (SQuAD 2.0 only; True or "lexical", or "similarity"), an answerability
    verifier of that kind is fitted first and the threshold and map are fitted on its
    out-of-fold null odds (:mod:`structqa.calibration.verifier`). "auto" fits the similarity
    one where it has enough questions and ranks them better than the model alone
    (:func:`_fit_verifier`); the calibration's ``fit["verifier_note"]`` says why not.
    ``threshold_offset`` (SQuAD 2.0) is added to the fitted threshold before the probability
    map is fitted: where these questions' passages come from documents the model trained on,
    the threshold that is best on new documents lies elsewhere by a measured amount."""
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    ids = list(gold)
    predictions = with_null_answers(examples, predictions)
    fitted, note = None, ""
    kind = verifier_kind(verifier, version_2)
    if kind and version_2:
        unanswerable = np.array([not gold[q] for q in ids])
        fitted, oof, note = _fit_verifier(
            kind, verifier == VERIFIER_AUTO, examples, predictions, unanswerable
        )
        if fitted is not None:
            predictions = with_null_odds(predictions, ids, oof)
    elif kind:
        log.warning("no answerability verifier: these questions are all answerable (SQuAD 1.1)")
    scores = scores_from_predictions(predictions, ids, version_2)
    threshold, weights = None, None
    unanswerable = np.array([not gold[q] for q in ids])
    if version_2:
        try:
            weights = share_weights(unanswerable, unanswerable_share)
        except ValueError as err:
            raise ValueError(
                f"{source or 'the validation questions'}: {err}; calibrate without "
                "--unanswerable-share (decode.unanswerable_share: null)"
            ) from None
        best = best_null_threshold(gold, predictions, unanswerable_share)
        threshold = midway(best, scores.null_odds) + threshold_offset
    elif unanswerable_share is not None:
        log.warning("no unanswerable share to fit for: these questions are all answerable")
    if not version_2 and threshold_offset:
        log.warning(
            "no threshold to move by %+g: these questions are all answerable", threshold_offset
        )
    cal = fit_calibrator(scores, outcomes(gold, predictions, ids), threshold, method, weights)
    cal = dataclasses.replace(cal, verifier=fitted)
    if version_2 and threshold_offset:
        cal.fit["threshold_offset"] = threshold_offset
    if version_2 and unanswerable_share is not None:
        cal.fit["unanswerable_share"] = unanswerable_share
        cal.fit["unanswerable_share_of_questions"] = float(unanswerable.mean())
    cal.fit["source"] = source
    cal.fit["passages"] = len({passage_key(ex.context) for ex in examples})
    if cal.fit["passages"] < MIN_PASSAGES:
        log.warning(
            "calibration on the questions of only %d passage(s) (%s): its probabilities follow "
            "how hard those passages are; calibrate on labelled questions spread over %d or "
            "more documents (`structqa calibrate CHECKPOINT --on FILE`)",
            cal.fit["passages"],
            source or "the given examples",
            MIN_PASSAGES,
        )
    if note:
        cal.fit["verifier_note"] = note
    log.info(
        "calibration on %d questions of %s: %s, threshold %s, T_span %.3g, T_null %.3g, "
        "ECE %.4f (uncalibrated %.4f)",
        len(ids),
        source or "the given examples",
        cal.method,
        threshold,
        cal.t_span,
        cal.t_null,
        cal.fit["ece"],
        cal.fit["ece_uncalibrated"],
    )
    return cal


def _fit_verifier(
    kind: str,
    auto: bool,
    examples: Sequence[Example],
    predictions: Mapping[str, Prediction],
    unanswerable: np.ndarray,
) -> tuple[Verifier | None, np.ndarray, str]:
    """The ``kind`` verifier fitted on these questions and its out-of-fold null odds. Chosen
    by ``auto`` (decode.verifier's default), it is kept only where there are at least
    :data:`AUTO_MIN_PER_CLASS` questions of each kind and it ranks them better out of fold than
    the model's own null odds do; else (None, no odds, why not: also logged)."""
    n_unanswerable = int(unanswerable.sum())
    n_answerable = len(unanswerable) - n_unanswerable
    if auto and min(n_answerable, n_unanswerable) < AUTO_MIN_PER_CLASS:
        return _declined(
            f"the validation questions have {n_answerable} answerable and {n_unanswerable} "
            f"unanswerable; it needs {AUTO_MIN_PER_CLASS} of each (a larger data.validation "
            "gives it more, decode.verifier=none says you want none)"
        )
    names, encoder = kind_features(kind)
    x = feature_matrix(examples, predictions, names, encoder)
    fitted, oof = fit_verifier(x, unanswerable, names=names, encoder=encoder)
    auc, own = fitted.fit["auc_out_of_fold"], fitted.fit["auc_null_odds"]
    log.info(
        "%s answerability verifier on %d questions: no-answer AUC %.1f out of fold "
        "(the model's null odds: %.1f)",
        kind,
        len(unanswerable),
        auc,
        own,
    )
    if auto and own is not None and auc <= own:
        return _declined(
            f"it ranks these questions no better than the model's own null odds (no-answer "
            f"AUC {auc:.1f} out of fold against {own:.1f})"
        )
    return fitted, oof, ""


def _declined(why: str) -> tuple[None, np.ndarray, str]:
    note = f"no answerability verifier (decode.verifier auto): {why}"
    log.warning(note)
    return None, np.empty(0), note


def midway(threshold: float, odds: np.ndarray) -> float:
    """The threshold moved half-way to the next larger null odds: the same answers on the
    questions it was fitted on, but not on the edge of the last question it answers (whose
    "no answer" probability would otherwise be exactly 1/2)."""
    above = odds[odds > threshold]
    return float((threshold + above.min()) / 2) if len(above) else threshold


def with_null_answers(
    examples: Sequence[Example], predictions: Mapping[str, Prediction]
) -> dict[str, Prediction]:
    """``predictions`` with a span-less prediction for every example that has none (its
    windows all vanished in featurization), as evaluation scores it."""
    out = {ex.id: Prediction(ex.id, "", -1, -1, 0.0, 0.0, 0.0, ()) for ex in examples}
    out.update(predictions)
    return out


def predictions_from_files(directory: str | Path) -> dict[str, Prediction]:
    """The predictions an evaluation wrote (nbest_predictions.json and null_odds.json, as
    ``evaluation.write_outputs`` writes them into best/), enough to fit a calibration
    without running the model again."""
    directory = Path(directory)
    nbest = json.loads((directory / "nbest_predictions.json").read_text(encoding="utf-8"))
    odds = json.loads((directory / "null_odds.json").read_text(encoding="utf-8"))
    out = {}
    for qid, rows in nbest.items():
        cands = tuple(
            Candidate(r["text"], r["start_char"], r["end_char"], r["score"], r["probability"])
            for r in rows
        )
        # a question with no span has the decoder's sentinel score, as when answered live
        # (0.0 here made the verifier's span_score feature differ between fit and use)
        top = cands[0] if cands else Candidate("", -1, -1, NEG)
        out[qid] = Prediction(
            qid, top.text, top.start_char, top.end_char, top.score, 0.0, odds[qid], cands
        )
    return out


def calibrate_evaluated(
    directory: str | Path,
    examples: Sequence[Example],
    version_2: bool,
    source: str,
    verifier: bool | str = False,
    unanswerable_share: float | None = None,
) -> Calibrator:
    """Fit and save the calibration of a checkpoint whose evaluation files (best/'s) answer
    ``examples``, validation questions (the experiment runner's validation split)."""
    predictions = predictions_from_files(directory)
    cal = calibrate(
        examples,
        predictions,
        version_2,
        source=source,
        verifier=verifier,
        unanswerable_share=unanswerable_share,
    )
    save_calibration(directory, cal)
    return cal


def save_calibration(checkpoint: str | Path, cal: Calibrator) -> Path:
    """Write ``calibration.json`` into a checkpoint directory (atomically). A checkpoint with a
    manifest is verified first (an altered file is refused, not blessed) and sealed again
    with the new file listed, so that loading checks it too. The export inside the
    checkpoint (``CHECKPOINT/onnx``, which carries a copy so that it answers alone) gets the
    new calibration too: its old copy once answered with the old threshold and map wherever
    the export was loaded by its own path."""
    from structqa.runtimes.onnx_model import EXPORT_FILE
    from structqa.runtimes.select import DEFAULT_EXPORT_DIR

    directory = Path(checkpoint)
    path = _write_sealed(directory, cal)
    export = directory / DEFAULT_EXPORT_DIR
    if (export / EXPORT_FILE).is_file():
        _write_sealed(export, cal)
        log.info("%s: its calibration renewed too", export)
    return path


def stale_calibration(checkpoint: str | Path) -> str | None:
    """Why the checkpoint's (or its export's) calibration.json is not the one its manifest
    records, which a ``structqa calibrate`` stopped between writing and recording it leaves;
    None when both match. Such a checkpoint refuses to load, but for the calibrate that
    writes it again (:func:`structqa.manifest.rewriting`)."""
    from structqa.manifest import later_file_problem
    from structqa.runtimes.select import DEFAULT_EXPORT_DIR

    for directory in (Path(checkpoint), Path(checkpoint) / DEFAULT_EXPORT_DIR):
        if problem := later_file_problem(directory, CALIBRATION_FILE):
            return f"{directory / CALIBRATION_FILE} {problem}"
    return None


def _write_sealed(directory: Path, cal: Calibrator) -> Path:
    from structqa.manifest import MANIFEST, seal_file, verify_manifest

    sealed = (directory / MANIFEST).is_file()
    if sealed:  # (the calibration itself is being replaced: a stopped write is mended here)
        verify_manifest(directory, rewriting=CALIBRATION_FILE)
    path = directory / CALIBRATION_FILE
    write_json(path, cal.to_dict())
    if sealed:
        seal_file(directory, CALIBRATION_FILE)
    return path


def load_calibration(checkpoint: str | Path) -> Calibrator | None:
    """The checkpoint's calibration, or None when it has none (never fitted)."""
    path = Path(checkpoint) / CALIBRATION_FILE
    if not path.is_file():
        return None
    try:
        return Calibrator.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as err:
        raise ValueError(
            f"{path}: not a calibration file ({err}); fit it again with `structqa calibrate`"
        ) from None


def calibration_metrics(
    examples: Sequence[Example],
    predictions: Mapping[str, Prediction],
    version_2: bool,
    threshold: float | None,
    cal: Calibrator | None,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """``ece`` (of the probability a Predictor returns: calibrated when ``cal`` is given) and
    ``ece_uncalibrated`` on these questions at ``threshold``; with ``out_dir``, the
    reliability diagram (reliability.png) and its bins (reliability.json) written there."""
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    ids = list(gold)
    scores = scores_from_predictions(predictions, ids, version_2)
    correct = returned_correct(scores, outcomes(gold, predictions, ids), threshold)
    raw = raw_probability(scores, threshold)
    returned = cal.probability(scores) if cal is not None else raw
    out: dict[str, Any] = {
        "ece": expected_calibration_error(returned, correct),
        "ece_uncalibrated": expected_calibration_error(raw, correct),
        "calibrated": cal is not None,
        "accuracy_returned": float(correct.mean()),
    }
    if out_dir is not None:
        out_dir = Path(out_dir)
        curves = {"uncalibrated": raw}
        if cal is not None:
            curves[f"calibrated ({cal.method})"] = returned
        plot_reliability(out_dir / RELIABILITY_PNG, curves, correct)
        write_json(
            out_dir / "reliability.json",
            {
                "definition": f"correct: F1 >= {CORRECT_F1} (or 'no answer' to an unanswerable "
                "question)",
                "bins": ECE_BINS,
                "curves": {k: reliability_bins(p, correct) for k, p in curves.items()},
            },
        )
    return out


def plot_reliability(path: Path, curves: Mapping[str, np.ndarray], correct: np.ndarray) -> None:
    """Accuracy against mean confidence per bin (one line per curve, the diagonal is perfect
    calibration) over a histogram of the returned probabilities."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(5, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    top.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect")
    for label, p in curves.items():
        rows = reliability_bins(p, correct)
        ece = expected_calibration_error(p, correct)
        top.plot(
            [r["confidence"] for r in rows],
            [r["accuracy"] for r in rows],
            marker="o",
            label=f"{label}: ECE {ece:.3f}",
        )
        bottom.hist(p, bins=ECE_BINS, range=(0, 1), alpha=0.5, label=label)
    top.set_ylabel("accuracy (returned answer correct)")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.legend(loc="upper left", fontsize=8)
    top.set_title(f"reliability ({len(correct)} questions, {ECE_BINS} bins)", fontsize=10)
    bottom.set_xlabel("returned probability")
    bottom.set_ylabel("questions")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def calibration_report(
    result: EvalResult,
    examples: Sequence[Example],
    version_2: bool,
    cal: Calibrator | None,
    out_dir: str | Path,
    threshold_source: str | None = None,
) -> dict[str, Any]:
    """What ``structqa evaluate`` adds to metrics.json: ``ece``, ``ece_uncalibrated``, where
    the null threshold came from (``threshold_source``, :func:`scoring_threshold`'s; else
    the calibration's or this file); reliability.png and reliability.json go to ``out_dir``."""
    if version_2 and cal is not None and not cal.decides_threshold:
        # fitted on answerable questions before --answer-all existed: the Predictor drops its
        # map (it abstains at metrics.json's threshold), so its probabilities are not served
        log.warning(
            "the calibration has no no-answer threshold (fitted on answerable questions only): "
            "refit it with `structqa calibrate` on questions that include unanswerable ones, "
            "or with --answer-all"
        )
        cal = None
    if cal is None:
        log.warning(
            "no calibration.json in the checkpoint: probabilities are uncalibrated%s; fit them "
            "on validation questions with `structqa calibrate`",
            " and the null threshold is tuned on the evaluated file itself"
            if version_2 and threshold_source in (None, TUNED_HERE)
            else "",
        )
    report = calibration_metrics(
        examples, result.predictions, version_2, result.null_threshold, cal, out_dir
    )
    if version_2:
        report["null_threshold_source"] = threshold_source or (
            f"validation ({cal.fit.get('source', '')})" if cal is not None else TUNED_HERE
        )
    return report


def calibrate_after_training(cfg: Any) -> Calibrator | None:
    """What ``structqa train`` and the quickstart do once training finished: fit the no-answer
    threshold and the answer probabilities of ``best/`` on the validation questions that
    chose it (its saved n-best answers: no model run) and save them in ``best/``. None when
    best/ was chosen on data.eval (``data.validation: none``): that file may be the test
    file, and fitting on it would leak it into the checkpoint."""
    from structqa.training.data import load_validation_examples

    best = Path(cfg.train.output_dir) / "best"
    if cfg.data.validation is None or not (best / "nbest_predictions.json").is_file():
        return None
    examples, v2 = load_validation_examples(cfg)
    source = f"validation questions of {cfg.data.train} ({cfg.data.validation})"
    return calibrate_evaluated(
        best,
        examples,
        v2,
        source=source,
        verifier=cfg.decode.verifier,
        unanswerable_share=cfg.decode.unanswerable_share,
    )


def calibration_on_test(cfg: Any, cal: Calibrator) -> dict[str, Any]:
    """``ece`` and ``ece_uncalibrated`` (see :func:`calibration_metrics`) of best/'s answers to
    the test file, as the trainer scored it once into best/eval/ (at the threshold recorded
    there), from the files it wrote there (no model run); the reliability diagram is written
    beside them. A SQuAD 2.0 test scored without ``cal`` (its threshold or its verifier's
    odds: a run tested before it calibrated) is an error saying how to score it again."""
    from structqa.training.data import load_eval_examples
    from structqa.training.heldout import TEST_DIR

    test = Path(cfg.train.output_dir) / "best" / TEST_DIR
    examples, v2 = load_eval_examples(cfg)
    recorded = json.loads((test / "metrics.json").read_text(encoding="utf-8"))
    threshold = recorded.get("null_threshold")
    if v2 and cal.null_threshold is not None:
        verified = bool(recorded.get(NULL_ODDS_VERIFIED)) == (cal.verifier is not None)
        if threshold is None or abs(threshold - cal.null_threshold) > 1e-9 or not verified:
            raise ValueError(
                f"{test}: the test was scored without best/'s calibration (null threshold "
                f"{threshold} against the calibration's {cal.null_threshold}, verifier odds "
                f"{recorded.get(NULL_ODDS_VERIFIED)}); delete {test} and run again to score it "
                f"with the calibration"
            )
    predictions = saved_predictions(test, examples, str(cfg.data.eval))
    return calibration_metrics(examples, predictions, v2, threshold, cal, test)


def saved_predictions(
    directory: Path, examples: Sequence[Example], source: str
) -> dict[str, Prediction]:
    """The answers saved in ``directory`` (an evaluation's output) to ``examples``, each of
    which must have one."""
    for name in ("nbest_predictions.json", "null_odds.json"):
        if not (directory / name).is_file():
            raise FileNotFoundError(
                f"{directory / name} is missing: give the directory that `structqa evaluate "
                f"CHECKPOINT --eval FILE --out DIR` wrote"
            )
    saved = predictions_from_files(directory)
    missing = [ex.id for ex in examples if ex.id not in saved]
    if missing:
        raise ValueError(
            f"{directory / 'nbest_predictions.json'} has no answer to question {missing[0]!r} "
            f"of {source} ({len(missing)} of {len(examples)} missing): evaluate those "
            f"questions with this checkpoint into that directory first"
        )
    return {ex.id: saved[ex.id] for ex in examples}


def require_models_own_odds(directory: Path, version_2: bool, verifier: bool) -> None:
    """A calibration is fitted on the model's own null odds: refuse the SQuAD 2.0 answers in
    ``directory`` whose odds a verifier re-scored (its metrics.json says so), or, where the
    checkpoint's calibration has a verifier (``verifier``), that do not say whose they are
    (written before the flag existed)."""
    metrics = directory / "metrics.json"
    recorded = json.loads(metrics.read_text(encoding="utf-8")) if metrics.is_file() else {}
    if version_2 and recorded.get(NULL_ODDS_VERIFIED, verifier):
        raise ValueError(
            f"{directory}: its null odds may be the verifier's (metrics.json: "
            f"{NULL_ODDS_VERIFIED} is {recorded.get(NULL_ODDS_VERIFIED, 'not recorded')}), and "
            f"a calibration is fitted on the model's own; evaluate again with a copy of the "
            f"checkpoint without calibration.json, or answer the questions anew"
        )


class CalibrateOnce:
    """``calibrate_after_training`` as the training commands call it: passed to
    ``training.loop.run`` (which fits before it scores a test file), then ``done(cfg)`` once the
    run is over, which returns that fit, or fits now when the run did not (no test file, or a
    run resumed after its test)."""

    def __init__(self) -> None:
        self.fitted = False
        self.calibrator: Calibrator | None = None

    def __call__(self, cfg: Any) -> Calibrator | None:
        self.calibrator, self.fitted = calibrate_after_training(cfg), True
        return self.calibrator

    def done(self, cfg: Any) -> Calibrator | None:
        return self.calibrator if self.fitted else self(cfg)
