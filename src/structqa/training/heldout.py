"""Scoring a checkpoint on a test file: once after training (``best/eval/``), and for
``structqa evaluate``.

After a run that chose ``best/`` on a validation set, ``best/`` is calibrated on that set
(the null threshold, the probability map and any verifier: ``calibration.json``), then the
test file (``data.eval``) is read for the first time and scored once with ``best/`` at that
threshold, as ``structqa evaluate RUN/best`` would score it (evaluate also reports the
calibration error). Scored first, a SQuAD 2.0 test file would have its threshold tuned on
itself.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from structqa.config import Config
from structqa.data.records import Example
from structqa.decoding import DecodeConfig
from structqa.evaluation import (
    ANSWER_ALL,
    EvalResult,
    Rescore,
    decides,
    evaluate_model,
    scoring_threshold,
    write_outputs,
)
from structqa.features.squad import featurize
from structqa.runtime import default_device, use_bf16
from structqa.training.data import feature_config, load_eval_examples
from structqa.training.progress import counted

log = logging.getLogger(__name__)

#: where the end-of-training test writes, inside best/ (as ``structqa evaluate`` does)
TEST_DIR = "eval"


def score_file(
    model: torch.nn.Module,
    tokenizer,
    cfg: Config,
    path: str | None,
    bf16_setting: str,
    device: torch.device,
    null_threshold: float | None = None,
    rescore: Rescore | None = None,
    progress: str = "off",
) -> tuple[EvalResult, Sequence[Example], bool]:
    """Every question of ``path`` (else ``cfg.data.eval``; ``data.eval_size`` cuts it)
    answered by ``model`` on ``device`` and scored (SQuAD v1.1, or v2.0 when the file has
    unanswerable questions; returned with the questions and that choice). ``rescore`` (v2.0
    only) gives the null odds the threshold was fitted on. ``progress``: bar, lines or off
    (:func:`structqa.training.progress.counted`, over the windows scored)."""
    examples, v2 = load_eval_examples(cfg, path)
    if not v2 and null_threshold is not None and null_threshold != ANSWER_ALL:
        log.info(
            "the test file has no unanswerable question: scored as SQuAD 1.1, every question "
            "answered, where predict abstains above null odds %.3f; --decode.version_2=true "
            "scores its abstentions too",
            null_threshold,
        )
    features, rep = featurize(examples, tokenizer, feature_config(cfg))
    log.info("test: %s", rep.summary())
    bf16 = use_bf16(bf16_setting, device)
    log.info("scoring on %s, bf16 %s", device, "on" if bf16 else "off")
    with counted(len(features), progress, "scoring", "windows") as advance:
        result = evaluate_model(
            model,
            examples,
            features,
            DecodeConfig.from_settings(cfg.decode),
            v2,
            cfg.train.eval_batch_size,
            bf16,
            progress=advance,
            null_threshold=null_threshold if v2 else None,
            rescore=rescore if v2 else None,
        )
    # questions longer than data.max_query_len were cut to it (warned above): counted here
    result.metrics["questions_truncated"] = rep.truncated_questions
    # the null odds written are the verifier's where it re-scored them (calibrate reads this)
    result.null_odds_verified = bool(v2 and rescore is not None)
    return result, examples, v2


def _finished(out: Path) -> bool:
    state = out / "last" / "train_state.json"
    return state.is_file() and bool(json.loads(state.read_text()).get("finished"))


#: fits and saves best/'s calibration on the validation set, returning it (a
#: ``structqa.calibration.Calibrator``: ``null_threshold``, ``verifier``, ``verify``) or None;
#: ``structqa.calibration.report.calibrate_after_training``, passed in by the commands (the
#: calibration layer sits above training)
Calibrate = Callable[[Config], Any]


def score_best_once(
    cfg: Config, best: EvalResult | None, calibrate: Calibrate | None = None
) -> EvalResult | None:
    """After training: ``best/`` scored once on the test file ``data.eval`` (written to
    ``best/eval/``) when best/ was chosen on a validation set; ``best`` (the validation
    result) when there is no test file, no validation set (``data.validation: none``: best/
    was chosen on data.eval itself), or the run did not finish. None, as the trainer returns
    for a run finished earlier, when that run's test was done already."""
    from accelerate import PartialState

    from structqa.models.build import model_from_checkpoint

    out = Path(cfg.train.output_dir)
    best_dir = out / "best"
    if cfg.data.validation is None or not cfg.data.eval or not _finished(out):
        return best
    if not (best_dir / "model.safetensors").is_file():
        return best
    if best is None and (best_dir / TEST_DIR / "metrics.json").is_file():
        return None
    if not PartialState().is_main_process:
        return best
    calibrator = calibrate(cfg) if calibrate is not None else None  # before the test
    # at the threshold predict answers at, as `structqa evaluate RUN/best` scores it
    threshold, source = scoring_threshold(best_dir, calibrator)
    rescore = calibrator.verify if decides(calibrator) and calibrator.verifier else None
    model, tokenizer, saved = model_from_checkpoint(best_dir)
    # best/'s recipe, with where this run finds its files now (a resume may have moved the
    # data: best/ kept the directory of the start that wrote it) and how it batches
    data = dataclasses.replace(
        saved.data,
        dir=cfg.data.dir,
        eval=cfg.data.eval,
        annotation_cache=cfg.data.annotation_cache,
    )
    train = dataclasses.replace(saved.train, eval_batch_size=cfg.train.eval_batch_size)
    saved = dataclasses.replace(saved, data=data, train=train)
    device = default_device()
    model.to(device)
    result, examples, v2 = score_file(
        model, tokenizer, saved, None, cfg.train.bf16, device, threshold, rescore, "lines"
    )
    if v2:
        result.metrics["null_threshold_source"] = source
    write_outputs(result, best_dir / TEST_DIR)
    log.info(
        "test: best/ scored once on %s (%d questions): F1 %.2f; wrote %s",
        cfg.data.eval,
        len(examples),
        result.f1,
        best_dir / TEST_DIR,
    )
    return result
