"""``structqa reader build``: the general reader, built once (:mod:`structqa.reader.build`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from structqa.commands.common import INTERRUPTED, add_no_progress_argument, command
from structqa.paths import READER_ENV, default_reader_dir


def cmd_reader_build(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.reader.build import BuildOptions, Stopped, build

    if args.members < 1:
        raise ValueError(f"--members {args.members}: give 1 (one run) or more (a soup of runs)")
    out = Path(args.out).expanduser() if args.out else default_reader_dir()
    command = "structqa " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    opts = BuildOptions(
        out=out,
        seed=args.seed,
        data_dir=args.data,
        baseline=args.baseline,
        progress=not args.no_progress,
        overrides=tuple(x.lstrip("-") for x in extra),
        heldout_size=args.heldout_size,
        members=args.members,
        slice=args.slice,
        command=command if sys.argv[1:3] == ["reader", "build"] else "structqa reader build",
    )
    try:
        build(opts)
    except Stopped as e:
        print(f"structqa reader build: {e}; run the same command again to go on", file=sys.stderr)
        return INTERRUPTED
    if args.out and Path(args.out).expanduser().resolve() != default_reader_dir().resolve():
        print(f"to answer with it by default: export {READER_ENV}={out}")
    return 0


_READER_TEXT = """the general reader: build it once, then ask, serve and train start from it

The general reader is the most accurate span reader the public SQuAD data on this machine makes.
`ask`, `serve` (without a checkpoint) and `train --model.init_from=reader` use it once built.
"""


_BUILD_TEXT = """train, calibrate, export and score the general reader (resumable)

Trains the general reader (by default two runs from one start, their weights averaged: see
--members) on the SQuAD 1.1 training pool, the SQuAD 2.0 training split and unanswerable
rewrites (every passage of both held-out splits excluded), chooses it on a validation slice,
calibrates it on the slice's human-written questions weighted to SQuAD 2.0's share of
unanswerable ones (answer probabilities, no-answer threshold, answerability verifier;
--decode.unanswerable_share=P fits another share), exports it to int8 ONNX, scores both
held-out splits and writes a model card. It says how long training will take before it
starts; stopped, the same command goes on from where it was.
Settings after the options override the recipe (e.g. --model.block=null: no added SA
sub-layer, about 1.5x faster to train and to read, about 0.6 F1 lower on SQuAD 1.1 over 3
seeds).
"""


def add_parser(sub) -> None:
    r = command(sub, "reader", _READER_TEXT)
    rs = r.add_subparsers(dest="reader_command", required=True)
    b = command(rs, "build", _BUILD_TEXT)
    b.add_argument(
        "--out",
        help=f"where to build (default: {default_reader_dir()}, where ask, serve and "
        "init_from=reader look; $STRUCTQA_HOME moves it)",
    )
    b.add_argument("--seed", type=int, default=0, help="training seed (and the rewrites')")
    b.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    b.add_argument(
        "--baseline",
        action="store_true",
        help="also train the plain Independent recipe on the same SQuAD 1.1 questions and "
        "score it the same way, for comparison",
    )
    b.add_argument(
        "--members",
        type=int,
        default=2,
        help="train K runs of the recipe from one start (batch orders --seed .. --seed+K-1) and "
        "make the reader their greedy soup on the validation slice: K times the training, "
        "one model's reading time (default 2: about 1.6 F1 above one run, measured on "
        "SQuAD 1.1 held-out; 1 builds in half the time)",
    )
    b.add_argument(
        "--slice",
        choices=("passages", "articles"),
        default="passages",
        help="what chooses and calibrates the reader: 5 %% of the passages of every training "
        "article (default), or a quarter of SQuAD 2.0's training articles held out whole "
        "(calibrated for articles it never read, ECE 0.07 against 0.12, but trained on fewer "
        "human-written unanswerable questions: held-out AUC 71.8 against 75.6 at seed 0's "
        "first run; docs/results/reader)",
    )
    b.add_argument(
        "--heldout-size",
        type=int,
        help="score only the first N questions of each held-out file (quick checks)",
    )
    add_no_progress_argument(b)
    b.set_defaults(func=cmd_reader_build)
