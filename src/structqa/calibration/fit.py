"""What ``probability`` means, and fitting it: a null threshold, temperatures, a Platt or an
isotonic map.

**Definition.** The probability of an answer is the chance that the answer returned for the
question, "no answer" included, is *correct*: a text is correct when the question is
answerable and its token F1 (SQuAD normalization, best over the gold answers) is at least
:data:`CORRECT_F1`; "no answer" is correct when the question is unanswerable.

**The raw probability** of a prediction (``structqa.decoding.Prediction``) factorizes into
"is there an answer" and "is it this span":

- ``share(T_span)``: the top span's softmax share among the n-best span scores at temperature
  ``T_span`` (the n-best distinct texts, over every window of the question);
- SQuAD 2.0 only: ``p_null = sigmoid((null_odds - threshold) / T_null)``, the chance of "no
  answer"; the model abstains exactly when ``p_null > 1/2`` (``null_odds > threshold``);
- the returned answer's probability: ``p_null`` when it abstains, else ``(1 - p_null) x share``.

At ``T_span = T_null = 1`` that is the *uncalibrated* probability (on SQuAD 1.1, the n-best
share ``predict`` returned before calibration existed). A :class:`Calibrator` holds the null
threshold (the F1-best one on the validation questions), the two temperatures (fitted by the
binary log-loss of "correct" on the same questions) and optionally a map applied after them:
Platt scaling (``sigmoid(a logit(p) + b)``, by the same log-loss) or an isotonic map
(pool-adjacent-violators, piecewise linear between its knots, each block's accuracy
smoothed as (correct + 1) / (size + 2) so that no answer is returned as certain).
``method="auto"`` keeps the one of the three with the lowest expected calibration error on
held-back halves of the validation questions (two-fold, split by question id).

**Expected calibration error** (:func:`expected_calibration_error`): :data:`ECE_BINS`
equal-width confidence bins; the question-weighted mean of |accuracy - mean confidence| per
bin. Every function here takes plain arrays: no model, no files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize

from structqa.calibration.verifier import Verifier
from structqa.data.records import Example
from structqa.decoding import Prediction
from structqa.metrics.squad import raw_scores_v2

CORRECT_F1 = 0.5  # a returned text with token F1 >= this against a gold answer is correct
ECE_BINS = 15
MAPS = ("temperature", "platt", "isotonic")
METHODS = (*MAPS, "auto")
_T_RANGE = (1e-2, 1e2)  # temperatures are searched (in log space) inside this range


@dataclass(frozen=True)
class Scores:
    """What the probability of each question's answer is computed from (Q questions)."""

    ids: list[str]
    gaps: np.ndarray  # (Q, K) n-best span scores minus the best one (<= 0), -inf padded
    null_odds: np.ndarray  # (Q,)
    has_span: np.ndarray  # (Q,) bool: the model proposed at least one span
    version_2: bool

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Outcomes:
    """Gold facts per question: is it answerable, and is the model's best span right."""

    unanswerable: np.ndarray  # (Q,) bool
    span_correct: np.ndarray  # (Q,) bool: answerable, and the best span reaches CORRECT_F1
    span_f1: np.ndarray  # (Q,) the best span's F1 (0-1), 0 on unanswerable questions


def scores_from_predictions(
    predictions: Mapping[str, Prediction], ids: Sequence[str], version_2: bool
) -> Scores:
    """The n-best gaps and null odds of ``predictions`` for the questions ``ids`` (each must
    have a prediction: a missing one is an error naming it)."""
    missing = [q for q in ids if q not in predictions]
    if missing:
        raise ValueError(f"no prediction for question {missing[0]!r} ({len(missing)} missing)")
    lists = [[c.score for c in predictions[q].nbest] for q in ids]
    k = max((len(s) for s in lists), default=1) or 1
    gaps = np.full((len(ids), k), -np.inf)
    for row, s in enumerate(lists):
        if s:
            gaps[row, : len(s)] = np.asarray(s) - s[0]
    has_span = np.array([bool(s) for s in lists])
    odds = np.array([predictions[q].null_odds for q in ids], dtype=float)
    return Scores(list(ids), gaps, odds, has_span, version_2)


def outcomes(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, Prediction], ids: Sequence[str]
) -> Outcomes:
    """Answerability and best-span correctness of the questions ``ids`` (gold texts per id,
    empty for an unanswerable question)."""
    sub = {q: list(gold[q]) for q in ids}
    _, f1 = raw_scores_v2(sub, {q: predictions[q].text for q in ids})
    unanswerable = np.array([not sub[q] for q in ids])
    span_f1 = np.array([0.0 if not sub[q] else f1[q] for q in ids])
    return Outcomes(unanswerable, (~unanswerable) & (span_f1 >= CORRECT_F1), span_f1)


def abstains(scores: Scores, threshold: float | None) -> np.ndarray:
    """(Q,) bool: the returned answer is "no answer" (above the threshold, or no span)."""
    out = ~scores.has_span
    if scores.version_2 and threshold is not None:
        out = out | (scores.null_odds > threshold)
    return out


def returned_correct(scores: Scores, gold: Outcomes, threshold: float | None) -> np.ndarray:
    """(Q,) bool: the returned answer is correct (see the module's definition)."""
    off = abstains(scores, threshold)
    return np.where(off, gold.unanswerable, gold.span_correct)


def raw_probability(
    scores: Scores, threshold: float | None, t_span: float = 1.0, t_null: float = 1.0
) -> np.ndarray:
    """(Q,) the returned answer's probability before any isotonic map."""
    with np.errstate(over="ignore"):
        share = 1.0 / np.exp(scores.gaps / t_span).sum(axis=1)  # gaps[:, 0] == 0
    share = np.where(scores.has_span, share, 0.0)
    if not scores.version_2 or threshold is None:
        return share
    p_null = _sigmoid((scores.null_odds - threshold) / t_null)
    p_null = np.where(scores.has_span, p_null, 1.0)
    return np.where(abstains(scores, threshold), p_null, (1.0 - p_null) * share)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


@dataclass(frozen=True)
class Isotonic:
    """A non-decreasing map [0, 1] -> [0, 1], linear between its knots, flat outside them."""

    x: list[float]
    y: list[float]

    def __call__(self, p: np.ndarray) -> np.ndarray:
        return np.interp(p, self.x, self.y)


@dataclass(frozen=True)
class Platt:
    """p -> sigmoid(a logit(p) + b)."""

    a: float
    b: float

    def __call__(self, p: np.ndarray) -> np.ndarray:
        q = np.clip(p, 1e-6, 1 - 1e-6)
        return _sigmoid(self.a * np.log(q / (1 - q)) + self.b)


def fit_platt(p: np.ndarray, correct: np.ndarray, weights: np.ndarray | None = None) -> Platt:
    """The Platt map of ``p`` with the lowest (weighted) log-loss of ``correct``, never
    decreasing: where the scores cannot order the answers (one distinct score, answers all
    right or all wrong) or the best fit would reverse them, the constant accuracy, smoothed
    as the isotonic map's blocks are ((correct + 1) / (n + 2): all right is not certainty)."""
    p, correct = np.asarray(p, dtype=float), np.asarray(correct, dtype=float)
    w = np.ones(len(p)) if weights is None else np.asarray(weights, dtype=float)
    rate = float(np.average(correct, weights=w))
    size = float(w.sum() ** 2 / (w * w).sum())  # the effective number of questions
    constant = (rate * size + 1.0) / (size + 2.0)
    flat = Platt(0.0, float(np.log(constant / (1.0 - constant))))
    if np.unique(p).size < 2 or rate in (0.0, 1.0):
        return flat
    best = minimize(
        lambda ab: log_loss(Platt(float(ab[0]), float(ab[1]))(p), correct, weights),
        np.array([1.0, 0.0]),
        method="Nelder-Mead",
        options={"xatol": 1e-4, "fatol": 1e-7},
    )
    if best.x[0] < 0:  # higher scores less often right: not a calibration of these scores
        return flat
    return Platt(float(best.x[0]), float(best.x[1]))


def fit_isotonic(p: np.ndarray, correct: np.ndarray, weights: np.ndarray | None = None) -> Isotonic:
    """Pool-adjacent-violators on (p, correct) sorted by p: each block of the fitted step
    function gives a knot at its mean p with its accuracy, (correct + 1) / (size + 2)
    (``weights``: weighted means, and the block's effective size (sum w)^2 / sum w^2, so
    that two questions weighted up count as two, not as their weight)."""
    order = np.argsort(p, kind="stable")
    xs, ys = p[order].astype(float), correct[order].astype(float)
    ws = np.ones(len(xs)) if weights is None else np.asarray(weights, dtype=float)[order]
    # questions of one score are one point (their order must not split them into blocks
    # that disagree at that score: the map then depended on the questions' order)
    values, first = np.unique(xs, return_index=True)
    points = zip(
        values.tolist(),
        np.add.reduceat(ws * ys, first).tolist(),
        np.add.reduceat(ws, first).tolist(),
        np.add.reduceat(ws * ws, first).tolist(),
        strict=True,
    )
    # blocks as (sum w x, sum w y, sum w, sum w^2), merged while their means decrease
    sx: list[float] = []
    sy: list[float] = []
    n: list[float] = []
    n2: list[float] = []
    for x, wy, w, w2 in points:
        sx.append(w * x)
        sy.append(wy)
        n.append(w)
        n2.append(w2)
        while len(n) > 1 and sy[-2] / n[-2] >= sy[-1] / n[-1]:
            x_last, y_last, n_last, n2_last = sx.pop(), sy.pop(), n.pop(), n2.pop()
            sx[-1] += x_last
            sy[-1] += y_last
            n[-1] += n_last
            n2[-1] += n2_last
    knots_x = [a / c for a, c in zip(sx, n, strict=True)]
    # each block's accuracy as the mean of a Beta(1, 1) posterior, (correct + 1) / (n + 2):
    # a finite block never says 0 or 1 (five right answers of five is not certainty), and
    # large blocks keep their mean; the running maximum keeps the map non-decreasing
    size = [c * c / c2 for c, c2 in zip(n, n2, strict=True)]  # effective sizes (n unweighted)
    smoothed = [(b / c * m + 1.0) / (m + 2.0) for b, c, m in zip(sy, n, size, strict=True)]
    knots_y = np.maximum.accumulate(smoothed).tolist()
    if len(knots_x) == 1:  # one block: a constant map
        knots_x, knots_y = [0.0, 1.0], [knots_y[0], knots_y[0]]
    return Isotonic(knots_x, knots_y)


def log_loss(p: np.ndarray, correct: np.ndarray, weights: np.ndarray | None = None) -> float:
    q = np.clip(p, 1e-6, 1 - 1e-6)
    return float(-np.average(np.where(correct, np.log(q), np.log1p(-q)), weights=weights))


def fit_temperatures(
    scores: Scores, correct: np.ndarray, threshold: float | None, weights: np.ndarray | None = None
) -> tuple[float, float]:
    """``(T_span, T_null)`` minimizing the log-loss of "the returned answer is correct";
    T_null stays 1 on SQuAD 1.1-style data (no null threshold)."""
    v2 = scores.version_2 and threshold is not None
    lo, hi = (math.log(t) for t in _T_RANGE)

    def loss(theta: np.ndarray) -> float:
        t = np.exp(np.clip(theta, lo, hi))
        t_null = float(t[1]) if v2 else 1.0
        p = raw_probability(scores, threshold, float(t[0]), t_null)
        return log_loss(p, correct, weights)

    start = np.zeros(2 if v2 else 1)
    best = minimize(loss, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-7})
    t = np.exp(np.clip(best.x, lo, hi))
    return float(t[0]), float(t[1]) if v2 else 1.0


def expected_calibration_error(
    p: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS, weights: np.ndarray | None = None
) -> float:
    """Question-weighted mean |accuracy - confidence| over ``bins`` equal-width bins of p
    (a p of exactly 1 falls in the last bin; ``weights``: each question's weight)."""
    if len(p) == 0:
        raise ValueError("the calibration error needs at least one question")
    rows = reliability_bins(p, correct, bins, weights)
    total = sum(r["weight"] for r in rows)
    return float(sum(r["weight"] * abs(r["accuracy"] - r["confidence"]) for r in rows) / total)


def reliability_bins(
    p: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS, weights: np.ndarray | None = None
) -> list[dict]:
    """The non-empty bins of a reliability diagram: edges, count, mean confidence, accuracy
    (means weighted by ``weights`` where given; ``weight``: the bin's total weight)."""
    idx = np.minimum((np.asarray(p) * bins).astype(int), bins - 1)
    w = np.ones(len(idx)) if weights is None else np.asarray(weights, dtype=float)
    out = []
    for b in range(bins):
        inside = idx == b
        if inside.any():
            out.append(
                {
                    "low": b / bins,
                    "high": (b + 1) / bins,
                    "count": int(inside.sum()),
                    "weight": float(w[inside].sum()),
                    "confidence": float(np.average(p[inside], weights=w[inside])),
                    "accuracy": float(np.average(correct[inside], weights=w[inside])),
                }
            )
    return out


#: ``Calibrator.fit`` key of a calibration that answers every question (``answers_all``)
ANSWERS_ALL = "answers_every_question"


@dataclass(frozen=True)
class Calibrator:
    """A fitted null threshold and probability map, saved with a checkpoint."""

    method: str  # "temperature", or "platt"/"isotonic" (temperatures, then that map)
    null_threshold: float | None  # None: SQuAD 1.1-style, always answer
    t_span: float = 1.0
    t_null: float = 1.0
    isotonic: Isotonic | None = None
    platt: Platt | None = None
    definition: str = (
        f"P(the returned answer is correct): a text with token F1 >= {CORRECT_F1} against a gold "
        "answer of an answerable question, or 'no answer' to an unanswerable one"
    )
    fit: dict[str, Any] = field(default_factory=dict)  # what it was fitted on, and how well
    verifier: Verifier | None = None  # re-scores the null odds before the threshold (SQuAD 2.0)

    @property
    def answers_all(self) -> bool:
        """Fitted on answerable questions for a checkpoint that abstained (``structqa
        calibrate --answer-all``): its missing threshold then means "answer every question",
        for ``evaluate`` as for the Predictor, not "tune one" or "take the last evaluation's"."""
        return self.null_threshold is None and bool(self.fit.get(ANSWERS_ALL))

    @property
    def decides_threshold(self) -> bool:
        """Whether its threshold (None where :attr:`answers_all`) is the one to answer at; a
        threshold-less fit from before ``--answer-all`` leaves it to the last evaluation's."""
        return self.null_threshold is not None or self.answers_all

    def verify(
        self, examples: Sequence[Example], predictions: Mapping[str, Prediction]
    ) -> Mapping[str, Prediction]:
        """``predictions`` with the null odds the threshold and the map were fitted on: the
        verifier's where this calibration has one (:mod:`structqa.calibration.verifier`),
        else the model's own (``predictions`` itself)."""
        if self.verifier is None:
            return predictions
        return self.verifier.apply(examples, predictions)

    def probability(self, scores: Scores) -> np.ndarray:
        p = raw_probability(scores, self.null_threshold, self.t_span, self.t_null)
        if self.platt is not None:
            return self.platt(p)
        return self.isotonic(p) if self.isotonic is not None else p

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Calibrator:
        d = dict(d)
        iso, platt = d.pop("isotonic", None), d.pop("platt", None)
        verifier = d.pop("verifier", None)
        return cls(
            **d,
            isotonic=Isotonic(**iso) if iso else None,
            platt=Platt(**platt) if platt else None,
            verifier=Verifier.from_dict(verifier) if verifier else None,
        )


def returned_probabilities(
    predictions: Sequence[Prediction], threshold: float | None, cal: Calibrator | None
) -> np.ndarray:
    """(Q,) the probability returned with each prediction's answer (what ``predict`` and the
    service report): ``cal``'s map where there is a calibration, else the raw probability at
    ``threshold`` (None: SQuAD 1.1-style, always answer)."""
    ids = [str(i) for i in range(len(predictions))]
    scores = scores_from_predictions(
        dict(zip(ids, predictions, strict=True)), ids, threshold is not None
    )
    return cal.probability(scores) if cal is not None else raw_probability(scores, threshold)


def _halves(ids: Sequence[str]) -> np.ndarray:
    """(Q,) bool: a fixed half of the questions, by a hash of the id (two-fold selection)."""
    return np.array([hashlib.sha1(q.encode()).digest()[0] % 2 == 0 for q in ids])


def _fit_method(
    method: str,
    scores: Scores,
    correct: np.ndarray,
    threshold: float | None,
    weights: np.ndarray | None = None,
) -> Calibrator:
    t_span, t_null = fit_temperatures(scores, correct, threshold, weights)
    p = raw_probability(scores, threshold, t_span, t_null)
    iso = fit_isotonic(p, correct, weights) if method == "isotonic" else None
    platt = fit_platt(p, correct, weights) if method == "platt" else None
    return Calibrator(method, threshold, t_span, t_null, isotonic=iso, platt=platt)


def _subset(scores: Scores, keep: np.ndarray) -> Scores:
    ids = [q for q, k in zip(scores.ids, keep, strict=True) if k]
    s = scores
    return Scores(ids, s.gaps[keep], s.null_odds[keep], s.has_span[keep], s.version_2)


def fit_calibrator(
    scores: Scores,
    gold: Outcomes,
    threshold: float | None,
    method: str = "auto",
    weights: np.ndarray | None = None,
) -> Calibrator:
    """Temperatures, then the Platt or isotonic map that ``method`` names (``auto``: the
    one of the three that calibrates held-back halves best) for the returned answers at
    ``threshold``; every fit and error weighted by ``weights`` (None: all 1) where given."""
    if method not in METHODS:
        raise ValueError(f"calibration method must be one of {METHODS}, not {method!r}")
    if len(scores) < 2:
        raise ValueError(f"calibration needs at least two questions, got {len(scores)}")
    correct = returned_correct(scores, gold, threshold)
    fit: dict[str, Any] = {
        "questions": len(scores),
        "accuracy": float(np.average(correct, weights=weights)),
    }
    if method == "auto":
        half = _halves(scores.ids)
        cv: dict[str, float] = {}
        for m in MAPS:
            errors = []
            for part in (half, ~half):
                if part.sum() < 2 or (~part).sum() < 2:
                    continue
                w_in = None if weights is None else weights[part]
                w_out = None if weights is None else weights[~part]
                fitted = _fit_method(m, _subset(scores, part), correct[part], threshold, w_in)
                p = fitted.probability(_subset(scores, ~part))
                errors.append(expected_calibration_error(p, correct[~part], weights=w_out))
            cv[m] = float(np.mean(errors)) if errors else math.inf
        fit["two_fold_ece"] = cv
        method = min(MAPS, key=lambda m: cv[m])  # (ties: the simpler map, first in MAPS)
    cal = dataclasses.replace(_fit_method(method, scores, correct, threshold, weights), fit=fit)
    p = cal.probability(scores)
    fit["ece"] = expected_calibration_error(p, correct, weights=weights)
    fit["ece_uncalibrated"] = expected_calibration_error(
        raw_probability(scores, threshold), correct, weights=weights
    )
    return cal
