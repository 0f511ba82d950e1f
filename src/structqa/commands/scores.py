"""``structqa score`` (a predictions file, as the official scripts score it) and ``structqa
compare`` (a paired bootstrap over questions between two systems)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from structqa.commands.common import command


def cmd_score(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.scoring import score_file

    check_predictions(args.predictions)
    scores = score_file(
        args.data_file,
        args.predictions,
        args.na_probs,
        args.na_prob_thresh,
        args.by,
        args.dedupe_ids,
    )
    print(json.dumps(scores))
    if "global_f1" in scores:  # DROP: the official output's fractions, also said in percent
        print(drop_percent_line(scores), file=sys.stderr)
    return 0


def drop_percent_line(scores: Mapping[str, Any]) -> str:
    """A DROP score in percent, as SQuAD scores, result files, tables and `compare` give them
    (the JSON keeps the official evaluation's fractions)."""
    return (
        f"DROP: EM {100 * scores['global_em']:.2f}, F1 {100 * scores['global_f1']:.2f} "
        f"(percent, over {scores.get('total', '?')} questions; the JSON's global_em/global_f1 "
        "are fractions, as the official DROP evaluation writes them)"
    )


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.io import write_json
    from structqa.scoring import compare_files

    check_predictions([*args.a, *args.b])  # before the data file is read
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


def check_predictions(paths: Sequence[str]) -> None:
    """Stop with a message naming the first of ``paths`` that is not there, and for a run's
    answers that an experiment did not keep, what to do instead."""
    for given in paths:
        if not Path(given).exists():
            raise FileNotFoundError(missing_predictions(Path(given)))


def missing_predictions(path: Path) -> str:
    """Why ``path`` (not there) cannot be scored: for ``<results>/answers/<run>.json.gz`` of a
    run whose result ``<results>/runs/<run>.json`` is there, that its answers were not kept
    (it finished before they were), and how to get them or what to compare instead."""
    from structqa.experiments.store import ANSWERS_DIR, answers_source, kept_answers

    text = f"{path}: no such predictions file or checkpoint directory"
    name = path.name.removesuffix(".json.gz")
    results = path.parent.parent
    result_file = results / "runs" / f"{name}.json"
    if path.parent.name != ANSWERS_DIR or name == path.name or not result_file.is_file():
        return text
    result = _json_or_empty(result_file)
    config = result.get("config") or {}
    kind = "drop" if isinstance(result.get("test"), dict) else "extractive"
    output = (config.get("train") or {}).get("output_dir")
    source = answers_source(kind, Path(output), config.get("data") or {}) if output else None
    kept = sorted(path.parent.glob("*.json.gz"))
    reused = result.get("reused_from")
    experiment = result.get("config_file") or "CONFIG"
    theirs = kept_answers(results, name, result)  # a reused run's: the experiment that trained it
    if theirs != path:
        if theirs.is_file():
            return text + (
                f". Run {name!r} was taken over from another experiment, which keeps its "
                f"answers: compare {theirs}"
            )
        experiment = _table_config(results)  # (the result names the other one's YAML)
    text += (
        f". Run {name!r} has a result ({result_file}) but its answers were not kept: it "
        "finished before `structqa experiment` kept each run's answers beside its result "
        "(docs/experiments.md, 'What a run leaves')"
    )
    if source is not None and source.is_file():
        refresh = f", or keep them with `structqa experiment {experiment} --refresh`"
        return text + (
            f". Its output directory still has them: compare {source}" + ("" if reused else refresh)
        )
    again = f"structqa experiment {experiment} --only {name}" + (" --no-reuse" if reused else "")
    return text + (
        f". To compare it, move {result_file} aside and run it again (`{again}`), which keeps "
        f"its answers; or compare runs that kept theirs ({len(kept) or 'none'} in "
        f"{path.parent}/)"
    )


def _table_config(results: Path) -> str:
    """The YAML that the table.md in ``results`` names (``- config: `FILE```), else CONFIG."""
    try:
        lines = (results / "table.md").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    found = (x.removeprefix("- config: ").strip("`") for x in lines if x.startswith("- config: "))
    return next(found, "CONFIG")


def _json_or_empty(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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
