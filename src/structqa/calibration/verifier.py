"""An answerability verifier for SQuAD 2.0-style models: the model's null odds re-scored
together with how well the passage supports the question, by a logistic regression fitted on
validation questions and saved in ``calibration.json``.

A span model trained on a thousand questions learns spans much better than it learns when to
abstain (docs/results/squad2). What it misses is often visible on the surface: a question
whose content words are absent from the passage, or present but not near the span the model
would answer with, tends to be unanswerable. Two kinds (:data:`structqa.config.VERIFIER_KINDS`):

- ``lexical`` (:data:`FEATURES`): the model's own scores and lexical counts. None needs
  another model, so the verifier costs microseconds per question at serving time.
- ``similarity``: those and :data:`~structqa.calibration.similarity.SIMILARITY_FEATURES`,
  how close the question is in meaning to the passage's sentences, by a sentence-embedding
  encoder (the default encoder as shipped). It costs one pass of that encoder over the
  passage's sentences and the question, and measured better on held-out SQuAD 2.0
  (docs/results/squad2).

Words are lowercased letters and digits with function words removed, compared by their first
:data:`STEM_CHARS` characters (a crude stem: "founded" and "founding" match). That is cheaper
and more predictable than a tagger and needs no spaCy where the model is served.

The verifier's output replaces ``Prediction.null_odds`` (a log-odds that the question is
unanswerable), so the null threshold and the probability map are fitted on it exactly as on
the model's own odds. Fitting (:func:`fit_verifier`) also returns out-of-fold scores (five
folds) for the questions it was fitted on, on which the threshold and the probabilities are
then fitted, so that they do not see the verifier's fit to those same questions.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structqa.config import VERIFIER_AUTO, VERIFIER_KINDS
from structqa.data.records import Example
from structqa.decoding import Prediction
from structqa.text.spans import pieces

STEM_CHARS = 5
FOLDS = 5
FEATURES = (
    "null_odds",  # the model's own log-odds of "no answer"
    "top_probability",  # the best span's share among the n-best
    "top_margin",  # the best span's share minus the second's
    "question_coverage",  # share of the question's content words found in the passage
    "missing_words",  # how many of them are not in the passage
    "best_sentence_coverage",  # the largest share found in one sentence
    "negation",  # the question has "not", "no", "never" or "n't"
    "question_words",  # how many content words the question has
    "answer_sentence_coverage",  # share found in the sentence of the best span
    "answer_window_coverage",  # ... in that sentence and its two neighbours
    "coverage_gap",  # best_sentence_coverage - answer_sentence_coverage
    "span_score",  # the best span's score (start + end logits)
    "missing_names",  # capitalized question words (after the first) absent from the passage
    "missing_numbers",  # numbers in the question absent from the passage
)
_FUNCTION_WORDS = frozenset(
    "a an the of in on at to for from by with and or is are was were be been being what which "
    "who whom whose when where why how did do does that this these those it its as into than "
    "then there their they he she his her i you we our your not no".split()
)
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_NEGATION = re.compile(r"\b(not|never|no)\b|n't")
_NUMBER = re.compile(r"\d+")
_STRIP = "?,.;:!'\"()"


def _stems(text: str) -> list[str]:
    return [w[:STEM_CHARS] for w in _WORD.findall(text.lower())]


def content_stems(question: str) -> list[str]:
    """The question's content words (function words removed), stemmed; in order, repeated."""
    return [w[:STEM_CHARS] for w in _WORD.findall(question.lower()) if w not in _FUNCTION_WORDS]


def sentence_spans(context: str) -> list[tuple[int, int]]:
    """Character spans of the passage's sentences (split after ., ! or ? and white space)."""
    spans = pieces(context, _SENTENCE_END)
    return [s for s in spans if s[1] > s[0]] or [(0, len(context))]


def _passage(context: str) -> tuple[list[tuple[int, int]], list[set[str]], set[str]]:
    """A passage's sentence spans, each sentence's stems, and all of its stems."""
    spans = sentence_spans(context)
    sentences = [set(_stems(context[a:b])) for a, b in spans]
    return spans, sentences, set().union(*sentences)


def features(
    question: str,
    context: str,
    prediction: Prediction,
    passage_info: tuple[list[tuple[int, int]], list[set[str]], set[str]] | None = None,
) -> np.ndarray:
    """(len(FEATURES),) the verifier's inputs for one question and the model's prediction
    (``passage_info``: the context's analysis, when several questions share it)."""
    words = content_stems(question) or ["?"]  # (no content word: nothing is covered)
    spans, sentences, passage = passage_info or _passage(context)

    def share(found: set[str]) -> float:
        return sum(w in found for w in words) / len(words)

    per_sentence = [share(s) for s in sentences]
    probs = [c.probability for c in prediction.nbest]
    top = probs[0] if probs else 0.0
    second = probs[1] if len(probs) > 1 else 0.0
    at = prediction.start_char if prediction.text else -1
    k = next((i for i, (a, b) in enumerate(spans) if a <= at < b), None)
    answer_sentence = per_sentence[k] if k is not None else 0.0
    window = share(set().union(*sentences[max(0, k - 1) : k + 2])) if k is not None else 0.0
    lowered = context.lower()
    names = [w.strip(_STRIP) for w in question.split()[1:] if w[:1].isupper()]
    return np.array(
        [
            prediction.null_odds,
            top,
            top - second,
            share(passage),
            sum(w not in passage for w in words),
            max(per_sentence),
            1.0 if _NEGATION.search(question.lower()) else 0.0,
            len(words),
            answer_sentence,
            window,
            max(per_sentence) - answer_sentence,
            prediction.score,
            sum(n.lower() not in lowered for n in names if n),
            sum(n not in context for n in _NUMBER.findall(question)),
        ]
    )


def feature_matrix(
    examples: Sequence[Example],
    predictions: Mapping[str, Prediction],
    names: Sequence[str] = FEATURES,
    encoder: str | None = None,
) -> np.ndarray:
    """(Q, len(names)) the features ``names`` for the examples, in their order (each must have
    a prediction); each distinct passage is analysed once. Similarity features need
    ``encoder`` (:func:`structqa.calibration.similarity.sentence_encoder`'s name)."""
    from structqa.calibration.similarity import SIMILARITY_FEATURES

    unknown = [n for n in names if n not in FEATURES and n not in SIMILARITY_FEATURES]
    if unknown:
        raise ValueError(
            f"unknown verifier features {unknown}: this version of structqa computes "
            f"{list(FEATURES + SIMILARITY_FEATURES)}; fit the verifier again with "
            "`structqa calibrate --verifier`"
        )
    passages: dict[str, tuple[list[tuple[int, int]], list[set[str]], set[str]]] = {}
    rows = []
    for ex in examples:
        if ex.context not in passages:
            passages[ex.context] = _passage(ex.context)
        rows.append(features(ex.question, ex.context, predictions[ex.id], passages[ex.context]))
    columns = dict(zip(FEATURES, np.stack(rows).T, strict=True))
    if any(n in SIMILARITY_FEATURES for n in names):
        from structqa.calibration.similarity import sentence_encoder, similarity_features

        if encoder is None:
            raise ValueError("similarity features need a sentence encoder (none was named)")
        spans = {c: info[0] for c, info in passages.items()}
        sims = similarity_features(examples, predictions, sentence_encoder(encoder), spans)
        columns.update(zip(SIMILARITY_FEATURES, sims.T, strict=True))
    return np.stack([columns[n] for n in names], axis=1)


def verifier_kind(value: bool | str | None, version_2: bool = False) -> str | None:
    """The verifier kind a setting asks for on questions that include unanswerable ones
    (``version_2``) or not: None (false, "none") or one of
    :data:`structqa.config.VERIFIER_KINDS` (true means "lexical"; "auto" means "similarity"
    where ``version_2``, else None: all-answerable questions have nothing to verify)."""
    if value is None or value is False or value in ("none", "false", ""):
        return None
    if value == VERIFIER_AUTO:
        return "similarity" if version_2 else None
    if value is True or value == "true":
        return "lexical"
    if value not in VERIFIER_KINDS:
        raise ValueError(
            f"unknown verifier {value!r}: give {VERIFIER_AUTO}, true (lexical), "
            f"{', '.join(VERIFIER_KINDS)} or none"
        )
    return str(value)


def kind_features(kind: str) -> tuple[tuple[str, ...], str | None]:
    """The feature names and sentence encoder of a verifier kind
    (:data:`structqa.config.VERIFIER_KINDS`)."""
    from structqa.calibration.similarity import DEFAULT, SIMILARITY_FEATURES

    if kind == "lexical":
        return FEATURES, None
    if kind == "similarity":
        return FEATURES + SIMILARITY_FEATURES, DEFAULT
    raise ValueError(f"unknown verifier kind {kind!r}: one of {', '.join(VERIFIER_KINDS)}")


def with_null_odds(
    predictions: Mapping[str, Prediction], ids: Sequence[str], odds: np.ndarray
) -> dict[str, Prediction]:
    """``predictions`` with the questions ``ids`` given the null odds ``odds`` (in order)."""
    out = dict(predictions)
    for q, z in zip(ids, odds, strict=True):
        out[q] = predictions[q]._replace(null_odds=float(z))
    return out


@dataclass(frozen=True)
class Verifier:
    """A logistic regression on standardized :data:`FEATURES`; its decision value is the
    log-odds that the question is unanswerable."""

    names: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    fit: dict[str, Any] = field(default_factory=dict)
    encoder: str | None = None  # the sentence encoder of similarity features, if any

    def score(self, x: np.ndarray) -> np.ndarray:
        """(Q,) log-odds of "no answer" for a (Q, F) feature matrix."""
        z = (np.asarray(x, dtype=float) - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.coef) + self.intercept

    def apply(
        self, examples: Sequence[Example], predictions: Mapping[str, Prediction]
    ) -> dict[str, Prediction]:
        """``predictions`` with each example's null odds replaced by the verifier's."""
        scored = [ex for ex in examples if ex.id in predictions]
        if not scored:
            return dict(predictions)
        odds = self.score(feature_matrix(scored, predictions, self.names, self.encoder))
        return with_null_odds(predictions, [ex.id for ex in scored], odds)

    def prepare(self) -> None:
        """Load what scoring needs now (a server calls it at start, not on a request)."""
        if self.encoder is not None:
            from structqa.calibration.similarity import sentence_encoder

            sentence_encoder(self.encoder)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verifier:
        return cls(**dict(d))


def fit_verifier(
    x: np.ndarray,
    unanswerable: np.ndarray,
    seed: int = 0,
    names: Sequence[str] = FEATURES,
    encoder: str | None = None,
) -> tuple[Verifier, np.ndarray]:
    """The verifier fitted on (Q, F) features ``names`` (``encoder``: the sentence encoder of
    similarity features, if any) and whether each question is unanswerable (L2 logistic
    regression, its strength the one of :data:`STRENGTHS` with the lowest cross-validated
    log-loss), and the out-of-fold log-odds of those Q questions (each scored by a fit,
    strength choice included, on the other folds)."""
    from sklearn.metrics import roc_auc_score

    y = np.asarray(unanswerable, dtype=int)
    n_min = int(min(y.sum(), len(y) - y.sum()))
    if n_min < FOLDS:
        raise ValueError(
            f"fitting the answerability verifier needs at least {FOLDS} answerable and {FOLDS} "
            f"unanswerable validation questions; these have {int(len(y) - y.sum())} and "
            f"{int(y.sum())}"
        )
    mean = x.mean(axis=0)
    scale = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    z = (x - mean) / scale
    oof = np.zeros(len(y))
    for train, test in _folds(y, seed):
        model = _logistic(_strength(z[train], y[train], seed), z[train], y[train])
        oof[test] = model.decision_function(z[test])
    c = _strength(z, y, seed)
    final = _logistic(c, z, y)
    fit = {
        "questions": len(y),
        "unanswerable": int(y.sum()),
        "C": c,
        "auc_out_of_fold": 100 * float(roc_auc_score(y, oof)),
        "auc_null_odds": (
            100 * float(roc_auc_score(y, x[:, list(names).index("null_odds")]))
            if "null_odds" in names
            else None
        ),
    }
    verifier = Verifier(
        list(names),
        mean.tolist(),
        scale.tolist(),
        final.coef_[0].tolist(),
        float(final.intercept_[0]),
        fit,
        encoder,
    )
    return verifier, oof


STRENGTHS = tuple(float(c) for c in np.logspace(-3, 2, 11))  # inverse L2 strengths tried


def _folds(y: np.ndarray, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedKFold

    folds = StratifiedKFold(FOLDS, shuffle=True, random_state=seed)
    return list(folds.split(np.zeros(len(y)), y))


def _logistic(c: float, z: np.ndarray, y: np.ndarray):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=5000).fit(z, y)


def _strength(z: np.ndarray, y: np.ndarray, seed: int) -> float:
    """The strength with the lowest log-loss over folds of these questions."""
    from sklearn.metrics import log_loss

    losses = []
    for c in STRENGTHS:
        loss = 0.0
        for train, test in _folds(y, seed):
            p = _logistic(c, z[train], y[train]).predict_proba(z[test])[:, 1]
            loss += log_loss(y[test], p, labels=[0, 1]) * len(test)
        losses.append(loss)
    return STRENGTHS[int(np.argmin(losses))]
