"""Fitting a checkpoint's calibration on validation questions (what `structqa calibrate` and
`structqa reader build` run): a file of them, or a slice of the checkpoint's own training pool
from paragraphs it did not train on."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from structqa.calibration import CALIBRATION_FILE
from structqa.calibration.fit import ANSWERS_ALL
from structqa.calibration.report import (
    calibrate,
    load_calibration,
    require_models_own_odds,
    save_calibration,
    saved_predictions,
    stale_calibration,
)
from structqa.data import parse_train_size, train_subset
from structqa.data.overlap import passage_key
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.evaluation import saved_threshold
from structqa.manifest import rewriting
from structqa.training.progress import tracked

log = logging.getLogger(__name__)


def unseen_pool_slice(
    pool: Sequence[Example],
    train_size: str,
    seed: int | Sequence[int],
    size: int,
    slice_seed: int = 1,
    held_out: Sequence[Example] = (),
) -> list[Example]:
    """``size`` questions, drawn by ``slice_seed``, of ``pool`` whose paragraphs have no
    question in the training subset ``train_subset(pool, train_size, seed)``, and of
    ``held_out`` (the validation questions training split off the same file). Several
    seeds (the runs of a soup): the subsets of all of them."""
    seeds = [seed] if isinstance(seed, int) else list(seed)
    parsed = parse_train_size(train_size)
    seen = {passage_key(ex.context) for s in seeds for ex in train_subset(pool, parsed, s)}
    rest = [ex for ex in pool if passage_key(ex.context) not in seen]
    rest += [ex for ex in held_out if passage_key(ex.context) not in seen]
    if not rest:
        raise ValueError(
            f"every paragraph of the training pool has a training question (train_size "
            f"{train_size}): no unseen slice left; give a validation file with --on"
        )
    return list(train_subset(rest, min(size, len(rest)), slice_seed))


def trained_seeds(checkpoint: str | Path, cfg: Any) -> list[int]:
    """The ``train.seed`` of each run whose weights ``checkpoint`` holds: a soup's members
    (soup.json's kept ones), each of which drew its own training subset; else the config's."""
    from structqa.io import read_json
    from structqa.models.build import checkpoint_config
    from structqa.training.soup import SOUP_RECORD

    record = Path(checkpoint) / SOUP_RECORD
    if not record.is_file():
        return [cfg.train.seed]
    soup = read_json(record)
    seeds = []
    for member in soup.get("kept") or soup.get("members") or []:
        seed = member.get("seed") if isinstance(member, dict) else None
        if not isinstance(member, dict):
            try:
                seed = checkpoint_config(member).train.seed
            except (OSError, ValueError) as err:
                log.warning(
                    "%s: member %s not read (%s): its training questions are not known",
                    record,
                    member,
                    err,
                )
        if seed is not None:
            seeds.append(int(seed))
    return sorted(set(seeds)) or [cfg.train.seed]


def pool_slice_examples(
    cfg: Any, size: int, slice_seed: int = 1, seeds: Sequence[int] | None = None
) -> list[Example]:
    """``--pool-slice``'s questions for a run of config ``cfg``: from the pool as training
    drew from it (data.exclude's passages and the validation split taken off first; drawn
    from the whole file, the slice once held paragraphs the run trained on), and from that
    validation split where it is a fraction of data.train. ``seeds``: the training seeds of
    the runs a soup averages (default: the config's)."""
    from structqa.config import validation_fraction
    from structqa.training.data import split_training_file

    pool, held_out, _ = split_training_file(cfg)
    # (a validation file of its own is not data.train's: not drawn from)
    split_off = held_out if validation_fraction(cfg.data.validation) is not None else None
    drawn = list(seeds) if seeds else [cfg.train.seed]
    return unseen_pool_slice(pool, cfg.data.train_size, drawn, size, slice_seed, split_off or ())


#: ``calibrate_checkpoint(unanswerable_share=FROM_CONFIG)``: the checkpoint's own setting
FROM_CONFIG = "config"


def calibrate_checkpoint(
    checkpoint: str | Path,
    on: str | None = None,
    pool_slice: int | None = None,
    slice_seed: int = 1,
    method: str = "auto",
    data_dir: str | None = None,
    bf16: str = "auto",
    verifier: bool | str | None = None,
    predictions_dir: str | Path | None = None,
    dedupe_ids: bool = False,
    unanswerable_share: float | None | str = FROM_CONFIG,
    answer_all: bool = False,
    progress: str = "off",
    threshold_offset: float = 0.0,
):
    """Fit and save the checkpoint's calibration (see the module's docstring); ``verifier``
    None follows the checkpoint's ``decode.verifier``; ``predictions_dir`` holds the
    checkpoint's saved answers to the questions (else it answers them now); ``dedupe_ids``
    (or the checkpoint's ``data.dedupe_ids``) renames repeated ids of ``on`` (ID#2, ...);
    ``unanswerable_share``: weight the questions to that share (None: their own share;
    :data:`FROM_CONFIG`: the checkpoint's ``decode.unanswerable_share``). Questions that are
    all answerable fit no threshold, so a checkpoint that abstains would answer every
    question from then on: refused unless ``answer_all``. ``progress``: bar, lines or off,
    over the windows the model answers; ``threshold_offset``: see
    :func:`structqa.calibration.report.calibrate`."""
    from structqa.models.build import checkpoint_config
    from structqa.paths import reader_checkpoint_of
    from structqa.prediction.predictor import Predictor
    from structqa.prediction.scoring import default_runtime
    from structqa.training.data import data_path

    checkpoint = reader_checkpoint_of(checkpoint)  # a built reader's folder: its run/best
    # a calibration a stopped calibrate left apart from its record: loaded without, replaced
    stale = stale_calibration(checkpoint)
    if stale:
        log.warning("%s: fitting it again", stale)
    predictor = None
    with rewriting(CALIBRATION_FILE) if stale else nullcontext():
        if predictions_dir is None:
            # torch, as evaluate reads by default: a fit on the int8 graph's scores (auto's
            # choice where bf16 is not native) was applied to fp32 scores
            predictor = Predictor.from_checkpoint(
                checkpoint, bf16=bf16, runtime=default_runtime(checkpoint)
            )
            cfg = predictor.config
        else:
            cfg = checkpoint_config(checkpoint)
    if data_dir:
        cfg.data.dir = data_dir
    if on is not None:
        path = data_path(cfg, on)
        if cfg.data.eval and path.resolve() == data_path(cfg, cfg.data.eval).resolve():
            log.warning("%s is the checkpoint's evaluation file: it is then not held out", path)
        renames = dedupe_ids or cfg.data.dedupe_ids
        examples = list(read_extractive(path, dedupe_ids=renames).examples)
        source = str(on)
        _warn_if_trained_on(cfg, examples, source, trained_seeds(checkpoint, cfg))
    elif pool_slice is not None:
        seeds = trained_seeds(checkpoint, cfg)
        examples = pool_slice_examples(cfg, pool_slice, slice_seed, seeds)
        size, drawn = cfg.data.train_size, ", ".join(map(str, seeds))
        source = (
            f"{cfg.data.train}: {len(examples)} questions (slice seed {slice_seed}) from "
            f"paragraphs outside the training subset (train_size {size}, seed {drawn})"
        )
    else:
        raise ValueError("give a validation file (--on FILE) or --pool-slice N")
    version_2 = cfg.decode.version_2
    if version_2 is None:
        version_2 = any(ex.is_impossible for ex in examples)
    earlier = None if stale else load_calibration(Path(checkpoint))
    threshold = saved_threshold(checkpoint, earlier)  # where it abstains now
    answered_all = earlier is not None and earlier.answers_all  # by an earlier --answer-all
    if not version_2 and threshold is not None and not answer_all:
        raise ValueError(
            f"{source}: every question is answerable, but {checkpoint} abstains (no-answer "
            f"threshold {threshold:.3f}); a calibration fitted on these questions has no "
            "threshold, so it would answer every question from then on. Fit on labelled "
            "questions that include unanswerable ones people asked (a built reader: its "
            "run/validation-human.v2.json, with --unanswerable-share for your share), or "
            "give --answer-all to have it answer every question"
        )
    if verifier is None:
        verifier = cfg.decode.verifier
    if unanswerable_share == FROM_CONFIG:
        unanswerable_share = cfg.decode.unanswerable_share
    elif isinstance(unanswerable_share, str):
        raise ValueError(
            f"unanswerable_share {unanswerable_share!r}: a share, None or {FROM_CONFIG!r}"
        )
    if predictor is not None:
        with tracked(progress, "answering", "windows") as advance:  # the model's own odds:
            predictions = predictor.predict_examples(examples, verify=False, progress=advance)
    else:
        verifies = earlier is not None and earlier.verifier is not None
        any_unanswerable = any(ex.is_impossible for ex in examples)
        require_models_own_odds(Path(predictions_dir), any_unanswerable, verifies)
        predictions = saved_predictions(Path(predictions_dir), examples, source)
    cal = calibrate(
        examples,
        predictions,
        version_2,
        method,
        source,
        verifier,
        unanswerable_share,
        threshold_offset,
    )
    # what produced the scores it was fitted on (torch bf16/fp32, an ONNX graph, saved files)
    cal.fit["answered_by"] = (
        predictor.runtime if predictor is not None else f"saved answers in {predictions_dir}"
    )
    if not version_2 and (answer_all or answered_all or threshold is not None):
        # asked now or when first fitted so (a checkpoint that abstains is refused above
        # without it): evaluate then answers every question too, as the Predictor does
        cal.fit[ANSWERS_ALL] = True
    with rewriting(CALIBRATION_FILE) if stale else nullcontext():
        path = save_calibration(checkpoint, cal)
    log.info("wrote %s", path)
    return cal


__all__ = ["FROM_CONFIG", "calibrate_checkpoint", "pool_slice_examples", "unseen_pool_slice"]


def _warn_if_trained_on(
    cfg: Any, examples: Sequence[Example], source: str, seeds: Sequence[int]
) -> None:
    """Warn where ``examples`` ask about passages the checkpoint trained on (its training
    file read again, split and drawn as its run did): a calibration fitted on them is
    over-confident. Not checked where that file is not at hand."""
    from structqa.training.data import split_training_file, warn_trained_on

    try:  # the file read and split once; each run's subset drawn from it as drawn_training does
        pool = split_training_file(cfg)[0]
        size = parse_train_size(cfg.data.train_size)
        trained = {
            passage_key(ex.context)
            for seed in seeds
            for ex in train_subset(pool, size, seed)
            if not (cfg.data.answerable_only and ex.is_impossible)
        }
    except (OSError, ValueError) as err:
        log.info("%s: not checked against the checkpoint's training questions (%s)", source, err)
        return
    remedy = "a calibration fitted on them is over-confident: fit on questions about others"
    warn_trained_on(examples, trained, source, remedy)
