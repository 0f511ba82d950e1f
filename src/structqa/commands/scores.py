"""``structqa score`` (a predictions file, as the official scripts score it) and ``structqa
compare`` (a paired bootstrap over questions between two systems)."""

from __future__ import annotations

import argparse
import json

from structqa.commands.common import command


def cmd_score(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.scoring import score_file

    print(
        json.dumps(
            score_file(
                args.data_file,
                args.predictions,
                args.na_probs,
                args.na_prob_thresh,
                args.by,
                args.dedupe_ids,
            )
        )
    )
    return 0


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.io import write_json
    from structqa.scoring import compare_files

    c = compare_files(
        args.data_file,
        args.a,
        args.b,
        metric=args.metric,
        resamples=args.resamples,
        confidence=args.confidence,
        seed=args.seed,
        parts=args.parts,
        dedupe_ids=args.dedupe_ids,
    )
    r = c.bootstrap
    name = "F1" if c.metric == "f1" else "EM"
    runs = (
        f"{r.n_runs} run(s) per side averaged per question"
        if r.n_runs_b is None
        else f"A's {r.n_runs} run(s) and B's {r.n_runs_b} each averaged per question (the "
        "questions are paired, the runs are not: their seeds' spread is not in the interval)"
    )
    print(f"{args.data_file}: {r.n_questions} questions ({c.scheme} scoring), {name}, {runs}")
    print(f"A {r.mean_a:.2f}   B {r.mean_b:.2f}")
    print(
        f"A - B {r.difference:+.2f}, {100 * r.confidence:g}% interval over questions "
        f"[{r.ci_low:+.2f}, {r.ci_high:+.2f}], p {r.p_value:.3g} "
        f"({r.resamples} paired resamples, seed {r.seed})"
    )
    if c.run_differences and r.n_runs > 1:
        gaps = ", ".join(f"{g:+.2f}" for g in c.run_differences)
        print(f"per run pair: {gaps}")
    if args.json:
        write_json(
            args.json, {"data_file": str(args.data_file), "a": args.a, "b": args.b, **c.to_dict()}
        )
        print(f"wrote {args.json}")
    return 0


_COMPARE_TEXT = """paired bootstrap over questions: is A's score above B's beyond question sampling?

Scores two sets of predictions on the same data file question by question (official
SQuAD/MRQA/DROP scoring) and resamples the questions to put an interval and a p-value on mean(A)
- mean(B). Several files per side are runs (e.g. seeds) paired by position; each question's
score is averaged over them. The sides may hold different numbers of runs (one build against a
baseline's five seeds): each is then averaged on its own and no run pairs are printed.
"""


def add_parser(sub) -> None:
    cp = command(sub, "compare", _COMPARE_TEXT)
    cp.add_argument(
        "data_file", help="the dataset the predictions answer (JSON, .jsonl[.gz], .csv/.tsv)"
    )
    cp.add_argument(
        "--a",
        nargs="+",
        required=True,
        metavar="PRED",
        help="predictions.json files or checkpoint directories (system A)",
    )
    cp.add_argument(
        "--b",
        nargs="+",
        required=True,
        metavar="PRED",
        help="the same for system B (the same seeds as A, in the same order, for the per-pair "
        "gaps; or any number of runs, averaged on their own)",
    )
    cp.add_argument("--metric", choices=["f1", "em"], default="f1", help="per-question score")
    cp.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    cp.add_argument(
        "--confidence", type=float, default=0.95, help="the interval's coverage (0.95: 95 %%)"
    )
    cp.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    cp.add_argument(
        "--parts",
        type=int,
        default=1,
        metavar="K",
        help="each run is K consecutive files answering disjoint questions (e.g. the 5 test "
        "folds of a cross-validation), read as one",
    )
    cp.add_argument("--json", metavar="OUT", help="also write the result as JSON")
    _dedupe_argument(cp)
    cp.set_defaults(func=cmd_compare)

    s = sub.add_parser("score", help="score a predictions file like the official scripts")
    s.add_argument("data_file")
    s.add_argument(
        "predictions",
        nargs="+",
        help="predictions.json (or .json.gz); several are read as one, e.g. the answers of "
        "each test fold of a cross-validation, and must answer disjoint questions",
    )
    s.add_argument("--na-probs", help="SQuAD 2.0 no-answer probabilities (null_odds.json)")
    s.add_argument(
        "--na-prob-thresh",
        type=float,
        default=1.0,
        help="SQuAD 2.0: a question whose --na-probs value exceeds this counts as answered "
        "'no answer' in exact/f1 (the official script's option; default 1.0)",
    )
    s.add_argument(
        "--by",
        metavar="FIELD",
        help="DROP-format files: also score the questions grouped by this field of each "
        "question, e.g. --by subset for the MAWPS files of `structqa mwp` (per_FIELD)",
    )
    _dedupe_argument(s)
    s.set_defaults(func=cmd_score)


def _dedupe_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dedupe-ids",
        action="store_true",
        help="rename the data file's repeated question ids ID#2, ID#3, ... in file order, as "
        "evaluate --data.dedupe_ids=true named its answers (default: a repeat keeps the last "
        "answers, as the official scripts do)",
    )
