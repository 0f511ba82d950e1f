"""`structqa negatives`: unanswerable rewrites of a file's answerable questions (the rules:
:mod:`structqa.training.negatives`)."""

from __future__ import annotations

import argparse

from structqa.commands.common import command
from structqa.text.annotate import DEFAULT_MODEL
from structqa.training.negatives import write_negatives

_NEGATIVES_TEXT = """add unanswerable rewrites (entity swaps, antonyms, negations) to a QA file

Writes FILE's questions and, for each answerable one, at most one unanswerable rewrite on the
same passage (an entity the passage mentions swapped for one it does not, a word swapped for its
opposite, or 'not' before the main verb), as SQuAD v2.0 JSON. Train on the result to teach a
model to abstain when a file has no unanswerable questions of its own.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    n = command(subparsers, "negatives", _NEGATIVES_TEXT)
    n.add_argument(
        "source", help="SQuAD v1.1/v2.0 JSON, MRQA .jsonl[.gz], Hugging Face records or .csv/.tsv"
    )
    n.add_argument("--out", required=True, help="the SQuAD v2.0 JSON file to write")
    n.add_argument(
        "--exclude",
        nargs="+",
        action="extend",
        default=[],
        help="files whose passages are dropped first (test files)",
    )
    n.add_argument(
        "--rate", type=float, default=1.0, help="fraction of answerable questions to rewrite"
    )
    n.add_argument("--seed", type=int, default=0, help="draws the rules' order and choices")
    n.add_argument(
        "--spacy-model",
        default=DEFAULT_MODEL,
        help="the spaCy pipeline that finds the entities and verbs to rewrite "
        f"(default {DEFAULT_MODEL})",
    )
    n.set_defaults(func=cmd_negatives)


def cmd_negatives(args: argparse.Namespace, extra: list[str]) -> int:
    report = write_negatives(
        args.source, args.out, args.exclude, args.rate, args.seed, args.spacy_model
    )
    print(f"{args.out}: {report.summary()}")
    return 0
