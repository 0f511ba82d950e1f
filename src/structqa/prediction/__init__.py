"""The one answer path: windows of (question, passage) pairs -> calibrated, verified answers.

``structqa predict``, ``ask``, the :class:`Predictor` API and both modes of the HTTP
service answer through it (the service's micro-batcher only decides which windows share a
forward pass), so one question gets the same answer, or the same refusal, from each.
``structqa evaluate`` scores through the same windows, decoding, verifier and calibration; its
one difference: a SQuAD 2.0 checkpoint without a calibration (or with one fitted on
answerable questions only before ``--answer-all`` existed) is scored at the threshold tuned on
the evaluated file (``null_threshold_source: this file`` in its metrics), where the Predictor
applies the one its last evaluation saved.
"""

from structqa.prediction.predictor import Answer, InvalidText, Predictor, QuestionTooLong

__all__ = ["Answer", "InvalidText", "Predictor", "QuestionTooLong"]
