"""The one answer path: windows of (question, passage) pairs -> calibrated, verified answers.

``structqa evaluate``, ``predict``, the :class:`Predictor` API and both modes of the HTTP
service answer through it (the service's micro-batcher only decides which windows share a
forward pass), so one question gets the same answer, or the same refusal, from each.
"""

from structqa.prediction.predictor import Answer, InvalidText, Predictor, QuestionTooLong

__all__ = ["Answer", "InvalidText", "Predictor", "QuestionTooLong"]
