"""``structqa predict``: answer one question about a passage, or every question of a file."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from structqa.commands.common import (
    WHOLE_WORDS_HELP,
    add_bf16_argument,
    add_no_progress_argument,
    add_runtime_argument,
    answering_predictor,
)

log = logging.getLogger("structqa")


def null_odds_path(predictions: Path) -> Path:
    """Where ``predict --file`` writes the null odds of ``predictions``: null_odds.json beside
    predictions.json (as ``evaluate`` does), else NAME.null_odds.json beside NAME.json, so two
    prediction files in one folder keep their own."""
    if predictions.name == "predictions.json":
        return predictions.with_name("null_odds.json")
    return predictions.with_name(f"{predictions.stem}.null_odds.json")


def _trained_dedupe_ids(checkpoint: str) -> bool:
    """The checkpoint's ``data.dedupe_ids``, read from its saved config without loading the
    model (False where there is none to read: loading it then says what is wrong)."""
    from structqa.models.build import checkpoint_config
    from structqa.paths import reader_checkpoint_of

    try:
        return checkpoint_config(reader_checkpoint_of(checkpoint)).data.dedupe_ids is True
    except (OSError, ValueError, AttributeError, TypeError):
        return False


def cmd_predict(args: argparse.Namespace, extra: list[str]) -> int:
    if args.file and (args.question is not None or args.context is not None):
        raise ValueError("give either --file DATA or --question and --context, not both")
    if not args.file:
        for name in ("question", "context"):
            value = getattr(args, name)
            if value is None:
                raise ValueError("give --question and --context, or --file DATA")
            if not value.strip():
                raise ValueError(f"--{name} is empty")
    from structqa.data.readers import read_questions

    ds, dedupe = None, args.dedupe_ids
    if args.file:  # read (and checked) before any model work: a bad file fails at once
        # repeated ids renamed as the checkpoint's training renamed them, or as asked
        dedupe = dedupe or _trained_dedupe_ids(args.checkpoint)
        ds = read_questions(args.file, dedupe_ids=dedupe)
    predictor = answering_predictor(args)
    if ds is not None:
        from structqa.io import write_json
        from structqa.training.progress import tracked

        if not dedupe and getattr(predictor.config.data, "dedupe_ids", False):
            ds = read_questions(args.file, dedupe_ids=True)  # (as the loaded config says)
        mode = "lines" if args.no_progress else "bar"
        with tracked(mode, "answering", "windows") as progress:
            preds = predictor.predict_examples(ds.examples, progress=progress)
        answers = {k: p.answer(predictor.null_threshold) for k, p in preds.items()}
        out = Path(args.out or "predictions.json")
        odds_file = null_odds_path(out)
        write_json(out, answers)
        write_json(odds_file, {k: p.null_odds for k, p in preds.items()})
        log.info("wrote %d predictions to %s, their null odds to %s", len(answers), out, odds_file)
        if predictor.questions_truncated:
            print(
                f"{predictor.questions_truncated} of {len(answers)} questions were longer than "
                f"data.max_query_len = {predictor.features.max_query_len} tokens and were "
                "answered cut to it (their ids are in the warning above)",
                file=sys.stderr,
            )
        return 0
    ans = predictor.predict(args.question, args.context)
    print(json.dumps(ans.to_json(5), indent=2))
    return 0


def add_parser(sub) -> None:
    pr = sub.add_parser("predict", help="answer one question, or every question of a file")
    pr.add_argument("checkpoint")
    pr.add_argument("--question", help="one question (with --context)")
    pr.add_argument("--context", help="the passage --question is asked about")
    pr.add_argument(
        "--file",
        help="questions to answer: SQuAD/MRQA/CSV data, or questions alone (a CSV/TSV with "
        "question and context columns; JSON lines of id, question, context)",
    )
    pr.add_argument(
        "--dedupe-ids",
        action="store_true",
        help="--file: rename repeated question ids (ID#2, ID#3, ...) instead of refusing the "
        "file (default: as the checkpoint was trained, data.dedupe_ids)",
    )
    add_no_progress_argument(pr)
    pr.add_argument("--out", help="predictions file (default predictions.json)")
    add_bf16_argument(pr)
    add_runtime_argument(pr)
    pr.add_argument("--whole-words", action=argparse.BooleanOptionalAction, help=WHOLE_WORDS_HELP)
    pr.set_defaults(func=cmd_predict)
