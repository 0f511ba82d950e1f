"""``structqa evaluate CHECKPOINT [--eval FILE]``: score a checkpoint on a test file once."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from structqa.commands.common import add_bf16_argument, command
from structqa.commands.settings import sections_epilog

log = logging.getLogger("structqa")


def cmd_evaluate(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.prediction.scoring import default_runtime, evaluate_checkpoint

    # a checkpoint (torch) or an export (onnxruntime); a checkpoint scores on the GPU if any.
    # A checkpoint keeps torch unless --runtime says otherwise, so that a recorded score does
    # not depend on the CPU kind (predict and serve take the fastest runtime instead)
    runtime = args.runtime or default_runtime(args.checkpoint)
    out = Path(args.out) if args.out else default_out(Path(args.checkpoint), args.eval)
    metrics = evaluate_checkpoint(
        args.checkpoint,
        args.eval,
        out,
        runtime,
        args.bf16,
        extra,
        args.data,
        args.eval_size,
        progress="lines" if args.no_progress else "bar",
    )
    print(f"runtime {metrics.pop('runtime')}", file=sys.stderr)
    print(json.dumps(metrics, indent=2))
    log.info(
        "wrote predictions.json, nbest_predictions.json, null_odds.json, metrics.json to %s", out
    )
    return 0


def default_out(checkpoint: Path, eval_file: str | None) -> Path:
    """CHECKPOINT/eval for the checkpoint's own test file (where training scored it), else
    CHECKPOINT/eval-NAME: scoring another file does not overwrite the end-of-training test."""
    if not eval_file:
        return checkpoint / "eval"
    name = Path(eval_file).name
    for suffix in (".gz", ".jsonl", ".json", ".csv", ".tsv"):
        name = name.removesuffix(suffix)
    return checkpoint / f"eval-{name or 'file'}"


_EVALUATE_TEXT = """score a checkpoint on a test file

Answers every question of the test file with CHECKPOINT and scores it (SQuAD v1.1, or v2.0 when
the file has unanswerable questions); writes predictions.json, nbest_predictions.json,
null_odds.json and metrics.json.
"""


def add_parser(subparsers) -> None:
    from structqa.commands.common import add_no_progress_argument, add_runtime_argument

    e = command(
        subparsers,
        "evaluate",
        _EVALUATE_TEXT,
        epilog="Overrides: --data.* and --decode.* settings that reading reads (e.g. "
        "--decode.whole_words=true, --data.max_seq_len; not the training data's, nor "
        "decode.verifier or decode.unanswerable_share, which `structqa calibrate` fits) and "
        "--train.eval_batch_size. " + sections_epilog("train"),
    )
    e.add_argument("checkpoint", help="a checkpoint directory, e.g. RUN/best")
    e.add_argument(
        "--eval",
        help="SQuAD/MRQA/CSV question file to score (default: the checkpoint config's data.eval)",
    )
    e.add_argument("--data", help="data directory for relative paths")
    e.add_argument("--eval-size", type=int, help="score only the first N questions")
    e.add_argument(
        "--out",
        help="output directory (default CHECKPOINT/eval, or CHECKPOINT/eval-NAME for "
        "--eval NAME.json)",
    )
    add_bf16_argument(e)
    add_no_progress_argument(e)
    add_runtime_argument(
        e, default=None, note="; default: torch for a checkpoint, the graph for an export"
    )
    e.set_defaults(func=cmd_evaluate)
