"""The one answer path: windows of (question, passage) pairs -> calibrated, verified answers.

``structqa predict``, ``ask``, the :class:`Predictor` API and both modes of the HTTP
service answer through it (the service's micro-batcher only decides which windows share a
forward pass), so one question gets the same answer, or the same refusal, from each.
``structqa evaluate`` scores through the same windows, decoding, verifier and calibration,
at the no-answer threshold the Predictor answers at (:func:`structqa.evaluation.
scoring_threshold`); only a checkpoint with no record of one (neither a calibration nor an
evaluation) has it tuned on the evaluated file (``null_threshold_source: this file``).
"""

from structqa.prediction.predictor import Answer, InvalidText, Predictor, QuestionTooLong

__all__ = ["Answer", "InvalidText", "Predictor", "QuestionTooLong"]
