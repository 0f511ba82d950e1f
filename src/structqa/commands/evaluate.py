"""``structqa evaluate CHECKPOINT [--eval FILE]``: score a checkpoint on a test file once."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

from structqa.commands.settings import sections_epilog

log = logging.getLogger("structqa")


def cmd_evaluate(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.calibration.report import calibration_report, load_calibration
    from structqa.config import apply_overrides
    from structqa.evaluation import write_outputs
    from structqa.runtime import default_device
    from structqa.runtimes.select import load
    from structqa.training.heldout import score_file

    # a checkpoint (torch) or an export (onnxruntime); a checkpoint scores on the GPU if any.
    # A checkpoint keeps torch unless --runtime says otherwise, so that a recorded score does
    # not depend on the CPU kind (predict and serve take the fastest runtime instead)
    runtime = args.runtime
    if runtime is None:
        has_torch = (Path(args.checkpoint) / "model.safetensors").is_file()
        runtime = "torch" if has_torch else "auto"
    loaded = load(args.checkpoint, runtime, bf16=args.bf16)
    model, tokenizer, cfg = loaded.model, loaded.tokenizer, loaded.config
    device = default_device() if loaded.choice.onnx_dir is None else torch.device("cpu")
    print(f"runtime {loaded.choice.runtime} ({loaded.choice.reason})", file=sys.stderr)
    if args.data:
        cfg.data.dir = args.data
    # the whole file unless --eval-size says otherwise (the checkpoint's data.eval_size was
    # a training-time setting)
    cfg.data.eval_size = args.eval_size
    for item in extra:
        k = item.lstrip("-").partition("=")[0]
        if k.partition(".")[0] not in ("data", "decode") and k != "train.eval_batch_size":
            raise ValueError(
                f"--{k} cannot change a trained model; only data.*, decode.* and "
                "train.eval_batch_size overrides apply here"
            )
    apply_overrides(cfg, extra)  # the config's own checks and conversions
    t0 = time.perf_counter()
    precision = "on" if loaded.bf16 else "off"  # the runtime chosen above decides
    # the no-answer threshold fitted on validation questions (calibration.json), if any;
    # else evaluate_model tunes one on this file and says so
    calibrator = load_calibration(args.checkpoint)
    threshold = calibrator.null_threshold if calibrator else None
    # the threshold was fitted on the verifier's null odds where the calibration has one
    rescore = calibrator.verify if calibrator is not None and calibrator.verifier else None
    if rescore is not None:
        log.info("null odds re-scored by the calibration's answerability verifier")
    result, examples, v2 = score_file(
        model, tokenizer, cfg, args.eval, precision, device, threshold, rescore
    )
    log.info("evaluated %d questions in %.1f s", len(examples), time.perf_counter() - t0)
    out = Path(args.out or Path(args.checkpoint) / "eval")
    result.metrics.update(calibration_report(result, examples, v2, calibrator, out))
    write_outputs(result, out)
    print(json.dumps(result.metrics, indent=2))
    log.info(
        "wrote predictions.json, nbest_predictions.json, null_odds.json, metrics.json to %s", out
    )
    return 0


def add_parser(subparsers) -> None:
    from structqa.commands.common import add_runtime_argument

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
    add_runtime_argument(
        e, default=None, note="; default: torch for a checkpoint, the graph for an export"
    )
    e.set_defaults(func=cmd_evaluate)
