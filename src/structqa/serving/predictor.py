"""The one inference entry point: a trained checkpoint answering questions about passages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from structqa.calibration import Calibrator, load_calibration, raw_probability
from structqa.calibration import scores_from_predictions as calibration_scores
from structqa.data.records import Example
from structqa.decoding import Candidate, DecodeConfig, Prediction
from structqa.features.squad import featurize, tag_annotator
from structqa.inference import bf16_weights, run_inference
from structqa.models.build import model_from_checkpoint
from structqa.runtime import default_device, use_bf16
from structqa.training.data import feature_config


@dataclass(frozen=True)
class Answer:
    """An answer: its text, its char span in the context, its score and the n-best list.

    ``score`` is the span's start + end logit (unbounded, comparable between spans of one
    model). ``probability`` is the chance that this answer, "no answer" included, is correct
    (:mod:`structqa.calibration.fit` defines it: F1 >= 0.5 with a gold answer, or "no answer"
    to an unanswerable question); ``calibrated`` says whether it comes from a map fitted on
    validation questions (``structqa calibrate``, or training with a validation split) or is
    the uncalibrated formula. ``answerable`` is whether the best span clears the no-answer
    threshold (always True for a model without one); ``no_answer`` whether "no answer" is
    returned (the text is then empty)."""

    text: str
    start: int
    end: int
    score: float
    null_odds: float
    nbest: tuple[Candidate, ...]
    no_answer: bool = False
    probability: float = 0.0
    answerable: bool = True
    calibrated: bool = False


class Predictor:
    def __init__(
        self,
        model,
        tokenizer,
        config,
        null_threshold: float | None = None,
        bf16: str = "auto",
        batch_size: int = 16,
        calibrator: Calibrator | None = None,
    ):
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.device = next(model.parameters()).device
        self.bf16 = use_bf16(bf16, self.device)
        if self.bf16:  # converted once here, not on every call (see run_inference)
            self.model = bf16_weights(self.model)
        self.null_threshold = null_threshold
        self.calibrator = calibrator
        self.batch_size = batch_size
        self.features = feature_config(config)
        self.annotator = tag_annotator(self.features)  # kept: spaCy loads once
        self.decode = DecodeConfig.from_settings(config.decode)

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        device: str | None = None,
        bf16: str = "auto",
        null_threshold: float | None = None,
        whole_words: bool | None = None,
    ) -> Predictor:
        """Load a checkpoint written by ``structqa train`` (its ``best`` or ``last`` dir).

        For SQuAD 2.0-style models the no-answer threshold is ``null_threshold`` when given,
        else the one fitted on validation questions (calibration.json, which also maps the
        answers' probabilities), else the one tuned at the last evaluation (metrics.json).
        ``whole_words`` (default: the checkpoint's ``decode.whole_words``) widens answers that
        start or end inside a word to the word.
        ``device`` defaults to the first GPU when there is one, else the CPU."""
        import json

        model, tokenizer, cfg = model_from_checkpoint(path)
        if whole_words is not None:
            cfg.decode.whole_words = whole_words
        model.to(torch.device(device) if device else default_device())
        calibrator = load_calibration(path)
        if null_threshold is None and calibrator is not None:
            null_threshold = calibrator.null_threshold
        metrics_file = Path(path) / "metrics.json"
        if null_threshold is None and metrics_file.exists():
            null_threshold = json.loads(metrics_file.read_text()).get("null_threshold")
        if calibrator is not None and null_threshold != calibrator.null_threshold:
            # its map was fitted for the answers at its own threshold
            calibrator = None
        return cls(model, tokenizer, cfg, null_threshold, bf16, calibrator=calibrator)

    def predict(self, question: str, context: str) -> Answer:
        return self.predict_batch([(question, context)])[0]

    def predict_batch(self, pairs: Sequence[tuple[str, str]]) -> list[Answer]:
        """Answer many (question, context) pairs in dynamically padded batches."""
        examples = [Example(id=str(i), question=q, context=c) for i, (q, c) in enumerate(pairs)]
        for ex in examples:
            if not ex.question.strip() or not ex.context.strip():
                raise ValueError(f"pair {ex.id}: question and context must be non-empty")
        predictions = self.predict_examples(examples)  # keyed by id; order is not the input's
        ordered = [predictions[ex.id] for ex in examples]
        probabilities = self.probabilities(ordered)
        return [self._answer(p, float(q)) for p, q in zip(ordered, probabilities, strict=True)]

    def probabilities(self, predictions: Sequence[Prediction]):
        """(Q,) the probability of each prediction's returned answer (see :class:`Answer`)."""
        scores = calibration_scores(
            {str(i): p for i, p in enumerate(predictions)},
            [str(i) for i in range(len(predictions))],
            version_2=self.null_threshold is not None,
        )
        if self.calibrator is not None:
            return self.calibrator.probability(scores)
        return raw_probability(scores, self.null_threshold)

    def predict_examples(self, examples: Sequence[Example]):
        """Raw predictions (``structqa.decoding.Prediction``) keyed by example id."""
        features, _ = featurize(examples, self.tokenizer, self.features, annotator=self.annotator)
        collector = run_inference(
            self.model, features, self.decode, self.batch_size, self.bf16, self.device
        )
        return collector.predictions(examples, features)

    def _answer(self, p: Prediction, probability: float) -> Answer:
        text = p.answer(self.null_threshold)
        return Answer(
            text=text,
            start=p.start_char if text else -1,
            end=p.end_char if text else -1,
            score=p.score,
            null_odds=p.null_odds,
            nbest=p.nbest,
            no_answer=not text,
            probability=probability,
            answerable=self.null_threshold is None or p.null_odds <= self.null_threshold,
            calibrated=self.calibrator is not None,
        )
