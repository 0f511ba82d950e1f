"""`structqa calibrate`: fit a checkpoint's null threshold and probability map on validation
questions and save them in it (calibration.json), for evaluate, predict and serve to use.

The validation questions are either a file (``--on``, e.g. the validation part of a split the
run trained on) or a slice of the checkpoint's own training pool that it did not train on
(``--pool-slice N``: N questions from paragraphs none of whose questions were in the training
subset that ``data.train_size`` and ``train.seed`` draw, so neither the questions nor their
passages were seen). The checkpoint's evaluation file is never used for this.

The checkpoint answers them itself, unless ``--predictions DIR`` names what it already
answered (``structqa evaluate CKPT --eval FILE --out DIR`` writes nbest_predictions.json and
null_odds.json there; DIR may answer more questions than the file holds): then fitting takes
seconds, not a pass over every window.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from structqa.calibration.fit import METHODS
from structqa.calibration.report import (
    calibrate,
    load_calibration,
    require_models_own_odds,
    save_calibration,
    saved_predictions,
)
from structqa.commands.common import add_sample_arguments
from structqa.config import VERIFIER_AUTO, VERIFIER_KINDS
from structqa.data import parse_train_size, train_subset
from structqa.data.readers import read_extractive
from structqa.data.records import Example

log = logging.getLogger(__name__)


def unseen_pool_slice(
    pool: Sequence[Example], train_size: str, seed: int, size: int, slice_seed: int = 1
) -> list[Example]:
    """``size`` questions of ``pool`` whose paragraphs have no question in the training subset
    ``train_subset(pool, train_size, seed)``, drawn by ``slice_seed``."""
    trained = train_subset(pool, parse_train_size(train_size), seed)
    seen = {ex.context for ex in trained}
    rest = [ex for ex in pool if ex.context not in seen]
    if not rest:
        raise ValueError(
            f"every paragraph of the training pool has a training question (train_size "
            f"{train_size}): no unseen slice left; give a validation file with --on"
        )
    return list(train_subset(rest, min(size, len(rest)), slice_seed))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    c = subparsers.add_parser(
        "calibrate",
        help="fit a checkpoint's no-answer threshold and answer probabilities on validation data",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    c.add_argument("checkpoint", help="a checkpoint directory (RUN/best)")
    where = c.add_mutually_exclusive_group(required=True)
    where.add_argument("--on", metavar="FILE", help="validation file (SQuAD JSON or MRQA)")
    add_sample_arguments(
        c,
        "--pool-slice",
        "--slice-seed",
        "N questions of the checkpoint's training pool from paragraphs it did not train on",
        seed=1,
        group=where,
    )
    c.add_argument(
        "--predictions",
        metavar="DIR",
        help="fit on this checkpoint's saved answers to the questions (a `structqa evaluate "
        "--out DIR` directory; it may hold more) instead of answering them again (--bf16 "
        "then has nothing to do)",
    )
    c.add_argument("--method", choices=METHODS, default="auto")
    c.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    c.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    c.add_argument(
        "--verifier",
        nargs="?",
        const="lexical",
        choices=[*VERIFIER_KINDS, VERIFIER_AUTO, "none"],
        default=None,
        help="SQuAD 2.0: also fit an answerability verifier, lexical (the kind a bare "
        "--verifier fits) or similarity (adds sentence similarity by the default encoder; "
        "auto: similarity where the questions include unanswerable ones); default: the "
        "checkpoint's decode.verifier",
    )
    c.add_argument(
        "--no-verifier", dest="verifier", action="store_const", const="none", help="fit none"
    )
    c.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace, extra: list[str]) -> int:
    cal = calibrate_checkpoint(
        args.checkpoint,
        args.on,
        args.pool_slice,
        args.slice_seed,
        args.method,
        args.data,
        args.bf16,
        args.verifier,
        args.predictions,
    )
    print(json.dumps({k: v for k, v in cal.to_dict().items() if k != "isotonic"}, indent=2))
    return 0


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
):
    """Fit and save the checkpoint's calibration (see the module's docstring); ``verifier``
    None follows the checkpoint's ``decode.verifier``; ``predictions_dir`` holds the
    checkpoint's saved answers to the questions (else it answers them now)."""
    from structqa.models.build import checkpoint_config
    from structqa.prediction.predictor import Predictor
    from structqa.training.data import data_path

    predictor = None
    if predictions_dir is None:
        predictor = Predictor.from_checkpoint(checkpoint, bf16=bf16)
        cfg = predictor.config
    else:
        cfg = checkpoint_config(checkpoint)
    if data_dir:
        cfg.data.dir = data_dir
    if on is not None:
        path = data_path(cfg, on)
        if cfg.data.eval and path.resolve() == data_path(cfg, cfg.data.eval).resolve():
            log.warning("%s is the checkpoint's evaluation file: it is then not held out", path)
        examples = list(read_extractive(path).examples)
        source = str(on)
    elif pool_slice is not None:
        pool = read_extractive(data_path(cfg, cfg.data.train)).examples
        size, seed = cfg.data.train_size, cfg.train.seed
        examples = unseen_pool_slice(pool, size, seed, pool_slice, slice_seed)
        source = (
            f"{cfg.data.train}: {len(examples)} questions (slice seed {slice_seed}) from "
            f"paragraphs outside the training subset (train_size {size}, seed {seed})"
        )
    else:
        raise ValueError("give a validation file (--on FILE) or --pool-slice N")
    version_2 = cfg.decode.version_2
    if version_2 is None:
        version_2 = any(ex.is_impossible for ex in examples)
    if verifier is None:
        verifier = cfg.decode.verifier
    if predictor is not None:
        predictions = predictor.predict_examples(examples, verify=False)  # the model's own odds
    else:
        earlier = load_calibration(checkpoint)
        verifies = earlier is not None and earlier.verifier is not None
        any_unanswerable = any(ex.is_impossible for ex in examples)
        require_models_own_odds(Path(predictions_dir), any_unanswerable, verifies)
        predictions = saved_predictions(Path(predictions_dir), examples, source)
    cal = calibrate(examples, predictions, version_2, method, source, verifier)
    path = save_calibration(checkpoint, cal)
    log.info("wrote %s", path)
    return cal
