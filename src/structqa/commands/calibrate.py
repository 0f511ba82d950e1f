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

from structqa.calibration.fit import METHODS
from structqa.commands.common import (
    add_bf16_argument,
    add_no_progress_argument,
    add_sample_arguments,
)
from structqa.config import VERIFIER_AUTO, VERIFIER_KINDS
from structqa.prediction.calibrate import FROM_CONFIG, calibrate_checkpoint


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
    c.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="what follows the temperatures: nothing (temperature), Platt scaling or an "
        "isotonic map; auto: the one of the three with the lowest calibration error on "
        "held-back halves of the questions",
    )
    c.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    c.add_argument(
        "--dedupe-ids",
        action="store_true",
        help="--on: rename repeated question ids (ID#2, ID#3, ...) instead of refusing the file",
    )
    add_bf16_argument(c)
    add_no_progress_argument(c)
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
    c.add_argument(
        "--unanswerable-share",
        type=share,
        metavar="P",
        help="SQuAD 2.0: fit the threshold and probabilities for questions of which P (in "
        "(0, 1)) are unanswerable, weighting the validation questions to that share; default: "
        "the checkpoint's decode.unanswerable_share, else the questions' own share",
    )
    c.add_argument(
        "--threshold-offset",
        type=float,
        default=0.0,
        metavar="D",
        help="SQuAD 2.0: add D to the fitted no-answer threshold (a built reader's recipe "
        "adds the offset measured for new articles: its card says which)",
    )
    c.add_argument(
        "--answer-all",
        action="store_true",
        help="questions all answerable, checkpoint that abstains: fit anyway, and have it "
        "answer every question from then on (refused without it)",
    )
    c.set_defaults(func=cmd_calibrate)


def share(text: str) -> float:
    """A share in (0, 1), as argparse reads one."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1): give e.g. 0.5")
    return value


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
        args.dedupe_ids,
        FROM_CONFIG if args.unanswerable_share is None else args.unanswerable_share,
        args.answer_all,
        "lines" if args.no_progress else "bar",
        args.threshold_offset,
    )
    print(json.dumps({k: v for k, v in cal.to_dict().items() if k != "isotonic"}, indent=2))
    return 0
