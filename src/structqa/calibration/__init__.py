"""Calibrated answers: what ``probability`` means, fitting it (and the null threshold) on
validation questions, saving it with a checkpoint, and measuring it (ECE, reliability)."""

from structqa.calibration.fit import (
    CORRECT_F1,
    ECE_BINS,
    Calibrator,
    Scores,
    expected_calibration_error,
    fit_calibrator,
    raw_probability,
    returned_probabilities,
    scores_from_predictions,
)
from structqa.calibration.report import (
    CALIBRATION_FILE,
    calibrate,
    calibration_metrics,
    load_calibration,
    save_calibration,
)

__all__ = [
    "CALIBRATION_FILE",
    "CORRECT_F1",
    "ECE_BINS",
    "Calibrator",
    "Scores",
    "calibrate",
    "calibration_metrics",
    "expected_calibration_error",
    "fit_calibrator",
    "load_calibration",
    "raw_probability",
    "returned_probabilities",
    "save_calibration",
    "scores_from_predictions",
]
