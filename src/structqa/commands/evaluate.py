"""``structqa evaluate CHECKPOINT [--eval FILE]``: score a checkpoint on a test file once."""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from structqa.commands.settings import sections_epilog

log = logging.getLogger("structqa")


def cmd_evaluate(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.config import _apply  # the config's own checks for the overrides
    from structqa.evaluation import write_outputs
    from structqa.models.build import model_from_checkpoint
    from structqa.runtime import default_device
    from structqa.training.heldout import score_file

    model, tokenizer, cfg = model_from_checkpoint(args.checkpoint)
    device = default_device()  # a checkpoint loads on the CPU; score on the GPU if any
    model.to(device)
    if args.data:
        cfg.data.dir = args.data
    # the whole file unless --eval-size says otherwise (the checkpoint's data.eval_size was
    # a training-time setting)
    cfg.data.eval_size = args.eval_size
    for item in extra:
        k, _, v = item.lstrip("-").partition("=")
        section, _, key = k.partition(".")
        if section not in ("data", "decode") and k != "train.eval_batch_size":
            raise ValueError(
                f"--{k} cannot change a trained model; only data.*, decode.* and "
                "train.eval_batch_size overrides apply here"
            )
        _apply(cfg, {section: {key: v}}, "")
    t0 = time.perf_counter()
    result, examples = score_file(model, tokenizer, cfg, args.eval, args.bf16, device)
    log.info("evaluated %d questions in %.1f s", len(examples), time.perf_counter() - t0)
    out = Path(args.out or Path(args.checkpoint) / "eval")
    write_outputs(result, out)
    print(json.dumps(result.metrics, indent=2))
    log.info(
        "wrote predictions.json, nbest_predictions.json, null_odds.json, metrics.json to %s", out
    )
    return 0


def add_parser(subparsers) -> None:
    e = subparsers.add_parser(
        "evaluate",
        help="score a checkpoint on a test file",
        description="Answers every question of the test file with CHECKPOINT and scores it "
        "(SQuAD v1.1, or v2.0 when the file has unanswerable questions); writes "
        "predictions.json, nbest_predictions.json, null_odds.json and metrics.json.",
        epilog="Overrides: --data.* and --decode.* settings (e.g. --decode.whole_words=true) "
        "and --train.eval_batch_size. " + sections_epilog("train"),
    )
    e.add_argument("checkpoint", help="a checkpoint directory, e.g. RUN/best")
    e.add_argument(
        "--eval", help="SQuAD/MRQA file to score (default: the checkpoint config's data.eval)"
    )
    e.add_argument("--data", help="data directory for relative paths")
    e.add_argument("--eval-size", type=int, help="score only the first N questions")
    e.add_argument("--out", help="output directory (default CHECKPOINT/eval)")
    e.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    e.set_defaults(func=cmd_evaluate)
