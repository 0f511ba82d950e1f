"""``structqa quickstart``: train DyREx on 512 SQuAD questions, choose best/ on a validation
slice of the training file, score the held-out split once, and show a few held-out answers
picked by a fixed rule (every k-th question), right or wrong, beside the gold answers."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from structqa.commands.common import (
    INTERRUPTED,
    add_no_progress_argument,
    command,
    config_from_args,
    stopped,
)
from structqa.commands.settings import sections_epilog
from structqa.config import validation_fraction

# The quickstart trains the head that was most accurate with a few hundred questions in the
# low-data grid (docs/results/lowdata: DyREx +5.0 F1 over Independent at 512 questions, with
# its new parameters at 10x the encoder's learning rate, as in that grid's recipe). best/ is
# chosen on 2% of the training file (by context), scored once, after the last epoch (so best/
# is the last epoch: a small slice keeps that check to seconds); the held-out split is read
# only afterwards, to score best/ once.
QUICKSTART_OVERRIDES = [
    "model.head=dyrex",
    "train.head_lr=1e-3",
    "data.train_size=512",
    "data.validation=0.02",
    "data.eval=splits/squad1-heldout.mrqa.jsonl.gz",
    "train.seed=0",
    "train.output_dir=runs/quickstart",
    "train.eval_every_epoch=false",
]
#: how many held-out questions the quickstart shows
SHOWN = 5


def shown_indices(n: int, count: int = SHOWN) -> list[int]:
    """The fixed rule: every ``n // count``-th question of the file, from the first."""
    stride = max(1, n // count)
    return list(range(0, n, stride))[:count]


def _share(validation: str | None) -> str:
    fraction = validation_fraction(validation)
    return f"a {fraction:.0%} validation slice" if fraction else f"validation data {validation}"


def _ordinal(n: int) -> str:
    if n == 1:
        return "question"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix} question"


def saved_answer_probabilities(best: Path, eval_dir: Path) -> dict[str, float]:
    """The probability ``predict`` would return for each answer written in ``eval_dir``:
    calibrated by best/'s calibration.json when there is one, else the answer's n-best share
    (and, with unanswerable questions, the odds against the saved threshold)."""
    from structqa.calibration import load_calibration, returned_probabilities
    from structqa.calibration.report import predictions_from_files

    predictions = predictions_from_files(eval_dir)
    cal = load_calibration(best)
    threshold = cal.null_threshold if cal is not None else None
    ids = list(predictions)
    p = returned_probabilities([predictions[q] for q in ids], threshold, cal)
    return dict(zip(ids, p.tolist(), strict=True))


def _answer_lines(examples: Sequence, eval_dir: Path, probabilities: dict[str, float]) -> list[str]:
    """The shown questions with gold and predicted answers (from the written outputs) and the
    probability returned with each answer."""
    from structqa.metrics.squad import exact_match, f1_v1

    answers = json.loads((eval_dir / "predictions.json").read_text(encoding="utf-8"))
    picked = shown_indices(len(examples))
    stride = picked[1] - picked[0] if len(picked) > 1 else 1
    lines = [
        f"{len(picked)} held-out questions by a fixed rule (every {_ordinal(stride)} of the "
        f"{len(examples)}, from the first; not chosen for being right):",
    ]
    for i in picked:
        ex = examples[i]
        pred = answers.get(ex.id, "")
        prob = probabilities.get(ex.id, 0.0)
        golds = list(dict.fromkeys(ex.gold_texts)) or [""]
        em = max(exact_match(pred, g) for g in golds)
        f1 = max(f1_v1(pred, g) for g in golds)
        mark = "right" if em else ("partly right" if f1 > 0 else "wrong")
        lines += [
            f"  [{i + 1}] Q: {ex.question}",
            f"      gold: {' | '.join(golds)}",
            f"      model: {pred or '(no answer)'} "
            f"(probability {100 * prob:.1f}%; {mark}, F1 {f1:.2f})",
        ]
    return lines


#: the general reader's held-out SQuAD 1.1 F1 (the soup of two runs, docs/results/reader/,
#: 2026-11-29), on the same held-out questions the quickstart scores
READER_HELDOUT_F1 = 74.6


def next_commands(best: Path, f1: float | None = None) -> list[str]:
    """What to try next; ``f1``: this quickstart's held-out F1, beside the reader's."""
    mine = f"this reader's {f1:.1f}" if f1 is not None else "this reader's"
    return [
        "Next:",
        f'  structqa predict {best} --question "Who won?" --context "..."',
        f"  structqa evaluate {best} --eval YOUR_TEST.json",
        "  structqa train --data.train=YOUR_TRAIN.json --data.train_size=all "
        "--data.eval=YOUR_TEST.json --model.head=dyrex --train.head_lr=1e-3 "
        f"--model.init_from={best} --train.output_dir=runs/mine   # every question of "
        "your file, from this reader",
        f"  structqa serve {best}        # a page at http://127.0.0.1:8000/",
        "  structqa reader build         # the general reader from all the public SQuAD data "
        f"(4 to 6 h on 2 cores; it says how long first): held-out F1 {READER_HELDOUT_F1} "
        f"against {mine}; ask, serve and --model.init_from=reader then use it",
        "  structqa config               # every setting, with its default and help",
    ]


def cmd_quickstart(args: argparse.Namespace, extra: list[str]) -> int:
    from rich.console import Console
    from rich.markup import escape

    from structqa.training.checkpoint import RunExists
    from structqa.training.data import load_eval_examples
    from structqa.training.heldout import TEST_DIR
    from structqa.training.loop import run

    console = Console()
    cfg = config_from_args(args, extra, QUICKSTART_OVERRIDES)
    console.rule("[bold]structqa quickstart")
    console.print(
        f"Fine-tuning {cfg.model.encoder} encoder + {cfg.model.head} head on "
        f"{cfg.data.train_size} questions of {cfg.data.train} (seed {cfg.train.seed}); "
        f"best/ is chosen on {_share(cfg.data.validation)} of that file, then scored once on "
        f"{cfg.data.eval}"
    )
    from structqa.calibration.report import CalibrateOnce

    calibrate = CalibrateOnce()
    t0 = time.perf_counter()
    try:  # calibrated on the validation slice before the test: the probabilities shown below
        run(cfg, resume=args.resume, progress=not args.no_progress, calibrate=calibrate)
    except RunExists as err:
        raise ValueError(
            f"{err}. `structqa quickstart --resume` shows that run's result again"
        ) from None
    if stopped(cfg.train.output_dir):
        return INTERRUPTED
    calibrate.done(cfg)  # a resumed run may not have reached the test
    best = Path(cfg.train.output_dir) / "best"
    eval_dir = best / TEST_DIR
    if not (eval_dir / "metrics.json").is_file():
        raise ValueError(f"{eval_dir}: no test scores; was data.eval (or data.validation) unset?")
    metrics = json.loads((eval_dir / "metrics.json").read_text())
    em = metrics.get("exact_match", metrics.get("exact", 0.0))
    console.print(
        f"[bold green]held-out EM {em:.2f}  F1 {metrics.get('f1', 0.0):.2f}[/]  "
        f"({time.perf_counter() - t0:.0f} s; {eval_dir / 'predictions.json'})"
    )
    examples, _ = load_eval_examples(cfg)
    shown = _answer_lines(examples, eval_dir, saved_answer_probabilities(best, eval_dir))
    for line in [*shown, "", *next_commands(best, metrics.get("f1"))]:
        console.print(escape(line), highlight=False, soft_wrap=True)
    return 0


_QUICKSTART_TEXT = """train on 512 SQuAD questions, score the held-out split, show some answers

Fine-tunes the DyREx head on 512 questions of splits/squad1-train (seed 0), chooses best/ on 2%
of that file, scores best/ once on splits/squad1-heldout and prints every k-th held-out question
with the gold and the predicted answer.
"""


def add_parser(subparsers) -> None:
    q = command(
        subparsers,
        "quickstart",
        _QUICKSTART_TEXT,
        epilog="Overrides as for `structqa train`, e.g. --model.head=independent. "
        + sections_epilog("train"),
    )
    q.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    q.add_argument("--resume", action="store_true", help="continue or re-show the run")
    add_no_progress_argument(q)
    q.set_defaults(func=cmd_quickstart, config=None)
