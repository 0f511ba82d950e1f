"""Every command-line option has help text and is documented in docs/, not only in --help."""

import argparse
from collections.abc import Iterator
from pathlib import Path

from structqa.cli import build_parser

DOCS = Path(__file__).resolve().parents[1] / "docs"
REFERENCE = ("cli.md", "serve.md", "experiments.md")


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _commands(child, f"{prefix} {name}".strip())
            return
    yield prefix, parser


def _options() -> Iterator[tuple[str, str, argparse.Action]]:
    for command, parser in _commands(build_parser()):
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    yield command, option, action


def test_commands_are_found() -> None:
    names = {command for command, _ in _commands(build_parser())}
    assert {"train", "reader build", "analyze numbers", "serve", "score"} <= names


def test_every_option_has_help_text() -> None:
    missing = sorted(
        f"structqa {command} {option}"
        for command, option, action in _options()
        if not action.help or action.help == argparse.SUPPRESS
    )
    assert not missing, f"options without help text: {missing}"


def test_every_option_is_in_the_command_reference() -> None:
    text = "\n".join((DOCS / name).read_text(encoding="utf-8") for name in REFERENCE)
    missing = sorted(
        f"structqa {command} {option}"
        for command, option, _ in _options()
        if option not in text
    )
    assert not missing, (
        f"options documented only in --help: {missing}; add them to docs/{REFERENCE[0]} "
        "(docs/serve.md for the service)"
    )
