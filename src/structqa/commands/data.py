"""``structqa synth`` (synthetic numerical QA for NC-BERT's pre-training) and ``structqa
corpus`` (a sentence-chunked masked-LM corpus)."""

from __future__ import annotations

import argparse
from pathlib import Path

from structqa.commands.common import add_no_progress_argument, command


def cmd_synth(args: argparse.Namespace, extra: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from structqa.data.synthetic import generate, summarize, write_synthetic

    examples = generate(args.kind, args.n, args.seed)
    write_synthetic(args.out, examples)
    table = Table(title=f"{len(examples)} synthetic questions -> {args.out} (seed {args.seed})")
    for column in ("kind", "operation", "answer type"):
        table.add_column(column)
    table.add_column("count", justify="right")
    for (kind, op, answer_type), count in summarize(examples).items():
        table.add_row(kind, op, answer_type, str(count))
    Console().print(table)
    return 0


def cmd_corpus(args: argparse.Namespace, extra: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from structqa.config import from_attributes
    from structqa.pretrain.corpus import CorpusConfig, build_corpus

    config = from_attributes(CorpusConfig, args, progress=not args.no_progress)
    report = build_corpus(args.sources, args.out, config, exclude=args.exclude)
    table = Table("step", "count", title=f"corpus in {args.out}")
    for step, n in report.counts.items():
        table.add_row(step, f"{n:,}")
    Console().print(table)
    return 0


def cmd_mwp(args: argparse.Namespace, extra: list[str]) -> int:
    from collections import Counter

    from structqa.data.mwp import dev_split, folds, read_problems, to_drop_json
    from structqa.io import write_json

    if args.dev is not None and not args.folds:
        raise ValueError(f"--dev {args.dev}: a dev share is cut from each fold; add --folds K")
    problems = read_problems(args.source)
    out = Path(args.out)
    if not args.folds:
        write_json(out, to_drop_json(problems), indent=None)
        written = [str(out)]
    else:
        parts = folds(problems, args.folds, args.seed)
        written = []
        for i, test in enumerate(parts):
            train = [p for j, part in enumerate(parts) if j != i for p in part]
            splits = [("train", train), ("test", test)]
            if args.dev:
                train, dev = dev_split(train, args.dev, seed=args.seed * 1000 + i)
                splits = [("train", train), ("dev", dev), ("test", test)]
            for kind, chosen in splits:
                path = out / f"fold{i}-{kind}.json"
                write_json(path, to_drop_json(chosen), indent=None)
                written.append(str(path))
    subsets = Counter(p.subset for p in problems)
    print(f"{args.source}: {len(problems)} problems ({dict(subsets)}) -> {', '.join(written)}")
    return 0


def cmd_split(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.data.overlap import passage_key
    from structqa.data.readers import read_extractive
    from structqa.data.sampling import passage_folds
    from structqa.data.squad_json import write_squad_json

    if args.folds < 2:
        raise ValueError(f"--folds {args.folds}: give at least 2")
    examples = list(read_extractive(args.source).examples)
    fold_of = passage_folds(examples, args.folds, args.seed)
    out = Path(args.out)
    v2 = any(ex.is_impossible for ex in examples)
    for i in range(args.folds):
        for kind, in_test in (("train", False), ("test", True)):
            chosen = [ex for ex in examples if (fold_of[passage_key(ex.context)] == i) == in_test]
            # a test fold keeps every gold text (a wrong answer_start loses none of them)
            path = out / f"fold{i}-{kind}.json"
            write_squad_json(path, chosen, version_2=v2, targets=not in_test)
        n = sum(1 for ex in examples if fold_of[passage_key(ex.context)] == i)
        print(f"fold {i}: {n} test questions")
    print(f"{len(examples)} questions over {len(fold_of)} passages -> {out}")
    return 0


_MWP_TEXT = """math word problems (MAWPS, SVAMP) as DROP JSON for drop-train

Reads MAWPS (.jsonl), SVAMP (.json) or SVAMP's training CSV (numbers masked as number0.. are put
back from its Numbers column) and writes DROP JSON, one passage and one number question per
problem; --folds K writes K train/test pairs (foldI-train.json, foldI-test.json) into OUT for
cross-validation, and --dev F a foldI-dev.json of each fold's training problems.
"""


_SPLIT_TEXT = """K-fold splits of a QA file by passage, for cross-validation

Deals SOURCE's passages (whole: a passage's questions stay together) into K folds after a seeded
shuffle and writes OUT/foldI-train.json and foldI-test.json as SQuAD JSON, the test part of each
the I-th fold.
"""


def add_parser(sub) -> None:
    sy = sub.add_parser("synth", help="write synthetic numerical QA data (DROP JSON)")
    sy.add_argument("--out", required=True, help="DROP JSON file to write")
    sy.add_argument(
        "--kind",
        default="both",
        choices=["numeric", "textual", "both"],
        help="numeric (arithmetic, comparisons, counts, sorting, dates), textual, or both",
    )
    sy.add_argument("--n", type=int, default=1000, help="questions in all (both: half each)")
    sy.add_argument("--seed", type=int, default=0, help="draws the questions")
    sy.set_defaults(func=cmd_synth)

    mw = command(sub, "mwp", _MWP_TEXT)
    mw.add_argument("source", help="mawps.jsonl, svamp.json or mawps-asdiv-a-train.csv")
    mw.add_argument("--out", required=True, help="DROP JSON file (a folder with --folds)")
    mw.add_argument("--folds", type=int, help="K-fold cross-validation splits")
    mw.add_argument("--seed", type=int, default=0, help="the folds' shuffle")
    mw.add_argument(
        "--dev",
        type=float,
        metavar="FRACTION",
        help="with --folds: also hold this share of each fold's training problems out as "
        "foldI-dev.json (to choose checkpoints on without touching the test fold)",
    )
    mw.set_defaults(func=cmd_mwp)

    sp = command(sub, "split", _SPLIT_TEXT)
    sp.add_argument(
        "source", help="SQuAD v1.1/v2.0 JSON, MRQA .jsonl[.gz], Hugging Face records or .csv/.tsv"
    )
    sp.add_argument("--out", required=True, help="the folder for the fold files")
    sp.add_argument("--folds", type=int, default=5, help="K: the files are K train/test pairs")
    sp.add_argument("--seed", type=int, default=0, help="the passages' shuffle")
    sp.set_defaults(func=cmd_split)

    co = sub.add_parser("corpus", help="build a sentence-chunked pre-training corpus")
    co.add_argument("sources", nargs="+", help="text, JSONL ({'text'}) or SQuAD/MRQA/DROP files")
    co.add_argument("--out", required=True, help="output directory (shards, report.json)")
    co.add_argument("--exclude", nargs="+", action="extend", default=[], help="held-out files")
    co.add_argument(
        "--chunk-words", type=int, default=300, help="most words a chunk holds (whole sentences)"
    )
    co.add_argument("--overlap", type=int, default=0, help="sentences shared by chunks")
    co.add_argument(
        "--min-sentence-words", type=int, default=10, help="shorter sentences are dropped"
    )
    co.add_argument(
        "--min-doc-words",
        type=int,
        default=100,
        help="documents with fewer words (after the short sentences) are dropped",
    )
    co.add_argument("--lines", action="store_true", help="text files: a document per line")
    co.add_argument("--shard-chunks", type=int, default=10_000, help="chunks per shard file")
    add_no_progress_argument(co)
    co.set_defaults(func=cmd_corpus)
