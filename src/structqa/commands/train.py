"""``structqa train``, ``pretrain``, ``drop-train`` and ``drop-predict``: the three training
tasks (span QA, masked-LM pre-training, DROP) and the DROP reader's predictions."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from structqa.commands.common import (
    INTERRUPTED,
    add_bf16_argument,
    add_no_progress_argument,
    config_from_args,
    stopped,
)
from structqa.commands.settings import sections_epilog

log = __import__("logging").getLogger("structqa")


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.calibration.report import CalibrateOnce
    from structqa.training.loop import run

    cfg = config_from_args(args, extra)
    progress = not args.no_progress
    calibrate = CalibrateOnce()
    result = run(cfg, resume=args.resume, progress=progress, calibrate=calibrate)
    if stopped(cfg.train.output_dir):
        return INTERRUPTED
    if (cal := calibrate.done(cfg)) is not None:
        log.info("best/calibration.json: %s, null threshold %s", cal.method, cal.null_threshold)
    if result is not None:
        tested = cfg.data.validation is not None and cfg.data.eval
        what = f"the test file {cfg.data.eval}" if tested else "the data that chose it"
        print(f"best/ ({Path(cfg.train.output_dir) / 'best'}) on {what}:")
        print(json.dumps(result.metrics, indent=2))
    return 0


def cmd_pretrain(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.pretrain.config import load_pretrain_config
    from structqa.pretrain.loop import run

    return _run_task(args, extra, load_pretrain_config, run, lambda r: r.metrics)


def cmd_drop_train(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.ncbert.config import load_drop_config
    from structqa.ncbert.loop import run

    return _run_task(args, extra, load_drop_config, run, lambda r: r)


def _run_task(args, extra, load, run, metrics_of) -> int:
    """Load the task's config (YAML <- overrides <- --data), run it (resumable), print the
    metrics of its result; 130 when it was stopped before finishing."""
    overrides = list(extra) + ([f"data.dir={args.data}"] if args.data else [])
    cfg = load(args.config, overrides)
    result = run(cfg, resume=args.resume, progress=not args.no_progress)
    if stopped(cfg.train.output_dir):
        return INTERRUPTED
    if result is not None:
        print(json.dumps(metrics_of(result), indent=2))
    return 0


def cmd_drop_predict(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.ncbert.loop import predict_file, predict_questions

    one = args.question is not None or args.passage is not None
    if one == (args.drop_file is not None) or (one and not (args.question and args.passage)):
        raise ValueError(
            "drop-predict answers a DROP file (DROP_FILE) or one question (--question Q "
            "--passage P, both non-empty): give one of the two"
        )
    if one:
        (answer,) = predict_questions(args.checkpoint, [(args.question, args.passage)], args.bf16)
        print(json.dumps({"answer": answer}, ensure_ascii=False))
        return 0
    metrics = predict_file(args.checkpoint, args.drop_file, args.out, args.bf16)
    print(json.dumps({k: metrics[k] for k in ("global_em", "global_f1", "total")}))
    return 0


def _task_parser(sub, name: str, config_help: str, data_help: str, func, **kw) -> None:
    """A training subcommand's parser: a YAML config, --data, --resume, --no-progress."""
    t = sub.add_parser(name, epilog=sections_epilog(name), **kw)
    t.add_argument("config", nargs="?", help=config_help)
    t.add_argument("--data", help=data_help)
    t.add_argument("--resume", action="store_true", help="continue an interrupted run")
    add_no_progress_argument(t)
    t.set_defaults(func=func)


def add_parser(sub) -> None:
    data_dir = "data directory (else $STRUCTQA_DATA or ../shared/data)"
    _task_parser(
        sub,
        "train",
        "YAML config (defaults if omitted)",
        data_dir,
        cmd_train,
        help="fine-tune a span-extraction model",
        description="Fine-tunes on data.train, chooses best/ on data.validation (by default "
        "10% of data.train, split by context) and, when data.eval is given, scores best/ once "
        "on that test file (best/eval/).",
    )
    _task_parser(
        sub,
        "pretrain",
        "YAML config (defaults if omitted)",
        "data directory for a relative corpus path",
        cmd_pretrain,
        help="continue masked-LM pre-training of an encoder",
    )
    _task_parser(
        sub,
        "drop-train",
        "YAML config, e.g. configs/ncbert/ncbert.yaml",
        data_dir,
        cmd_drop_train,
        help="train GenBERT / NC-BERT on DROP files",
    )

    dp = sub.add_parser(
        "drop-predict", help="answer a DROP file, or one question, with a drop-train checkpoint"
    )
    dp.add_argument("checkpoint", help="a drop-train checkpoint directory (RUN/best)")
    dp.add_argument("drop_file", nargs="?", help="DROP JSON file to answer and score")
    dp.add_argument(
        "--out",
        default="predictions.json",
        help="query id -> answer (JSON); the scores go beside it as NAME.metrics.json",
    )
    dp.add_argument("--question", help="one question to answer (with --passage), printed")
    dp.add_argument("--passage", help="the passage --question is about")
    add_bf16_argument(dp)
    dp.set_defaults(func=cmd_drop_predict)
