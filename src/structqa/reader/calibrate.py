"""The general reader's calibration (``structqa reader build``'s calibrate stage): the
no-answer threshold, the answerability verifier and the answer probabilities, fitted on the
validation slice's **human-written** questions, **weighted to the share of unanswerable
questions that SQuAD 2.0's own questions have**.

Why not the whole slice, as a ``structqa train`` run calibrates: a slice of passages (the
former recipe's, or ``data.validation=FRACTION``) carries the training file's unanswerable
rewrites (``ID-neg-RULE``, :mod:`structqa.training.negatives`),
which the reader rejects far more easily than questions people wrote, and once they are left
out the slice is about a fifth unanswerable (most of its answerable questions come from the
SQuAD 1.1 pool), while SQuAD 2.0's own questions are about half. A threshold fitted on either
abstains too little on the unanswerable questions people ask (docs/results/reader: the shipped
threshold left held-out SQuAD 2.0 F1 4-5 points under the file's own best threshold). Both
facts come from the training data alone: the rewrites are marked by their ids, and the share
is counted on SQuAD 2.0's training split (:func:`structqa.reader.data.squad2_unanswerable_share`).
The recipe's slice of held-out articles (:mod:`structqa.reader.data`) has no rewrite, and is
weighted to the same share.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from structqa.calibration import Calibrator
from structqa.config import Config
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.data.squad_json import write_squad_json
from structqa.training.negatives import is_rewrite

log = logging.getLogger(__name__)

#: the slice's human-written questions, written beside it (run/validation-human.v2.json)
HUMAN_FILE = "validation-human.v2.json"

#: added to the no-answer threshold fitted on the slice: the slice's passages come from the
#: articles the reader trained on, where it tells unanswerable questions apart far better
#: than on new articles. Measured on training articles only (2026-12-01, -0.366): a reader of
#: the recipe trained without two of SQuAD 2.0's training articles (French_and_Indian_War,
#: Immune_system) and the slice, calibrated on the slice, best on those articles 0.37 lower
#: (``scripts/fold_reader.py``, ``scripts/threshold_offset.py``; docs/results/reader/README.md)
THRESHOLD_OFFSET = -0.37
#: the odds the offset was measured on (the kind of verifier the fold reader's calibration
#: chose): added only to a threshold on the same kind of odds
OFFSET_VERIFIER = "similarity"


def recipe_offset(slice_kind: str) -> float:
    """The offset the calibrate stage adds for a build of this ``--slice``: a slice of whole
    held-out articles is already new articles to the reader, so nothing is added there."""
    return THRESHOLD_OFFSET if slice_kind == "passages" else 0.0


def calibrate_stage(
    trained: dict[str, Any], cfg: Config, data_dir: Path, slice_kind: str = "passages"
) -> dict[str, Any]:
    """The calibrate stage of a build whose train stage recorded ``trained``: at the share
    its settings give (``decode.unanswerable_share``), else SQuAD 2.0's own, the threshold
    moved by :func:`recipe_offset` for the build's ``--slice``; a run without a validation
    slice (``data.validation: none``) keeps the calibration it has, and the record says so."""
    from structqa.reader.data import squad2_unanswerable_share

    if not trained.get("validation_file"):
        kept = "no validation slice (data.validation: none): the run's own calibration is kept"
        return {"skipped": kept}
    share, source = cfg.decode.unanswerable_share, "decode.unanswerable_share"
    if share is None:
        share, source = squad2_unanswerable_share(data_dir), "SQuAD 2.0's training split"
    record = calibrate_reader(
        Path(trained["checkpoint"]),
        Path(trained["validation_file"]),
        share,
        cfg.decode.verifier,
        recipe_offset(slice_kind),
        OFFSET_VERIFIER,
    )
    return {**record, "share_from": source}


def calibrate_reader(
    checkpoint: Path,
    validation: Path,
    share: float,
    verifier: bool | str,
    threshold_offset: float = 0.0,
    offset_verifier: str | None = None,
) -> dict[str, Any]:
    """Fit ``checkpoint``'s calibration on the human-written questions of ``validation`` (the
    slice), weighted to ``share`` unanswerable; the calibrate stage's record. A slice whose
    human-written questions are not of both kinds (a tiny build) is fitted whole, and the
    record's ``fallback`` says so; where the whole slice is not of both kinds either, no
    threshold can be fitted on it, and the run's own calibration is kept (``skipped``).
    ``threshold_offset`` is added to the fitted threshold (:data:`THRESHOLD_OFFSET`) where
    the calibration's odds are those of an ``offset_verifier`` verifier (any, if None): the
    record keeps the offset asked for and the one added."""
    from structqa.prediction.calibrate import calibrate_checkpoint

    examples = read_extractive(validation).examples
    human = [ex for ex in examples if not is_rewrite(ex.id)]
    if not _both_kinds(examples):
        kept = (
            f"the slice's {len(examples)} questions are not of both kinds: the run's own "
            "calibration is kept"
        )
        log.warning("reader calibration: %s", kept)
        return {"skipped": kept}
    chosen, weighted, fallback = human, share, None
    if not _both_kinds(human):
        chosen = examples
        fallback = (
            f"the slice's {len(human)} human-written questions are not of both kinds: fitted "
            f"on all {len(examples)} of its questions"
        )
        log.warning("reader calibration: %s", fallback)
    path = validation.parent / HUMAN_FILE
    write_squad_json(path, chosen)

    # the verifier is fitted unweighted (its ranking does not depend on the share); the
    # threshold, temperatures and map are fitted at the share
    def fit(offset: float) -> Calibrator:
        return calibrate_checkpoint(
            checkpoint,
            on=str(path),
            verifier=verifier,
            unanswerable_share=weighted,
            threshold_offset=offset,
        )

    cal, added, offset_note = fit(threshold_offset), threshold_offset, None
    odds = odds_kind(cal.verifier)
    if threshold_offset and offset_verifier is not None and odds != offset_verifier:
        offset_note = (
            f"threshold offset {threshold_offset:+.2f} not added: it was measured on the "
            f"{offset_verifier} verifier's odds, this calibration's are {odds}"
        )
        log.warning("reader calibration: %s", offset_note)
        cal, added = fit(0.0), 0.0
    return {
        "validation_file": str(path),
        "questions": len(chosen),
        "unanswerable": sum(ex.is_impossible for ex in chosen),
        "rewrites_left_out": len(examples) - len(chosen),
        "unanswerable_share": weighted,
        "threshold_offset": added,
        "threshold_offset_asked": threshold_offset,
        "offset_note": offset_note,
        "fallback": fallback,
        "calibration": {
            "method": cal.method,
            "null_threshold": cal.null_threshold,
            "verifier": None if cal.verifier is None else cal.verifier.names,
            "fit": cal.fit,
        },
    }


def odds_kind(verifier: Any) -> str:
    """Whose odds a calibration's threshold applies to: a verifier's kind, else the model's."""
    if verifier is None:
        return "model's own"
    return "similarity" if verifier.encoder is not None else "lexical"


def _both_kinds(examples: list[Example]) -> bool:
    unanswerable = sum(ex.is_impossible for ex in examples)
    return 0 < unanswerable < len(examples)


__all__ = ["HUMAN_FILE", "calibrate_reader", "calibrate_stage"]
