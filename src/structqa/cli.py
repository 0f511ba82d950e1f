"""`structqa`: one command with subcommands (train, evaluate, predict, serve, score, ...).

Each subcommand is a module of :mod:`structqa.commands` that registers itself with
``add_parser(subparsers)``; this module parses, sets up logging and turns bad input into one
clear line."""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from pathlib import Path

from structqa.commands import (
    calibrate,
    data,
    documents,
    evaluate,
    experiment,
    explain,
    export,
    negatives,
    predict,
    quickstart,
    reader,
    scores,
    serve,
    settings,
    soup,
    train,
)
from structqa.commands.common import INTERRUPTED
from structqa.cpu import tune_allocator

log = logging.getLogger("structqa")

#: in the order `structqa --help` lists them
SUBCOMMANDS = (
    train,
    reader,
    predict,
    explain,
    serve,
    data,
    quickstart,
    evaluate,
    settings,
    negatives,
    experiment,
    export,
    calibrate,
    soup,
    scores,
    documents,
)
#: the subcommands that take --section.key=value config overrides (``experiment`` refuses them
#: itself, saying where they go); every other one refuses them here, so that a mistyped
#: option is never silently ignored
TAKES_OVERRIDES = (
    "train",
    "pretrain",
    "drop-train",
    "evaluate",
    "quickstart",
    "reader",
    "experiment",
)


def _setup_logging(verbose: bool) -> None:
    from rich.console import Console
    from rich.logging import RichHandler

    # on stderr: stdout carries the commands' results (predict's JSON, tables) for pipes
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[
            RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
        ],
    )
    for noisy in ("transformers", "accelerate", "httpx", "filelock", "faiss", "bm25s"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # a damaged PDF is skipped and named by the document reader; pypdf's notes on it name no file
    logging.getLogger("pypdf").setLevel(logging.ERROR)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="structqa",
        description="Extractive QA with structural attention biases.",
        epilog="Config overrides: --section.key=value (e.g. --train.lr=3e-5 --data.train_size=all)",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return p


def _subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _late_positionals(
    command: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> list[str]:
    """An optional positional (``nargs="?"``) given after an option: argparse has settled it
    as absent by then and leaves the value over (``drop-predict CKPT --out F FILE``); fill
    it, in order, with left-over values that name a file or folder (a stray word stays an
    unrecognized argument), and return what is still left over."""
    empty = [
        a
        for a in command._actions
        if not a.option_strings and a.nargs == "?" and getattr(args, a.dest, None) is None
    ]
    left = list(extra)
    for action in empty:
        value = next((x for x in left if not x.startswith("-") and Path(x).exists()), None)
        if value is None:
            break
        setattr(args, action.dest, value)
        left.remove(value)
    return left


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    extra = _late_positionals(_subcommand_parser(parser, args.command), args, extra)
    bad = [x for x in extra if not (x.startswith("--") and "=" in x and "." in x.split("=")[0])]
    if bad:
        # the subcommand's own usage, and the option meant where one is close
        command = _subcommand_parser(parser, args.command)
        options = [o for a in command._actions for o in a.option_strings]
        # a setting given as `--data.train FILE`: its value may have been read as a positional
        spaced = [x for x in bad if x.startswith("--") and "=" not in x and "." in x]
        hints = [
            f"{x}: a setting takes its value after '=' ({x}=VALUE, one argument)" for x in spaced
        ] + [
            f"{x.split('=')[0]}: did you mean {close[0]}?"
            for x in bad
            if x.startswith("-")
            and x not in spaced
            and (close := difflib.get_close_matches(x.split("=")[0], options, n=1, cutoff=0.6))
        ]
        command.error(f"unrecognized arguments: {' '.join(bad)}" + "".join(f"; {h}" for h in hints))
    if extra and args.command not in TAKES_OVERRIDES:
        parser.error(f"{args.command} takes no config overrides: {' '.join(extra)}")
    _setup_logging(args.verbose)
    tune_allocator()  # large CPU tensors reuse freed memory (see its docstring)
    try:
        code = args.func(args, extra)
    except (OSError, ValueError) as e:
        # bad input (files, configs, data, a port in use): one clear line; --verbose shows
        # the traceback
        if args.verbose:
            raise
        print(f"structqa {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # (a training loop catches the signal itself and stops cleanly; this is elsewhere,
        # e.g. while data is read or a model loads)
        if args.verbose:
            raise
        print(f"structqa {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    end_distributed()
    return code


def end_distributed() -> None:
    """Close the process group of a command that finished under ``torchrun`` (training's gloo
    or NCCL): left to the interpreter's exit, gloo's threads are torn down in no set order,
    and a process that finished its work could still abort ("terminate called without an
    active exception"). Not after an error: the other processes may be waiting in a
    collective, and closing the group would wait for them. Nothing to do in a single
    process, and torch is not imported for it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
