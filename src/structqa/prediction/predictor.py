"""The one inference entry point: a trained checkpoint answering questions about passages."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structqa.calibration import Calibrator, load_calibration, returned_probabilities
from structqa.cpu import tune_allocator
from structqa.data.hygiene import InvalidText, check_text, has_readable_text
from structqa.data.records import Example
from structqa.decoding import Candidate, DecodeConfig, Prediction
from structqa.encoders.bert import BertEncoder
from structqa.evaluation import saved_threshold
from structqa.features.squad import Feature, QuestionTooLong, featurize, tag_annotator
from structqa.inference import bf16_weights, run_inference
from structqa.runtime import use_bf16
from structqa.runtimes.protocol import GraphRuntime
from structqa.training.data import feature_config

log = logging.getLogger(__name__)

# the errors a caller maps to its own (the HTTP service: 422), besides ValueError's others
__all__ = ["Answer", "InvalidText", "Predictor", "QuestionTooLong"]


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

    def to_json(self, top_k: int = 5) -> dict[str, Any]:
        """The answer as every entry point writes it (``predict``'s output, the service's
        reply): its fields, with the first ``top_k`` n-best candidates."""
        return {
            "answer": self.text,
            "start": self.start,
            "end": self.end,
            "probability": self.probability,
            "answerable": self.answerable,
            "calibrated": self.calibrated,
            "score": self.score,
            "null_odds": self.null_odds,
            "no_answer": self.no_answer,
            "nbest": [
                {
                    "text": c.text,
                    "start": c.start_char,
                    "end": c.end_char,
                    "probability": c.probability,
                }
                for c in self.nbest[:top_k]
            ],
        }


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
        # a torch module, or an exported graph (structqa.runtimes), which names its own
        # runtime and device and keeps its own precision
        graph = model if isinstance(model, GraphRuntime) else None
        self.device = graph.device if graph else next(model.parameters()).device
        self.bf16 = use_bf16(bf16, self.device) if graph is None else False
        if self.device.type == "cpu":
            tune_allocator()  # (process-wide; see its docstring)
        if self.bf16:  # converted once here, not on every call (see run_inference)
            self.model = bf16_weights(self.model)
        self.runtime = graph.runtime if graph else ("torch-bf16" if self.bf16 else "torch-fp32")
        self.null_threshold = null_threshold
        self.calibrator = calibrator
        if calibrator is not None and calibrator.verifier is not None:
            calibrator.verifier.prepare()  # (a similarity verifier's encoder: loaded once, now)
        self.batch_size = batch_size
        # windows padded to a multiple of this many tokens (a server sets it: see SHAPE_MULTIPLE)
        self.pad_to_multiple = 1
        # questions of the last predict_examples call cut to data.max_query_len tokens
        self.questions_truncated = 0
        self.features = feature_config(config)
        self.annotator = tag_annotator(self.features, answering=True)  # spaCy loads once
        self.decode = DecodeConfig.from_settings(config.decode)
        # the training checkpoint an exported graph came from (from_checkpoint sets it): its
        # torch weights draw the attention maps that a graph cannot (attention_model)
        self.checkpoint: Path | None = None
        # the directory it was loaded from (a checkpoint or an export): the reader a
        # collection's set-level no-answer fit is matched to, as `structqa ask` matches it
        self.source: Path | None = None
        self._attention_model: Any = None
        self._attention_lock = threading.Lock()
        # one predict_batch/predict_examples at a time: the fast tokenizer's truncation
        # settings are shared state (threads calling the Python API; the batched service
        # featurizes with its own tokenizer copies). questions_truncated is the last call's:
        # read it from the thread that made the call, before another call ends
        self._call_lock = threading.Lock()

    def attention_model(self) -> Any:
        """The torch model that draws attention maps for these answers (``structqa.analysis
        .explain``): the model itself on a torch runtime; on an exported graph, the fp32 weights
        of the checkpoint it was exported from, loaded once on first use (its answer may differ
        from the graph's in the last digits of a score); None where the graph came without its
        checkpoint (an export directory alone)."""
        if not isinstance(self.model, GraphRuntime):
            return self.model
        if self.checkpoint is None:
            return None
        with self._attention_lock:
            if self._attention_model is None:
                from structqa.models.build import model_from_checkpoint

                model = model_from_checkpoint(self.checkpoint)[0]
                self._attention_model = model.to(self.device).eval()
                log.info("attention maps drawn by the torch weights of %s", self.checkpoint)
            return self._attention_model

    def attention_head(self) -> Any:
        """The head whose queries an attention map is drawn for, without loading anything: the
        model's own on a torch runtime, on an exported graph the head its checkpoint's config
        builds (on the meta device); None where the graph came without its checkpoint."""
        if not isinstance(self.model, GraphRuntime):
            return getattr(self.model, "head", None)
        if self.checkpoint is None:
            return None
        from structqa.models.build import checkpoint_head

        return checkpoint_head(self.checkpoint)

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        device: str | None = None,
        bf16: str = "auto",
        null_threshold: float | None = None,
        whole_words: bool | None = None,
        runtime: str = "auto",
        make_int8_export: bool = False,
    ) -> Predictor:
        """Load a checkpoint written by ``structqa train`` (its ``best`` or ``last`` dir), a
        directory written by ``structqa export --format onnx``, or a reader built by
        ``structqa reader build`` (its folder: the checkpoint in ``run/best``).

        ``runtime`` (:data:`structqa.runtimes.select.RUNTIMES`) picks torch bf16/fp32 or
        onnxruntime int8/fp32; ``auto`` the fastest at hand for the machine, logged with why.
        ``make_int8_export``: on a CPU where bf16 does not pay, where ``auto`` finds no int8
        export (none, or the fp32 graph alone in ``CHECKPOINT/onnx``), write the int8 one beside
        the checkpoint first and answer with it (``structqa predict``
        and ``serve`` do: :func:`structqa.runtimes.select.load`).

        For SQuAD 2.0-style models the no-answer threshold is ``null_threshold`` when given,
        else the calibration's where there is one (calibration.json, fitted on validation
        questions, which also maps the answers' probabilities; one fitted on answerable
        questions only, ``calibrate --answer-all``, answers every question), else the one
        tuned at the last evaluation (metrics.json).
        ``whole_words`` (default: the checkpoint's ``decode.whole_words``) widens answers that
        start or end inside a word to the word.
        ``device`` defaults to the first GPU when there is one, else the CPU."""
        from structqa.paths import reader_checkpoint_of
        from structqa.runtimes.select import load

        path = reader_checkpoint_of(path)  # a built reader's folder: its run/best
        loaded = load(path, runtime, device, bf16, make_int8_export)
        log.info("runtime %s (%s)", loaded.choice.runtime, loaded.choice.reason)
        cfg = loaded.config
        if whole_words is not None:
            cfg.decode.whole_words = whole_words
        calibrator = load_calibration(path)
        if null_threshold is None:  # as `structqa calibrate` reads it (evaluate's too)
            null_threshold = saved_threshold(path, calibrator)
        if calibrator is not None and null_threshold != calibrator.null_threshold:
            # its map was fitted for the answers at its own threshold
            calibrator = None
        precision = "on" if loaded.bf16 else "off"
        predictor = cls(
            loaded.model, loaded.tokenizer, cfg, null_threshold, precision, calibrator=calibrator
        )
        if (Path(path) / "model.safetensors").is_file():
            predictor.checkpoint = Path(path)
        predictor.source = Path(path)
        return predictor

    @property
    def packs_windows(self) -> bool:
        """Whether the model computes only the real tokens of a batch (a torch encoder that
        packs them: :meth:`BertEncoder.packs_at_inference`)."""
        encoder = getattr(self.model, "encoder", None)
        return (
            self.runtime.startswith("torch")
            and isinstance(encoder, BertEncoder)
            and encoder.packs_at_inference(self.device)
        )

    def predict(self, question: str, context: str) -> Answer:
        return self.predict_batch([(question, context)])[0]

    def predict_batch(self, pairs: Sequence[tuple[str, str]]) -> list[Answer]:
        """Answer many (question, context) pairs in dynamically padded batches.

        Raises :class:`InvalidText` for text with a NUL or a lone surrogate
        (:mod:`structqa.data.hygiene`) and :class:`QuestionTooLong` for a question longer than
        ``data.max_query_len`` tokens (its ``index`` is the pair's); both are ValueErrors."""
        with self._call_lock:
            examples, features = self.featurize_pairs(pairs)
            return self.answers(examples, self.decoded(examples, features))

    def decoded(
        self,
        examples: Sequence[Example],
        features: Sequence[Feature],
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Prediction]:
        """The windows scored in length-sorted batches and decoded: a prediction per example
        id, the model's own null odds (no verifier yet); ``progress(windows done, windows)``."""
        advance = None
        if progress is not None:
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done += n
                progress(done, len(features))

        collector = run_inference(
            self.model,
            features,
            self.decode,
            self.batch_size,
            self.bf16,
            self.device,
            progress=advance,
            pad_to_multiple=self.pad_to_multiple,
        )
        return collector.predictions(examples, features)

    def featurize_pairs(
        self, pairs: Sequence[tuple[str, str]], tokenizer=None
    ) -> tuple[list[Example], list[Feature]]:
        """The examples of ``pairs`` (ids "0", "1", ...) and their windows, by the one policy
        for a user's pairs: empty or invalid text is refused (ValueError, :class:`InvalidText`)
        and so is a question longer than ``data.max_query_len`` tokens
        (:class:`QuestionTooLong` naming the pair), never cut (files are cut and counted
        instead: :meth:`predict_examples`). ``tokenizer``: a copy of the Predictor's, for a
        thread of its own (the service's featurizer threads)."""
        examples = [Example(id=str(i), question=q, context=c) for i, (q, c) in enumerate(pairs)]
        prefix = (lambda ex: f"pair {ex.id}: ") if len(examples) > 1 else (lambda ex: "")
        for ex in examples:
            if not ex.question.strip() or not ex.context.strip():
                raise ValueError(f"{prefix(ex)}question and context must be non-empty")
            for what, text in (("question", ex.question), ("context", ex.context)):
                if not has_readable_text(text):
                    raise InvalidText(
                        f"{prefix(ex)}the {what} has no character a model reads (only spaces, "
                        "zero-width, control or combining characters)"
                    )
            check_text(ex.question, f"{prefix(ex)}the question")
            check_text(ex.context, f"{prefix(ex)}the context")
        try:
            features, _ = featurize(
                examples,
                tokenizer or self.tokenizer,
                self.features,
                annotator=self.annotator,
                cut_long_questions=False,
            )
        except QuestionTooLong as err:
            if len(examples) == 1:
                raise
            what = f"pair {err.index}: the question"
            raise QuestionTooLong(err.index, err.length, err.limit, what) from None
        return examples, features

    def answers(
        self, examples: Sequence[Example], predictions: Mapping[str, Prediction]
    ) -> list[Answer]:
        """The answers to ``examples``, in their order, from the decoded ``predictions`` of
        their windows (keyed by id): null odds re-scored by the verifier where the
        calibration has one, the no-answer decision at the threshold, calibrated
        probabilities. Every entry point's last step (the service's batcher included)."""
        verified = self.verify(examples, predictions)
        ordered = [verified[ex.id] for ex in examples]
        probabilities = self.probabilities(ordered)
        return [self._answer(p, float(q)) for p, q in zip(ordered, probabilities, strict=True)]

    def probabilities(self, predictions: Sequence[Prediction]):
        """(Q,) the probability of each prediction's returned answer (see :class:`Answer`)."""
        return returned_probabilities(predictions, self.null_threshold, self.calibrator)

    def verify(
        self, examples: Sequence[Example], predictions: Mapping[str, Prediction]
    ) -> Mapping[str, Prediction]:
        """The predictions with the null odds the threshold applies to: re-scored by the
        calibration's answerability verifier where it has one, else as the model gave them."""
        if self.calibrator is None:
            return predictions
        return self.calibrator.verify(examples, predictions)

    def predict_examples(
        self,
        examples: Sequence[Example],
        cut_long_questions: bool = True,
        verify: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ):
        """Predictions (``structqa.decoding.Prediction``) keyed by example id, their null odds
        re-scored by the calibration's verifier (if any) unless ``verify`` is False. Questions
        longer than ``data.max_query_len`` tokens are cut and counted (a warning, as for any
        file), or with ``cut_long_questions`` False refused (:class:`QuestionTooLong`).
        ``progress(windows done, windows)`` as they are scored."""
        with self._call_lock:
            features, report = featurize(
                examples,
                self.tokenizer,
                self.features,
                annotator=self.annotator,
                cut_long_questions=cut_long_questions,
            )
            self.questions_truncated = report.truncated_questions  # (the last call's; warned)
            predictions = self.decoded(examples, features, progress)
            return self.verify(examples, predictions) if verify else predictions

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
