"""``structqa explain`` (what the start/end queries attend to) and ``structqa analyze
numbers`` (NC-BERT's number tables)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from structqa.commands.common import WHOLE_WORDS_HELP, add_bf16_argument


def cmd_explain(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.analysis import RendererMissing, explain, save_explanation
    from structqa.models.build import model_from_checkpoint

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a directory")
    model, tokenizer, cfg = model_from_checkpoint(args.checkpoint)
    att = explain(
        model,
        tokenizer,
        cfg,
        args.question,
        args.context,
        bf16=args.bf16,
        whole_words=args.whole_words,
    )
    a, b = att.answer_tokens
    print(
        f"answer: {att.answer!r} (chars {att.answer_chars[0]}-{att.answer_chars[1]}, "
        f"tokens {a}-{b}, window {att.window + 1} of {att.num_windows})"
    )
    try:
        files = save_explanation(att, out)
    except RendererMissing as err:
        print(f"wrote {out / 'attention.json'}\nwrote {out / 'attention.html'}")
        print(f"structqa explain: error: {err}", file=sys.stderr)
        return 1
    for path in (files.png, files.html, files.json):
        print(f"wrote {path}")
    return 0


def cmd_analyze_numbers(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.analysis.numbers import FaissMissing
    from structqa.analysis.numbers_report import SpacyMissing, analyze_numbers, write_report

    numbers = None if args.numbers == ["all"] else args.numbers
    try:
        report = analyze_numbers(
            args.checkpoint,
            args.data,
            args.max_questions,
            args.top_k,
            args.ks,
            numbers,
            args.subwords,
            args.batch_size,
        )
    except (FaissMissing, SpacyMissing) as err:
        print(f"structqa analyze numbers: error: {err}", file=sys.stderr)
        return 1
    files = write_report(report, args.out)
    print(files.markdown.read_text(encoding="utf-8"))
    for path in (files.markdown, files.json, files.png):
        if path is not None:
            print(f"wrote {path}")
    return 0


def add_parser(sub) -> None:
    x = sub.add_parser("explain", help="picture what the start/end queries attend to")
    x.add_argument("checkpoint")
    x.add_argument("--question", required=True, help="the question")
    x.add_argument("--context", required=True, help="the passage it is asked about")
    x.add_argument("--out", default="explain", help="output directory (default ./explain)")
    add_bf16_argument(x)
    x.add_argument("--whole-words", action=argparse.BooleanOptionalAction, help=WHOLE_WORDS_HELP)
    x.set_defaults(func=cmd_explain)

    an = sub.add_parser("analyze", help="analyses of trained models (NC-BERT's number tables)")
    an_sub = an.add_subparsers(dest="analysis", required=True)
    anum = an_sub.add_parser(
        "numbers", help="NC-BERT Tables 1, 6, 7: number embeddings, attention, Recall@K"
    )
    anum.add_argument("checkpoint", help="a drop-train checkpoint dir, or 'default' (Table 1)")
    anum.add_argument("--data", help="DROP file (default: the checkpoint's data.eval)")
    anum.add_argument("--out", default="analyze-numbers", help="output directory")
    anum.add_argument("--max-questions", type=int, help="analyse the first N questions")
    anum.add_argument("--top-k", type=int, default=5, help="Table 1: neighbours per number")
    anum.add_argument(
        "--ks", type=int, nargs="+", default=[1, 2, 5, 10, 20, 50], help="Table 7: the K"
    )
    anum.add_argument(
        "--numbers",
        nargs="+",
        default=["2018", "50", "114", "2", "11"],
        help="Table 1: number tokens to probe ('all': every digit token of the vocabulary)",
    )
    anum.add_argument("--subwords", action="store_true", help="Table 1: keep '##' word pieces")
    anum.add_argument(
        "--batch-size", type=int, default=8, help="Tables 6 and 7: questions per forward pass"
    )
    anum.set_defaults(func=cmd_analyze_numbers)
