"""What the subcommands share: the training config from the command line, the exit status of
a run that stopped before finishing, and the options of the commands that answer questions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from structqa.runtimes.select import RUNTIMES

# exit status of a run stopped by SIGINT/SIGTERM (the shell's 128 + SIGINT): the stop is
# clean and resumable, but `train ... && evaluate ...` must not go on as if it had finished
INTERRUPTED = 130


def config_from_args(
    args: argparse.Namespace, extra: list[str], base: list[str] | None = None
) -> Any:
    """``structqa train``'s config: defaults <- ``base`` <- the YAML file <- overrides."""
    from structqa.config import load_config

    overrides = list(base or []) + list(extra)
    if getattr(args, "data", None):
        overrides.append(f"data.dir={args.data}")
    return load_config(getattr(args, "config", None), overrides)


def stopped(output_dir: str | Path) -> bool:
    """Whether the run in ``output_dir`` stopped before finishing (its last/ says so)."""
    state = Path(output_dir) / "last" / "train_state.json"
    if not state.is_file():
        return False
    if json.loads(state.read_text()).get("finished"):
        return False
    print(
        f"structqa: the run in {output_dir} stopped before finishing; continue it with --resume",
        file=sys.stderr,
    )
    return True


WHOLE_WORDS_HELP = (
    "widen answers that start or end inside a word to the whole word, or not "
    "(--no-whole-words); default: the checkpoint's decode.whole_words"
)


RUNTIME_HELP = (
    "torch (bf16 per --bf16), torch-bf16, torch-fp32, onnx (int8 if exported, else fp32), "
    "onnx-int8, onnx-fp32, or auto: bf16 torch where the hardware computes bf16 natively, "
    "else int8 ONNX when exported (CHECKPOINT/onnx or an export dir; predict and serve "
    "write it once where bf16 is not native), else fp32"
)


def command(sub: Any, name: str, text: str, **kw: Any) -> argparse.ArgumentParser:
    """Register subcommand ``name`` on ``sub`` (a ``parser.add_subparsers()`` object): the
    first paragraph of ``text`` is its one-line help, the rest its description (argparse
    re-wraps both); ``kw`` goes to ``add_parser`` as is (``epilog=``, ...)."""
    help_text, _, description = text.strip().partition("\n\n")
    return sub.add_parser(
        name, help=" ".join(help_text.split()), description=" ".join(description.split()), **kw
    )


def positive_int(text: str) -> int:
    """An argparse type: a whole number of 1 or more (a count of questions: 0 scored nothing
    and a negative one sliced the last questions off)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give 1 or more")
    return value


def add_sample_arguments(
    parser: Any, option: str, seed_option: str, help: str, seed: int = 0, group: Any = None
) -> None:
    """``option N`` (on ``group`` where given, e.g. a mutually exclusive one, else on
    ``parser``) with ``seed_option``, the seed that draws those N questions."""
    (group or parser).add_argument(option, type=positive_int, metavar="N", help=help)
    parser.add_argument(seed_option, type=int, default=seed, help=f"draws the {option} questions")


def add_bf16_argument(parser: Any) -> None:
    parser.add_argument(
        "--bf16",
        default="auto",
        choices=["auto", "on", "off"],
        help="bf16 autocast for torch: auto where the CPU computes bf16 natively (emulated bf16 "
        "is many times slower) or the GPU supports it, on (refused where bf16 is emulated), off",
    )


def add_no_progress_argument(parser: Any) -> None:
    parser.add_argument(
        "--no-progress", action="store_true", help="log lines instead of progress bars"
    )


def add_runtime_argument(
    parser: argparse.ArgumentParser, default: str | None = "auto", note: str = ""
) -> None:
    parser.add_argument("--runtime", default=default, choices=RUNTIMES, help=RUNTIME_HELP + note)


def answering_predictor(args: argparse.Namespace):
    """The Predictor of ``predict`` and ``serve``: CHECKPOINT with --bf16, --runtime and
    --whole-words, on the fastest runtime at hand (on a CPU where bf16 does not pay, the int8
    export, written once beside the checkpoint; logged)."""
    from structqa.prediction import Predictor

    return Predictor.from_checkpoint(
        args.checkpoint,
        bf16=args.bf16,
        whole_words=args.whole_words,
        runtime=args.runtime,
        make_int8_export=True,
    )
