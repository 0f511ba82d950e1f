"""Evaluate a model on examples: predictions, official metrics and the output files."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeGuard

import numpy as np

from structqa.data.records import Example
from structqa.decoding import DecodeConfig, Prediction, SpanCollector
from structqa.features.squad import Feature
from structqa.io import read_json, write_json
from structqa.metrics.squad import raw_scores_v2, squad_v1, squad_v2

#: new null odds for predictions, e.g. :meth:`structqa.calibration.fit.Calibrator.verify`
Rescore = Callable[[Sequence[Example], Mapping[str, Prediction]], Mapping[str, Prediction]]

log = logging.getLogger(__name__)


#: metrics.json key: whether the null odds saved beside it are a verifier's, not the model's
NULL_ODDS_VERIFIED = "null_odds_verified"


@dataclass
class EvalResult:
    metrics: dict[str, float]
    predictions: dict[str, Prediction]
    null_threshold: float | None  # None for SQuAD 1.1-style (always answer)
    null_odds_verified: bool = False  # the predictions' null odds are a verifier's
    threshold_given: bool = False  # scored at a threshold fitted elsewhere, not tuned here

    @property
    def f1(self) -> float:
        """F1 at the threshold the answers were scored at: the given one (a test file scored
        at validation's: its own best_f1 was tuned on it), else the best on this file."""
        if self.threshold_given:
            return self.metrics.get("f1", 0.0)
        return self.metrics.get("best_f1", self.metrics.get("f1", 0.0))

    def answers(self) -> dict[str, str]:
        return {k: p.answer(self.null_threshold) for k, p in self.predictions.items()}

    def metrics_with_threshold(self) -> dict[str, Any]:
        """metrics.json's content: the metrics, the null threshold a Predictor applies and,
        where a verifier re-scored the null odds saved beside them, ``null_odds_verified``
        (calibrate reads it; absent, the odds are the model's own)."""
        verified = {NULL_ODDS_VERIFIED: True} if self.null_odds_verified else {}
        return {**self.metrics, "null_threshold": self.null_threshold, **verified}


def share_weights(unanswerable: np.ndarray, share: float | None) -> np.ndarray:
    """(Q,) question weights (mean 1) under which the unanswerable questions make up ``share``
    of the set (None: their own share, all weights 1). A threshold or probability fitted with
    them is fitted for questions of that mix: the F1-best threshold moves with the share of
    unanswerable questions, so one fitted where a fifth are unanswerable abstains too little
    where half are."""
    unanswerable = np.asarray(unanswerable, dtype=bool)
    n, u = len(unanswerable), int(unanswerable.sum())
    if share is None:
        return np.ones(n)
    if not 0.0 < share < 1.0:
        raise ValueError(f"the share of unanswerable questions must be in (0, 1), got {share}")
    if u == 0 or u == n:
        raise ValueError(
            f"weighting to an unanswerable share of {share:g} needs answerable and unanswerable "
            f"questions; these {n} are {'all' if u else 'none'} unanswerable"
        )
    return np.where(unanswerable, share * n / u, (1.0 - share) * n / (n - u))


def best_null_threshold(
    gold: dict[str, list[str]],
    predictions: dict[str, Prediction],
    unanswerable_share: float | None = None,
) -> float:
    """The null-odds threshold (answer "" where null_odds > it) with the best F1 on this set
    (with ``unanswerable_share``: on this set weighted to that share, :func:`share_weights`).

    The official search (``best_f1_thresh``) is not used for this: it reports 0.0 for its
    "no answer everywhere" start, which assumes probabilities in [0, 1], and it scores states
    in the middle of a run of tied values that no threshold can produce. Here every candidate
    is a real threshold: below all values, or at the end of each group of equal values.
    """
    ids = list(gold)
    _, f1_raw = raw_scores_v2(gold, {k: predictions[k].text for k in ids})
    odds = np.array([predictions[k].null_odds for k in ids])
    weights = share_weights(np.array([not gold[k] for k in ids]), unanswerable_share)
    answer_f1 = np.array([f1_raw[k] for k in ids]) * weights
    # "" is right iff there is no answer
    abstain_f1 = np.array([0.0 if gold[k] else 1.0 for k in ids]) * weights
    order = np.argsort(odds, kind="stable")
    odds, answer_f1, abstain_f1 = odds[order], answer_f1[order], abstain_f1[order]
    # answering the j lowest-odds questions and abstaining on the rest, for every j
    answered = np.concatenate([[0.0], np.cumsum(answer_f1)])
    abstained = np.concatenate([np.cumsum(abstain_f1[::-1])[::-1], [0.0]])
    total = answered + abstained  # (n + 1,)
    # only a j at a boundary between groups of equal odds is a threshold's outcome
    realizable = np.concatenate([[True], odds[1:] != odds[:-1], [True]])  # (n + 1,)
    j = int(np.argmax(np.where(realizable, total, -np.inf)))
    return float(odds[0] - 1.0) if j == 0 else float(odds[j - 1])


#: a null threshold under which every question is answered, for scoring SQuAD 2.0 where the
#: calibration answers everything (fitted on answerable questions only); scored results
#: record it as None, as the Predictor applies it
ANSWER_ALL = math.inf


def score_predictions(
    examples: Sequence[Example],
    predictions: dict[str, Prediction],
    version_2: bool,
    null_threshold: float | None = None,
) -> EvalResult:
    """SQuAD v1.1 metrics (also MRQA), or v2.0 with the null threshold tuned on this set.

    For SQuAD 2.0, ``exact``, ``f1`` and the ``HasAns_*``/``NoAns_*`` keys score the answers
    as written to predictions.json ("" where the null odds exceed the tuned threshold), so
    ``structqa score DATA predictions.json`` gives the same numbers; ``best_*`` are the
    official script's threshold search over the spans and null_odds.json. A given
    ``null_threshold`` (one fitted on validation data) is applied instead of tuning one here.
    (The official
    ``exact``/``f1`` at its default threshold 1.0 are not reported: the null odds are logit
    differences, not probabilities, so a threshold of 1.0 means nothing for them.)"""
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    if not version_2:
        answers = {k: p.text for k, p in predictions.items()}
        return EvalResult(squad_v1(gold, answers), predictions, None)
    na = {k: p.null_odds for k, p in predictions.items()}
    texts = {k: p.text for k, p in predictions.items()}
    official = squad_v2(gold, texts, na_probs=na)
    thresh = best_null_threshold(gold, predictions) if null_threshold is None else null_threshold
    final = {k: p.answer(thresh) for k, p in predictions.items()}
    metrics = {
        **squad_v2(gold, final),
        **{k: v for k, v in official.items() if k.startswith("best_")},
        **answerability_metrics(gold, predictions),
    }
    given = null_threshold is not None
    return EvalResult(metrics, predictions, None if thresh == ANSWER_ALL else thresh, False, given)


def answerability_metrics(
    gold: dict[str, list[str]], predictions: dict[str, Prediction]
) -> dict[str, float]:
    """Threshold-free diagnostics of a SQuAD 2.0 model: ``NoAns_auc`` (percent), the chance that
    an unanswerable question gets higher null odds than an answerable one (the Mann-Whitney
    U statistic over the two groups; 50 = no separation), and ``forced_HasAns_f1``, the F1 of
    the best non-empty span on the answerable questions (abstention taken out)."""
    from scipy.stats import mannwhitneyu

    ids = [k for k in gold if k in predictions]
    has = [predictions[k].null_odds for k in ids if gold[k]]
    no = [predictions[k].null_odds for k in ids if not gold[k]]
    out: dict[str, float] = {}
    if has and no:
        out["NoAns_auc"] = 100 * float(mannwhitneyu(no, has).statistic) / (len(no) * len(has))
    answerable = {k: gold[k] for k in ids if gold[k]}
    if answerable:
        _, f1 = raw_scores_v2(answerable, {k: predictions[k].text for k in answerable})
        out["forced_HasAns_f1"] = 100 * float(np.mean([f1[k] for k in answerable]))
    return out


def write_outputs(result: EvalResult, out_dir: str | Path) -> None:
    """predictions.json (official format), nbest_predictions.json, null_odds.json, metrics.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "predictions.json", result.answers())
    write_json(
        out / "nbest_predictions.json",
        {
            k: [
                {
                    "text": c.text,
                    "probability": c.probability,
                    "score": c.score,
                    "start_char": c.start_char,
                    "end_char": c.end_char,
                }
                for c in p.nbest
            ]
            for k, p in result.predictions.items()
        },
    )
    write_json(out / "null_odds.json", {k: p.null_odds for k, p in result.predictions.items()})
    write_json(out / "metrics.json", result.metrics_with_threshold())


def evaluate_model(
    model,
    examples: Sequence[Example],
    features: Sequence[Feature],
    decode: DecodeConfig,
    version_2: bool,
    batch_size: int = 64,
    bf16: bool = False,
    progress=None,
    null_threshold: float | None = None,
    rescore: Rescore | None = None,
) -> EvalResult:
    """Answers and metrics; SQuAD 2.0 at ``null_threshold`` when given (one fitted on
    validation data), else at the threshold with the best F1 on these examples. ``rescore``
    replaces the predictions' null odds before scoring (a calibration's verifier)."""
    from structqa.inference import run_inference

    collector = run_inference(model, features, decode, batch_size, bf16, progress=progress)
    return score_collector(collector, examples, features, version_2, null_threshold, rescore)


def score_collector(
    collector: SpanCollector,
    examples: Sequence[Example],
    features: Sequence[Feature],
    version_2: bool,
    null_threshold: float | None = None,
    rescore: Rescore | None = None,
) -> EvalResult:
    """Answers and metrics from the windows' collected spans."""
    predictions = collector.predictions(examples, features)
    for ex in examples:  # an example whose windows all vanished still gets a (null) answer
        if ex.id not in predictions:
            predictions[ex.id] = Prediction(ex.id, "", -1, -1, 0.0, 0.0, 0.0, ())
    if rescore is not None:
        predictions = dict(rescore(examples, predictions))
    return score_predictions(examples, predictions, version_2, null_threshold)


class FittedThreshold(Protocol):
    """What the threshold rules read of a calibration (:class:`structqa.calibration.Calibrator`)."""

    null_threshold: float | None
    fit: dict[str, Any]

    @property
    def answers_all(self) -> bool: ...

    @property
    def decides_threshold(self) -> bool: ...


# The no-answer threshold a checkpoint answers at: the same for ``predict``, ``serve``,
# ``evaluate``, ``calibrate`` and the test scored after training.

#: ``null_threshold_source`` of a score whose threshold was tuned on the scored file itself
TUNED_HERE = "this file"


def scoring_threshold(
    checkpoint: str | Path, cal: FittedThreshold | None
) -> tuple[float | None, str]:
    """The no-answer threshold a SQuAD 2.0 test file is scored at, and where it comes from:
    the one ``predict`` answers at (:func:`saved_threshold`), :data:`ANSWER_ALL` where that is
    "answer every question" (a checkpoint chosen on answerable questions, or calibrated with
    ``--answer-all``); None (:data:`TUNED_HERE`) only where the checkpoint has neither a
    calibration nor an evaluation on record: then it is tuned on the scored file itself."""
    if cal is not None and cal.answers_all:
        return ANSWER_ALL, "none: the calibration answers every question (--answer-all)"
    if cal is not None and cal.decides_threshold:
        return cal.null_threshold, f"validation ({cal.fit.get('source', '')})"
    metrics = Path(checkpoint) / "metrics.json"
    saved = read_json(metrics).get("null_threshold") if metrics.is_file() else None
    if saved is not None:
        return float(saved), f"the checkpoint's last evaluation ({metrics})"
    if cal is not None or metrics.is_file():
        return ANSWER_ALL, "none: chosen on answerable questions, it answers every question"
    return None, TUNED_HERE


def decides(cal: FittedThreshold | None) -> TypeGuard[FittedThreshold]:
    """Whether ``cal`` is there and its threshold (and so its verifier) is the one answered at."""
    return cal is not None and cal.decides_threshold


def saved_threshold(checkpoint: str | Path, cal: FittedThreshold | None) -> float | None:
    """The no-answer threshold ``checkpoint`` answers at with its calibration ``cal``: the
    calibration's where it decides (:attr:`Calibrator.decides_threshold`), else the one tuned
    at its last evaluation (metrics.json); None: it answers every question."""
    if cal is not None and cal.decides_threshold:
        return cal.null_threshold
    metrics = Path(checkpoint) / "metrics.json"
    return read_json(metrics).get("null_threshold") if metrics.is_file() else None
