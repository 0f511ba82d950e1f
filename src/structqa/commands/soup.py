"""`structqa soup`: average the weights of runs that started from the same weights."""

from __future__ import annotations

import argparse

from structqa.commands.common import command

_SOUP_TEXT = """average the weights of runs that started from the same weights (a model soup)

Writes one checkpoint whose weights are the mean of the given checkpoints' (RUN/best), for
runs of one recipe that shared their starting weights (the same encoder, model.init_from and
--train.init_seed) and differed in batch order and dropout (--train.seed). It reads at one
model's cost. The soup keeps none of a member's metrics, calibration or export: score it
with `structqa evaluate`, then `structqa calibrate` and `structqa export` it like any
checkpoint. soup.json in it names the members.
"""


def add_parser(subparsers) -> None:
    p = command(subparsers, "soup", _SOUP_TEXT)
    p.add_argument("checkpoints", nargs="+", help="two or more checkpoint directories (RUN/best)")
    p.add_argument("--out", required=True, help="the soup's checkpoint directory (must not exist)")
    p.add_argument(
        "--force",
        action="store_true",
        help="average runs that started from other weights (another init_seed or init_from) "
        "anyway; soups are made of, and measured on, runs from one start",
    )
    p.set_defaults(func=cmd_soup)


def cmd_soup(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.training.soup import make_soup

    out = make_soup(args.checkpoints, args.out, force=args.force)
    print(f"wrote {out}: the mean of {len(args.checkpoints)} checkpoints' weights")
    print(f"score it: structqa evaluate {out} --eval FILE --runtime torch")
    print(f"calibrate it on validation questions: structqa calibrate {out} --on FILE")
    return 0
