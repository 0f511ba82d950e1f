"""A checkpoint or export scored on a test file, as ``structqa evaluate`` scores it: at the
null threshold and with the verifier of its calibration (fitted on validation questions), with
the calibration error, and the output files written."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from structqa.calibration.report import calibration_report, load_calibration
from structqa.config import apply_overrides
from structqa.evaluation import TUNED_HERE, decides, scoring_threshold, write_outputs
from structqa.runtime import default_device
from structqa.runtimes.select import load
from structqa.training.heldout import score_file

log = logging.getLogger(__name__)

#: the settings a score may change; the rest belongs to the trained model
SCORING_SECTIONS = ("data", "decode")
#: settings of those sections that a score never reads: refused, not ignored
NOT_READ_WHEN_SCORING = {
    **dict.fromkeys(
        (
            "data.train",
            "data.validation",
            "data.validation_seed",
            "data.exclude",
            "data.train_size",
            "data.answerable_only",
            "data.negative_window_rate",
        ),
        "it chooses what a run trains and validates on",
    ),
    "data.token_tags": "the model was trained with its tags",
    "decode.verifier": (
        "the calibration's verifier is part of the threshold fitted with it: fit it again "
        "without one (`structqa calibrate CHECKPOINT --on FILE --no-verifier`)"
    ),
    "decode.unanswerable_share": (
        "the threshold is fitted for a share by `structqa calibrate CHECKPOINT --on FILE "
        "--unanswerable-share P`"
    ),
}


def default_runtime(checkpoint: str | Path) -> str:
    """torch for a checkpoint (a recorded score must not depend on the CPU kind), the graph
    for an export."""
    return "torch" if (Path(checkpoint) / "model.safetensors").is_file() else "auto"


def evaluate_checkpoint(
    checkpoint: str | Path,
    eval_file: str | None,
    out: str | Path,
    runtime: str | None = None,
    bf16: str = "auto",
    overrides: Sequence[str] = (),
    data_dir: str | None = None,
    eval_size: int | None = None,
    progress: str = "off",
    tune_threshold: bool = False,
) -> dict[str, Any]:
    """Score ``checkpoint`` on ``eval_file`` (else its config's data.eval) and write
    predictions, n-best, null odds, metrics and the reliability picture to ``out``; return
    the metrics (with ``runtime``, the runtime that answered). ``progress``: bar, lines or
    off, over the windows scored. ``tune_threshold``: a SQuAD 2.0 file scored at the
    no-answer threshold tuned on itself (a ceiling), not at the one predict answers at.
    A built reader's folder stands for its checkpoint (``run/best``)."""
    from structqa.paths import reader_checkpoint_of

    checkpoint = reader_checkpoint_of(checkpoint)
    loaded = load(checkpoint, runtime or default_runtime(checkpoint), bf16=bf16)
    model, tokenizer, cfg = loaded.model, loaded.tokenizer, loaded.config
    device = default_device() if loaded.choice.onnx_dir is None else torch.device("cpu")
    log.info("runtime %s (%s)", loaded.choice.runtime, loaded.choice.reason)
    if data_dir:
        cfg.data.dir = data_dir
    # the whole file unless eval_size says otherwise (the checkpoint's data.eval_size was a
    # training-time setting)
    cfg.data.eval_size = eval_size
    for item in overrides:
        key = item.lstrip("-").partition("=")[0]
        if key in NOT_READ_WHEN_SCORING:
            raise ValueError(f"--{key} does not change a score: {NOT_READ_WHEN_SCORING[key]}")
        if key.partition(".")[0] not in SCORING_SECTIONS and key != "train.eval_batch_size":
            raise ValueError(
                f"--{key} cannot change a trained model; only data.*, decode.* and "
                "train.eval_batch_size overrides apply here"
            )
    apply_overrides(cfg, list(overrides))  # the config's own checks and conversions
    scoring = {
        "--eval-size": cfg.data.eval_size,
        "decode.n_best": cfg.decode.n_best,
        "decode.max_answer_length": cfg.decode.max_answer_length,
        "train.eval_batch_size": cfg.train.eval_batch_size,
    }
    for name, value in scoring.items():  # (-1 once scored all but the last question)
        if value is not None and value < 1:
            raise ValueError(f"{name} must be 1 or more, got {value}")
    t0 = time.perf_counter()
    precision = "on" if loaded.bf16 else "off"  # the runtime chosen above decides
    # the no-answer threshold predict answers at (calibration.json's, fitted on validation
    # questions, else the last evaluation's); tuned on this file only where there is none
    calibrator = load_calibration(checkpoint)
    threshold, source = scoring_threshold(checkpoint, calibrator)
    if tune_threshold:
        threshold, source = None, TUNED_HERE
    # the threshold was fitted on the verifier's null odds where the calibration has one
    rescore = calibrator.verify if decides(calibrator) and calibrator.verifier else None
    if rescore is not None:
        log.info("null odds re-scored by the calibration's answerability verifier")
    result, examples, v2 = score_file(
        model, tokenizer, cfg, eval_file, precision, device, threshold, rescore, progress
    )
    log.info("evaluated %d questions in %.1f s", len(examples), time.perf_counter() - t0)
    result.metrics.update(calibration_report(result, examples, v2, calibrator, out, source))
    result.metrics["runtime"] = loaded.choice.runtime
    write_outputs(result, Path(out))
    return result.metrics
