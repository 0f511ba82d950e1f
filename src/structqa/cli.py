"""`structqa`: one command with subcommands (train, evaluate, predict, score, quickstart, ...).

Subcommands with modules of their own (structqa.commands.*, structqa.experiments.command)
register themselves with ``add_parser(subparsers)``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from structqa.commands.common import INTERRUPTED
from structqa.commands.common import config_from_args as _config
from structqa.commands.common import stopped as _stopped
from structqa.commands.settings import sections_epilog
from structqa.cpu import tune_allocator

log = logging.getLogger("structqa")


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
    for noisy in ("transformers", "accelerate", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.calibration.report import CalibrateOnce
    from structqa.training.loop import run

    cfg = _config(args, extra)
    progress = not args.no_progress
    calibrate = CalibrateOnce()
    result = run(cfg, resume=args.resume, progress=progress, calibrate=calibrate)
    if _stopped(cfg.train.output_dir):
        return INTERRUPTED
    if (cal := calibrate.done(cfg)) is not None:
        log.info("best/calibration.json: %s, null threshold %s", cal.method, cal.null_threshold)
    if result is not None:
        tested = cfg.data.validation is not None and cfg.data.eval
        what = f"the test file {cfg.data.eval}" if tested else "the data that chose it"
        print(f"best/ ({Path(cfg.train.output_dir) / 'best'}) on {what}:")
        print(json.dumps(result.metrics, indent=2))
    return 0


def cmd_pretrain(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.pretrain.config import load_pretrain_config
    from structqa.pretrain.loop import run

    overrides = list(extra) + ([f"data.dir={args.data}"] if args.data else [])
    cfg = load_pretrain_config(args.config, overrides)
    result = run(cfg, resume=args.resume, progress=not args.no_progress)
    if _stopped(cfg.train.output_dir):
        return INTERRUPTED
    if result is not None:
        print(json.dumps(result.metrics, indent=2))
    return 0


def cmd_drop_train(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.ncbert.config import load_drop_config
    from structqa.ncbert.loop import run

    overrides = list(extra) + ([f"data.dir={args.data}"] if args.data else [])
    cfg = load_drop_config(args.config, overrides)
    result = run(cfg, resume=args.resume, progress=not args.no_progress)
    if _stopped(cfg.train.output_dir):
        return INTERRUPTED
    if result is not None:
        print(json.dumps(result, indent=2))
    return 0


def cmd_drop_predict(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.ncbert.loop import predict_file

    if extra:
        raise SystemExit(f"drop-predict takes no config overrides: {' '.join(extra)}")
    metrics = predict_file(args.checkpoint, args.drop_file, args.out, args.bf16)
    print(json.dumps({k: metrics[k] for k in ("global_em", "global_f1", "total")}))
    return 0


def null_odds_path(predictions: Path) -> Path:
    """Where ``predict --file`` writes the null odds of ``predictions``: null_odds.json beside
    predictions.json (as ``evaluate`` does), else NAME.null_odds.json beside NAME.json, so two
    prediction files in one folder keep their own."""
    if predictions.name == "predictions.json":
        return predictions.with_name("null_odds.json")
    return predictions.with_name(f"{predictions.stem}.null_odds.json")


WHOLE_WORDS_HELP = (
    "widen answers that start or end inside a word to the whole word, or not "
    "(--no-whole-words); default: the checkpoint's decode.whole_words"
)


def cmd_predict(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.serving.predictor import Predictor

    if args.file and (args.question is not None or args.context is not None):
        raise ValueError("give either --file DATA or --question and --context, not both")
    if not args.file:
        for name in ("question", "context"):
            value = getattr(args, name)
            if value is None:
                raise ValueError("give --question and --context, or --file DATA")
            if not value.strip():
                raise ValueError(f"--{name} is empty")
    predictor = Predictor.from_checkpoint(
        args.checkpoint,
        bf16=args.bf16,
        whole_words=args.whole_words,
        runtime=args.runtime,
        make_int8_export=True,  # the fast runtime where bf16 is not native (logged)
    )
    if args.file:
        from structqa.data.readers import read_extractive
        from structqa.io import write_json

        ds = read_extractive(args.file)
        preds = predictor.predict_examples(ds.examples)
        answers = {k: p.answer(predictor.null_threshold) for k, p in preds.items()}
        out = Path(args.out or "predictions.json")
        odds_file = null_odds_path(out)
        write_json(out, answers)
        write_json(odds_file, {k: p.null_odds for k, p in preds.items()})
        log.info("wrote %d predictions to %s, their null odds to %s", len(answers), out, odds_file)
        return 0
    ans = predictor.predict(args.question, args.context)
    print(
        json.dumps(
            {
                "answer": ans.text,
                "start": ans.start,
                "end": ans.end,
                "score": ans.score,
                "probability": round(ans.probability, 4),
                "no_answer": ans.no_answer,
                "answerable": ans.answerable,
                "calibrated": ans.calibrated,
                "nbest": [
                    {"text": c.text, "probability": round(c.probability, 4)} for c in ans.nbest[:5]
                ],
            },
            indent=2,
        )
    )
    return 0


def cmd_explain(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.analysis import RendererMissing, explain, save_explanation
    from structqa.models.build import model_from_checkpoint

    if extra:
        raise SystemExit(f"explain takes no config overrides: {' '.join(extra)}")
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

    if extra:
        raise SystemExit(f"analyze numbers takes no config overrides: {' '.join(extra)}")
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


def cmd_score(args: argparse.Namespace, extra: list[str]) -> int:
    from structqa.scoring import score_file

    print(
        json.dumps(score_file(args.data_file, args.predictions, args.na_probs, args.na_prob_thresh))
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
    )
    r = c.bootstrap
    name = "F1" if c.metric == "f1" else "EM"
    print(
        f"{args.data_file}: {r.n_questions} questions ({c.scheme} scoring), {name}, "
        f"{r.n_runs} run(s) per side averaged per question"
    )
    print(f"A {r.mean_a:.2f}   B {r.mean_b:.2f}")
    print(
        f"A - B {r.difference:+.2f}, {100 * r.confidence:g}% interval over questions "
        f"[{r.ci_low:+.2f}, {r.ci_high:+.2f}], p {r.p_value:.3g} "
        f"({r.resamples} paired resamples, seed {r.seed})"
    )
    if r.n_runs > 1:
        gaps = ", ".join(f"{g:+.2f}" for g in c.run_differences)
        print(f"per run pair: {gaps}")
    if args.json:
        write_json(
            args.json, {"data_file": str(args.data_file), "a": args.a, "b": args.b, **c.to_dict()}
        )
        print(f"wrote {args.json}")
    return 0


def cmd_synth(args: argparse.Namespace, extra: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from structqa.data.synthetic import generate, summarize, write_synthetic

    if extra:
        raise SystemExit(f"synth takes no config overrides: {' '.join(extra)}")
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

    from structqa.pretrain.corpus import CorpusConfig, build_corpus

    config = CorpusConfig(
        chunk_words=args.chunk_words,
        overlap=args.overlap,
        min_sentence_words=args.min_sentence_words,
        min_doc_words=args.min_doc_words,
        lines=args.lines,
        shard_chunks=args.shard_chunks,
        progress=not args.no_progress,
    )
    report = build_corpus(args.sources, args.out, config, exclude=args.exclude)
    table = Table("step", "count", title=f"corpus in {args.out}")
    for step, n in report.counts.items():
        table.add_row(step, f"{n:,}")
    Console().print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from structqa.runtimes.command import add_runtime_argument

    p = argparse.ArgumentParser(
        prog="structqa",
        description="Extractive QA with structural attention biases.",
        epilog="Config overrides: --section.key=value (e.g. --train.lr=3e-5 --data.train_size=all)",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser(
        "train",
        help="fine-tune a span-extraction model",
        description="Fine-tunes on data.train, chooses best/ on data.validation (by default "
        "10% of data.train, split by context) and, when data.eval is given, scores best/ once "
        "on that test file (best/eval/).",
        epilog=sections_epilog("train"),
    )
    t.add_argument("config", nargs="?", help="YAML config (defaults if omitted)")
    t.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    t.add_argument("--resume", action="store_true", help="continue an interrupted run")
    t.add_argument("--no-progress", action="store_true")
    t.set_defaults(func=cmd_train)

    pt = sub.add_parser(
        "pretrain",
        help="continue masked-LM pre-training of an encoder",
        epilog=sections_epilog("pretrain"),
    )
    pt.add_argument("config", nargs="?", help="YAML config (defaults if omitted)")
    pt.add_argument("--data", help="data directory for a relative corpus path")
    pt.add_argument("--resume", action="store_true", help="continue an interrupted run")
    pt.add_argument("--no-progress", action="store_true")
    pt.set_defaults(func=cmd_pretrain)

    dt = sub.add_parser(
        "drop-train",
        help="train GenBERT / NC-BERT on DROP files",
        epilog=sections_epilog("drop-train"),
    )
    dt.add_argument("config", nargs="?", help="YAML config, e.g. configs/ncbert/ncbert.yaml")
    dt.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    dt.add_argument("--resume", action="store_true", help="continue an interrupted run")
    dt.add_argument("--no-progress", action="store_true")
    dt.set_defaults(func=cmd_drop_train)

    dp = sub.add_parser("drop-predict", help="answer a DROP file with a drop-train checkpoint")
    dp.add_argument("checkpoint", help="a drop-train checkpoint directory (RUN/best)")
    dp.add_argument("drop_file", help="DROP JSON file to answer")
    dp.add_argument("--out", default="predictions.json", help="query id -> answer (JSON)")
    dp.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    dp.set_defaults(func=cmd_drop_predict)

    pr = sub.add_parser("predict", help="answer one question, or every question of a file")
    pr.add_argument("checkpoint")
    pr.add_argument("--question")
    pr.add_argument("--context")
    pr.add_argument("--file", help="SQuAD/MRQA file to answer")
    pr.add_argument("--out", help="predictions file (default predictions.json)")
    pr.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
    add_runtime_argument(pr)
    pr.add_argument("--whole-words", action=argparse.BooleanOptionalAction, help=WHOLE_WORDS_HELP)
    pr.set_defaults(func=cmd_predict)

    x = sub.add_parser("explain", help="picture what the start/end queries attend to")
    x.add_argument("checkpoint")
    x.add_argument("--question", required=True)
    x.add_argument("--context", required=True)
    x.add_argument("--out", default="explain", help="output directory (default ./explain)")
    x.add_argument("--bf16", default="auto", choices=["auto", "on", "off"])
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
    anum.add_argument("--batch-size", type=int, default=8)
    anum.set_defaults(func=cmd_analyze_numbers)

    from structqa.serving.command import add_parser as add_serve_parser

    add_serve_parser(sub)

    sy = sub.add_parser("synth", help="write synthetic numerical QA data (DROP JSON)")
    sy.add_argument("--out", required=True, help="DROP JSON file to write")
    sy.add_argument("--kind", default="both", choices=["numeric", "textual", "both"])
    sy.add_argument("--n", type=int, default=1000, help="questions in all (both: half each)")
    sy.add_argument("--seed", type=int, default=0)
    sy.set_defaults(func=cmd_synth)

    co = sub.add_parser("corpus", help="build a sentence-chunked pre-training corpus")
    co.add_argument("sources", nargs="+", help="text, JSONL ({'text'}) or SQuAD/MRQA/DROP files")
    co.add_argument("--out", required=True, help="output directory (shards, report.json)")
    co.add_argument("--exclude", nargs="+", action="extend", default=[], help="held-out files")
    co.add_argument("--chunk-words", type=int, default=300)
    co.add_argument("--overlap", type=int, default=0, help="sentences shared by chunks")
    co.add_argument("--min-sentence-words", type=int, default=10)
    co.add_argument("--min-doc-words", type=int, default=100)
    co.add_argument("--lines", action="store_true", help="text files: a document per line")
    co.add_argument("--shard-chunks", type=int, default=10_000)
    co.add_argument("--no-progress", action="store_true")
    co.set_defaults(func=cmd_corpus)

    from structqa.commands import evaluate, negatives, quickstart, settings
    from structqa.commands.calibrate import add_parser as add_calibrate_parser
    from structqa.experiments.command import add_parser as add_experiment_parser
    from structqa.runtimes.command import add_parser as add_export_parser

    for module in (quickstart, evaluate, settings, negatives):
        module.add_parser(sub)
    add_experiment_parser(sub)
    add_export_parser(sub)
    add_calibrate_parser(sub)

    cp = sub.add_parser(
        "compare",
        help="paired bootstrap over questions: is A's score above B's beyond question sampling?",
        description="Scores two sets of predictions on the same data file question by question "
        "(official SQuAD/MRQA/DROP scoring) and resamples the questions to put an interval and a "
        "p-value on mean(A) - mean(B). Several files per side are runs (e.g. seeds) paired by "
        "position; each question's score is averaged over them.",
    )
    cp.add_argument("data_file", help="the dataset the predictions answer (.jsonl[.gz] or JSON)")
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
        help="the same for system B (the same seeds as A, in the same order for the per-pair gaps)",
    )
    cp.add_argument("--metric", choices=["f1", "em"], default="f1")
    cp.add_argument("--resamples", type=int, default=10_000)
    cp.add_argument("--confidence", type=float, default=0.95)
    cp.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    cp.add_argument("--json", metavar="OUT", help="also write the result as JSON")
    cp.set_defaults(func=cmd_compare)

    s = sub.add_parser("score", help="score a predictions file like the official scripts")
    s.add_argument("data_file")
    s.add_argument("predictions")
    s.add_argument("--na-probs", help="SQuAD 2.0 no-answer probabilities (null_odds.json)")
    s.add_argument("--na-prob-thresh", type=float, default=1.0)
    s.set_defaults(func=cmd_score)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    bad = [x for x in extra if not (x.startswith("--") and "=" in x and "." in x.split("=")[0])]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)}")
    if extra and args.func in (cmd_score, cmd_compare, cmd_predict):
        parser.error(f"{args.command} takes no config overrides: {' '.join(extra)}")
    _setup_logging(args.verbose)
    tune_allocator()  # large CPU tensors reuse freed memory (see its docstring)
    try:
        return args.func(args, extra)
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


if __name__ == "__main__":
    sys.exit(main())
