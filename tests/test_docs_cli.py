"""Every command-line option has help text and is documented in docs/, not only in --help."""

import argparse
from collections.abc import Iterator
from pathlib import Path

from structqa.cli import build_parser

DOCS = Path(__file__).resolve().parents[1] / "docs"


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


#: options explained once, in the paragraph of options many commands share
SHARED = ("--data", "--bf16", "--no-progress", "--resume", "--runtime")
#: commands documented on a page of their own rather than in a row of the table
OWN_PAGE = {"serve": "serve.md", "experiment": "experiments.md"}


def _rows(text: str, command: str) -> str:
    """The table rows of docs/cli.md that document ``structqa COMMAND``."""
    return "\n".join(
        line
        for line in text.splitlines()
        if line.startswith("| `structqa ")
        and (f"`structqa {command} " in line or f"`structqa {command}`" in line)
    )


def test_every_option_is_in_its_commands_row() -> None:
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = []
    for command, option, _ in _options():
        if option in SHARED and option in cli:
            continue
        if command in OWN_PAGE:
            where = (DOCS / OWN_PAGE[command]).read_text(encoding="utf-8") + _rows(cli, command)
        else:
            where = _rows(cli, command)
            assert where, f"docs/cli.md has no row for `structqa {command}`"
        written = option.replace("--no-", "--", 1).replace("--", "--[no-]", 1)
        if option not in where and written not in where:
            missing.append(f"structqa {command} {option}")
    assert not missing, (
        f"options missing from their command's row of docs/cli.md: {sorted(missing)} "
        "(docs/serve.md for the service, docs/experiments.md for the runner)"
    )
