"""``structqa index`` (a folder of documents into an index), ``structqa search`` (the best
chunks for a query) and ``structqa evaluate-retrieval`` (nDCG@10 and recall@k on BEIR-format
queries and judgements)."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from structqa.commands.common import (
    WHOLE_WORDS_HELP,
    add_bf16_argument,
    add_no_progress_argument,
    add_runtime_argument,
    add_sample_arguments,
    answering_predictor,
    command,
    positive_int,
)
from structqa.documents.index import RETRIEVERS, require_index
from structqa.io import write_json
from structqa.paths import READER_ENV, find_reader, no_reader_message
from structqa.training.progress import tracked

READER_HELP = (
    f"the reader: a checkpoint or a built reader directory (default: ${READER_ENV}, else the "
    "general reader `structqa reader build` made)"
)
RETRIEVER_HELP = (
    "bm25, dense (the sentence encoder), hybrid (both scores combined, BM25 weighted as the "
    "index says: 0.5 unless `structqa fit-fusion` fitted it) or rrf (reciprocal rank fusion)"
)


def _reader(checkpoint: str | None) -> str:
    """The checkpoint that reads: the one given, else $STRUCTQA_READER, else the built
    general reader."""
    found = find_reader(checkpoint)
    if found is None:
        raise ValueError(no_reader_message("--checkpoint CKPT"))
    return str(found)


def cmd_index(args: argparse.Namespace, extra: list[str]) -> int:  # noqa: ARG001

    from structqa.documents import DocumentIndex
    from structqa.documents.folders import files_under

    # checked before the index folder is made: a PATH that does not exist, or an index that
    # would hold its own documents, stops the run first; an index built inside a folder it
    # indexes is left out of it
    out = Path(args.out).resolve()
    for path in map(Path, args.paths):
        if not path.exists():
            files_under([path])  # FileNotFoundError: no such file or folder, or a dead link
        if path.resolve().is_relative_to(out):
            raise ValueError(
                f"--out {args.out} holds {path}: the index would leave out the documents it "
                "indexes (and mix its files with them); give a folder of its own, such as "
                f"--out {path.resolve().with_name(path.resolve().name + '-index')}"
            )
    with (
        DocumentIndex(args.out, store=args.store, create=True) as index,
        tracked(_mode(args.no_progress), "embedding", "chunks") as progress,
    ):
        report = index.update(args.paths, progress=progress, exclude=[args.out], prune=args.prune)
    print(report.summary(details=False))  # each skipped file once, below, on stderr
    for path, why in report.read.skipped:
        print(f"structqa index: warning: skipped {path}: {why}", file=sys.stderr)
    for path, what in report.read.notes:
        print(f"structqa index: note: {path}: {what}", file=sys.stderr)
    for path, why in report.removed:
        print(f"structqa index: note: removed {path} from the index: {why}", file=sys.stderr)
    if report.kept:
        folders = sorted({str(Path(p).parent) for p in report.kept})
        shown = ", ".join(folders[:3]) + (
            f" and {len(folders) - 3} more" if len(folders) > 3 else ""
        )
        print(
            f"structqa index: note: kept {len(report.kept)} file(s) indexed earlier under "
            f"{shown}, not under the PATHs given: give those folders too to update them, or "
            "--prune to drop them from the index",
            file=sys.stderr,
        )
    if not report.chunks:
        print(
            f"structqa index: error: {args.out} holds no documents: nothing under "
            f"{' '.join(args.paths)} could be read (.txt .md .rst .html .pdf, SQuAD/MRQA files "
            "and BEIR corpora are); the index is empty",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_search(args: argparse.Namespace, extra: list[str]) -> int:  # noqa: ARG001
    from structqa.documents import DocumentIndex

    if not args.query.strip():
        raise ValueError("--query is empty: give the words to search for")
    if args.k < 1:
        raise ValueError(f"--k {args.k}: ask for 1 or more chunks")
    with DocumentIndex.open(args.index) as index:
        hits = index.search(args.query, args.k, args.retriever)
        held = len(index)
    if not held:
        print(f"structqa search: no chunks found ({args.index} is empty)", file=sys.stderr)
    elif args.retriever == "bm25" and len(hits) < min(args.k, held):
        print(
            f"structqa search: {len(hits)} of {args.k} chunks found (BM25 scores only the "
            f"chunks sharing a word with the query; the index holds {held})",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps([vars(h) for h in hits], indent=2, ensure_ascii=False))
        return 0
    for rank, h in enumerate(hits, start=1):
        page = f", page {h.page}" if h.page else ""
        where = f"{h.source}{page}, chars {h.start}-{h.end}"
        print(f"{rank:>3}. {h.title or h.doc_id} ({where}) {h.score:.4g}")
        print(f"     {h.text[:200]}{'...' if len(h.text) > 200 else ''}")
    return 0


def cmd_ask(args: argparse.Namespace, extra: list[str]) -> int:  # noqa: ARG001
    from structqa.documents import DocumentIndex
    from structqa.documents.ask import ask
    from structqa.documents.no_answer import for_reader

    # checked before the reader loads (seconds)
    if not args.question.strip():
        raise ValueError("--question is empty: give the question to ask")
    for option, value in (("--top-k-chunks", args.top_k_chunks), ("--answers", args.answers)):
        if value < 1:
            raise ValueError(f"{option} {value}: give 1 or more")
    require_index(args.index)
    args.checkpoint = _reader(args.checkpoint)
    predictor = answering_predictor(args)
    fitted = for_reader(
        args.index, args.checkpoint, args.retriever, args.top_k_chunks, predictor.runtime
    )
    with DocumentIndex.open(args.index) as index:
        (result,) = ask(
            index,
            predictor,
            [args.question],
            args.top_k_chunks,
            args.retriever,
            set_threshold=None if fitted is None else fitted.threshold,
        )
    if args.json:
        print(json.dumps(result.to_json(args.answers), indent=2, ensure_ascii=False))
        return 0
    if result.no_answer:
        print(f"no answer in the {len(result.hits)} retrieved chunks")
        return 0
    # ranked by the reader's probability discounted by the retrieval rank of the chunk read
    # (structqa.documents.ask.RANK_DECAY): a later chunk's sure answer can rank lower
    for rank, a in enumerate(result.answers[: args.answers], start=1):
        page = f", page {a.page}" if a.page else ""
        where = f"retrieved chunk {a.retrieval_rank + 1}"
        chance = (
            f"n-best share {100 * a.probability:.1f}%, declined by the reader in its chunk"
            if a.declined
            else f"probability {100 * a.probability:.1f}%"
        )
        print(f"{rank}. {a.text}  ({chance}, {where})")
        print(f"   {a.title or a.doc_id}: {a.source}{page}, chars {a.start}-{a.end}")
    return 0


def cmd_evaluate_ask(args: argparse.Namespace, extra: list[str]) -> int:  # noqa: ARG001

    from structqa.data.readers import read_extractive
    from structqa.documents import DocumentIndex
    from structqa.documents.evaluate import evaluate_open

    examples = list(read_extractive(args.eval).examples)[: args.max_questions]
    if args.sample is not None and args.sample < len(examples):
        # a seeded sample, kept in file order: a file's first questions are a few documents'
        keep = sorted(random.Random(args.sample_seed).sample(range(len(examples)), args.sample))
        examples = [examples[i] for i in keep]
    require_index(args.index)
    if not args.retrieval_only:
        args.checkpoint = _reader(args.checkpoint)
    reader = None if args.retrieval_only else answering_predictor(args)
    gold_answers = None
    if args.gold_answers:
        from structqa.scoring import merged_predictions

        gold_answers = {k: str(v) for k, v in merged_predictions(args.gold_answers).items()}
    with (
        DocumentIndex.open(args.index) as index,
        tracked(_mode(args.no_progress), "asking", "questions") as progress,
    ):
        scores = evaluate_open(
            index,
            reader,
            examples,
            args.top_k_chunks,
            args.retriever,
            progress=progress,
            read=reader is not None,
            gold_answers=gold_answers,
            source=str(args.eval),
        )
    out: dict = {"retriever": args.retriever, "top_k_chunks": args.top_k_chunks}
    if gold_answers is not None:
        out["gold_answers"] = [str(p) for p in args.gold_answers]
    if args.sample is not None:
        out["sample"] = {"questions": len(examples), "seed": args.sample_seed}
    if reader is None:  # recall only
        out |= {k: v for k, v in scores.to_json().items() if "recall" in k or k == "questions"}
    else:
        out |= {"runtime": reader.runtime, **scores.to_json()}
    print(json.dumps(out, indent=2))
    if args.out:
        write_json(Path(args.out), out)
    return 0


def cmd_evaluate_retrieval(args: argparse.Namespace, extra: list[str]) -> int:  # noqa: ARG001
    from structqa.documents import DocumentIndex
    from structqa.documents.metrics import ranked_documents, read_qrels, read_queries, score_runs

    queries, qrels = read_queries(args.queries), read_qrels(args.qrels)
    judged = [q for q in queries if q in qrels]
    depth = max(100, args.depth)
    with DocumentIndex.open(args.index) as index:
        ranked = ranked_documents(index, [queries[q] for q in judged], depth, args.retriever)
    runs = dict(zip(judged, ranked, strict=True))
    scores = {
        "retriever": args.retriever,
        **score_runs(runs, qrels),
        "documents_ranked": min((len(r) for r in ranked), default=0),
    }
    print(json.dumps(scores, indent=2))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(scores, indent=2), encoding="utf-8")
    return 0


def _mode(no_progress: bool) -> str:
    """A bar, or log lines for a log file (``--no-progress``: it once meant silence)."""
    return "lines" if no_progress else "bar"


def _read_both(index, reader, examples, top_k: int, retriever: str, progress: bool):
    """Each question's answers read once, ranked two ways: every chunk's best span (for the
    set-level decision) and as the passage threshold leaves them."""

    from structqa.documents.ask import ranked
    from structqa.features.squad import cut_questions

    # a long question is cut once, as `evaluate` cuts a file's (refused, it stopped the fit)
    examples = cut_questions(examples, reader.tokenizer, reader.features.max_query_len)
    forced, passage = [], []
    with tracked(_mode(not progress), "asking", "questions") as update:
        for start in range(0, len(examples), 32):
            part = examples[start : start + 32]
            retrieved = index.search_many([ex.question for ex in part], top_k, retriever)
            pairs = [
                (ex.question, h.text)
                for ex, hits in zip(part, retrieved, strict=True)
                for h in hits
            ]
            read = iter(reader.predict_batch(pairs))
            for ex, hits in zip(part, retrieved, strict=True):
                answers = [next(read) for _ in hits]
                forced.append(ranked(ex.question, hits, answers, forced=True))
                passage.append(ranked(ex.question, hits, answers))
            update(start + len(part), len(examples))
    return forced, passage


def cmd_fit_no_answer(args: argparse.Namespace, extra: list[str]) -> int:  # noqa: ARG001
    from structqa.data.readers import read_extractive
    from structqa.documents import DocumentIndex
    from structqa.documents import no_answer as na
    from structqa.documents.evaluate import check_passages_indexed

    require_index(args.index)
    args.checkpoint = _reader(args.checkpoint)
    reader = answering_predictor(args)
    fit_examples = list(read_extractive(args.questions).examples)[: args.max_questions]
    unanswerable = sum(ex.is_impossible for ex in fit_examples)
    if not unanswerable or unanswerable == len(fit_examples):
        raise ValueError(
            f"{args.questions}: the fit needs answerable and unanswerable questions (SQuAD 2.0 "
            f"JSON); it has {unanswerable} unanswerable of {len(fit_examples)}"
        )
    with DocumentIndex.open(args.index) as index:
        check_passages_indexed(index, fit_examples, str(args.questions))
        show = not args.no_progress
        forced, _ = _read_both(index, reader, fit_examples, args.top_k_chunks, args.retriever, show)
        threshold, f1, always = na.fit(forced, fit_examples)
        fitted = na.SetThreshold(
            threshold=threshold,
            reader=na.reader_id(args.checkpoint),
            retriever=args.retriever,
            top_k_chunks=args.top_k_chunks,
            fitted_on=str(args.questions),
            questions=len(fit_examples),
            unanswerable=unanswerable,
            f1=f1,
            f1_always_answer=always,
            bm25_weight=index.bm25_weight,
            runtime=reader.runtime,
        )
        path = na.save(args.index, fitted)
        print(
            f"set-level threshold {threshold:.3f}: F1 {f1:.2f} on the {len(fit_examples)} "
            f"questions of {args.questions} (always answering {always:.2f}); saved in {path} "
            f"for {args.retriever} with {args.top_k_chunks} chunks (delete it to go back to "
            "the per-passage decision)",
            file=sys.stderr,
        )
        out: dict = {"fit": vars(fitted), "saved": str(path), "runtime": reader.runtime}
        if args.test:
            test_examples = list(read_extractive(args.test).examples)[: args.max_questions]
            forced, passage = _read_both(
                index, reader, test_examples, args.top_k_chunks, args.retriever, show
            )
            out["test"] = {
                "file": str(args.test),
                "questions": len(test_examples),
                "set_level": na.scores_at(forced, test_examples, threshold),
                "passage_threshold": na.scores_at(passage, test_examples, None),
                "always_answer": na.scores_at(forced, test_examples, None),
            }
            fit_f1, passage_f1 = (out["test"][k]["f1"] for k in ("set_level", "passage_threshold"))
            if fit_f1 < passage_f1:
                print(
                    f"structqa fit-no-answer: warning: on {args.test} the fitted threshold "
                    f"scores F1 {fit_f1:.2f} against {passage_f1:.2f} for the per-passage "
                    f"decision; `ask` and `serve` use the fit from now on: delete {path} to "
                    "go back",
                    file=sys.stderr,
                )
    print(json.dumps(out, indent=2))
    if args.out:
        write_json(Path(args.out), out)
    return 0


def _add_reader_arguments(p: argparse.ArgumentParser, progress: bool = True) -> None:
    """The reader and retrieval options of the commands that read retrieved chunks."""
    p.add_argument("--checkpoint", help=READER_HELP)
    p.add_argument("--top-k-chunks", type=int, default=10, help="chunks read per question")
    p.add_argument("--retriever", choices=RETRIEVERS, default="hybrid", help=RETRIEVER_HELP)
    add_bf16_argument(p)
    p.add_argument("--whole-words", action=argparse.BooleanOptionalAction, help=WHOLE_WORDS_HELP)
    if progress:
        add_no_progress_argument(p)
    add_runtime_argument(p)


_INDEX_TEXT = """index a folder of documents for search and questions

Reads .txt, .md, .rst, .html, .pdf files, SQuAD/MRQA files (each context a document) and BEIR
corpus.jsonl[.gz] under PATH (folders recursively; hidden files and folders are left out; a
folder behind a symbolic link outside PATH is read once, a link within PATH or to a folder above
it not followed), cuts them into sentence-bounded chunks and indexes them for BM25 and dense
search; --out is a new or empty folder, or an index to update. Run again on a changed folder:
new and changed files are indexed and deleted ones dropped (each named); files indexed earlier
under a PATH not given this time are kept as indexed (said in a note), so a new folder can be
added alone (structqa index NEW --out INDEX); --prune drops them, leaving the index to the
PATHs given. A file moved or renamed, or the same folder typed from elsewhere, is recognised by
its content and not embedded again; sources show the paths as last typed. Files that cannot be
read (or whose name is not UTF-8) are skipped, each named with the reason; an emptied file's
chunks are dropped. A run commits its work every few minutes: stopped (Ctrl-C, a crash), the
same command run again goes on from there, embedding again only the files it was writing.
"""


_ASK_TEXT = """answer a question from an index of documents, with the sources

Retrieves the best chunks of INDEX for the question, reads them all in one batched pass with the
reader, and prints the answers ranked across documents, each with its document, page and
character offsets; or that the retrieved documents do not answer it.
"""


_EVALUATE_ASK_TEXT = """ask every question of a SQuAD/MRQA file of the whole index, scored end
to end

For a file whose passages are documents of INDEX: retrieval recall@1/5/10 of each question's
gold passage by every retriever (bm25, dense, hybrid, rrf), and EM/F1 of the best answer found
in the whole index (--retriever), beside the same reader given the gold passage.
"""


def cmd_fit_fusion(args: argparse.Namespace, extra: list[str]) -> int:  # noqa: ARG001
    from structqa.data.readers import read_extractive
    from structqa.documents import DocumentIndex, fusion
    from structqa.documents.evaluate import evaluate_open

    examples = list(read_extractive(args.questions).examples)
    with DocumentIndex.open(args.index) as index:
        fit = fusion.fit_weight(index, examples, str(args.questions))
        path = fusion.save(index, fit)
        print(f"{fit.summary()}; saved in {path}", file=sys.stderr)
        out: dict = {"fit": vars(fit), "saved": str(path)}
        if args.test:
            test = list(read_extractive(args.test).examples)
            scores = evaluate_open(index, None, test, read=False, source=str(args.test))
            out["test"] = {"file": str(args.test), "questions": scores.questions}
            out["test"].update({k: v for k, v in scores.to_json().items() if "recall" in k})
    print(json.dumps(out, indent=2))
    if args.out:
        write_json(Path(args.out), out)
    return 0


_FIT_FUSION_TEXT = """fit BM25's weight in the hybrid retriever on labelled questions of the
collection

For a SQuAD/MRQA file whose passages are documents of INDEX (a few hundred questions are
enough): tries BM25 weights 0, 0.05, .., 1 and keeps the one whose hybrid ranking puts the most
gold passages among the first 5 documents (ties: the one nearest the default 0.5). It is saved
in INDEX (fusion.json) and every hybrid search uses it from then on. --test reports recall@1/5/10
of every retriever on another such file.
"""


_FIT_NO_ANSWER_TEXT = """fit the index's one no-answer decision per question on labelled questions

Asks every question of a SQuAD 2.0 file (answerable and unanswerable questions over documents of
INDEX) of the whole index, and fits the threshold on each question's best answer over the
retrieved chunks that maximises their F1. It is saved in INDEX (no_answer.json) for this reader,
retriever and --top-k-chunks, and `ask` and `serve --index` use it from then on (delete
INDEX/no_answer.json to go back to each passage's own decision). --test scores another such
file at that threshold, beside the passage threshold and always answering, and warns when the
fit does worse there.
"""


def _fit_arguments(p: argparse.ArgumentParser, kind: str, test: str, written: str) -> None:
    """INDEX, the labelled questions a fit is made on, a --test file and --out."""
    p.add_argument("index")
    p.add_argument("--questions", required=True, help=f"{kind} of labelled questions")
    p.add_argument("--test", help=f"another labelled file, {test}")
    p.add_argument("--out", help=f"also write {written} as JSON")


def add_parser(sub) -> None:
    ix = command(sub, "index", _INDEX_TEXT)
    ix.add_argument("paths", nargs="+", metavar="PATH")
    ix.add_argument(
        "--out",
        required=True,
        help="the index folder: a new or empty one (created), or an index (updated)",
    )
    ix.add_argument(
        "--store",
        help="where the embeddings live: faiss (files in the index, the default), qdrant "
        "(Qdrant embedded, files in the index), or qdrant:URL (a Qdrant server or cluster)",
    )
    ix.add_argument(
        "--prune",
        action="store_true",
        help="drop the files indexed earlier that are not under the PATHs given (by default "
        "they are kept as indexed; deleted files are dropped either way)",
    )
    add_no_progress_argument(ix)
    ix.set_defaults(func=cmd_index)

    se = sub.add_parser("search", help="the best chunks of an index for a query")
    se.add_argument("index")
    se.add_argument("--query", required=True, help="what to search for, in words")
    se.add_argument("--k", type=int, default=10, help="chunks shown (default 10)")
    se.add_argument("--retriever", choices=RETRIEVERS, default="hybrid", help=RETRIEVER_HELP)
    se.add_argument("--json", action="store_true", help="the hits as JSON, for scripts")
    se.set_defaults(func=cmd_search)

    ak = command(sub, "ask", _ASK_TEXT)
    ak.add_argument("index")
    ak.add_argument("--question", required=True, help="the question to answer from the index")
    ak.add_argument("--answers", type=int, default=5, help="answers shown")
    ak.add_argument("--json", action="store_true", help="the answers as JSON, for scripts")
    _add_reader_arguments(ak, progress=False)
    ak.set_defaults(func=cmd_ask)

    ea = command(sub, "evaluate-ask", _EVALUATE_ASK_TEXT)
    ea.add_argument("index")
    ea.add_argument("--eval", required=True, help="SQuAD/MRQA file of questions")
    ea.add_argument("--max-questions", type=positive_int, help="the first N questions only")
    add_sample_arguments(
        ea,
        "--sample",
        "--sample-seed",
        "N questions drawn at random (kept in file order), e.g. a long file on a slow CPU",
    )
    ea.add_argument(
        "--retrieval-only", action="store_true", help="only the gold passages' recall@k"
    )
    ea.add_argument("--out", help="also write the scores as JSON")
    ea.add_argument(
        "--gold-answers",
        nargs="+",
        metavar="PRED",
        help="the same reader's answers on the gold passages, saved by `structqa evaluate` "
        "(predictions.json; several answering disjoint questions are read as one): used in "
        "place of reading every gold passage again, most of the time on long documents",
    )
    _add_reader_arguments(ea)
    ea.set_defaults(func=cmd_evaluate_ask)

    fn = command(sub, "fit-no-answer", _FIT_NO_ANSWER_TEXT)
    _fit_arguments(fn, "SQuAD 2.0 JSON", "scored at the fitted threshold", "the fit and scores")
    fn.add_argument("--max-questions", type=positive_int, help="the first N questions of each file")
    _add_reader_arguments(fn)
    fn.set_defaults(func=cmd_fit_no_answer)

    ff = command(sub, "fit-fusion", _FIT_FUSION_TEXT)
    _fit_arguments(ff, "SQuAD/MRQA file", "recall of every retriever on it", "the fit (and recall)")
    ff.set_defaults(func=cmd_fit_fusion)

    ev = sub.add_parser(
        "evaluate-retrieval",
        help="nDCG@10 and recall@1/5/20/100 of an index on BEIR queries and qrels",
    )
    ev.add_argument("index")
    ev.add_argument("--queries", required=True, help="BEIR queries .jsonl (_id, text)")
    ev.add_argument("--qrels", required=True, help="BEIR qrels .tsv (query-id, corpus-id, score)")
    ev.add_argument("--retriever", choices=RETRIEVERS, default="hybrid", help=RETRIEVER_HELP)
    ev.add_argument(
        "--depth", type=int, default=100, help="documents ranked per query (at least 100)"
    )
    ev.add_argument("--out", help="also write the scores as JSON")
    ev.set_defaults(func=cmd_evaluate_retrieval)
