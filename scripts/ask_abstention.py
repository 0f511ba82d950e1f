"""How often `ask` over a collection says "no answer" to questions the collection does answer,
and what that costs in F1, for one or more calibrations of the same reader.

`ask` over an index without a set-level no-answer decision fitted for the reader (`structqa
fit-no-answer`) drops each chunk whose answer the reader declines (its calibrated no-answer
threshold), so a reader calibrated to abstain more answers fewer questions. This asks the
first N questions of a file whose passages the index holds (SQuAD 1.1 held-out, all
answerable, or SQuAD 2.0 held-out, half unanswerable, against the SQuAD-open index) as
`structqa ask` does there (`set_threshold=None`: each chunk's own threshold; `--runtime`,
int8 by default, as `ask` picks on a CPU without native bf16) and scores the top answer as
the file's official script does ("no answer" is right exactly for an unanswerable question).

    python scripts/ask_abstention.py runs/squad-open-index \\
        --eval ../shared/data/splits/squad1-heldout.mrqa.jsonl.gz --questions 400 \\
        --checkpoint OLD=ckpt-a --checkpoint NEW=ckpt-b --out ask-abstention.json
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from structqa.data.readers import read_extractive
from structqa.documents.ask import ask
from structqa.documents.index import DocumentIndex
from structqa.io import write_json
from structqa.prediction.predictor import Predictor
from structqa.scoring import load_gold, score_questions


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("index", help="a `structqa index` directory")
    ap.add_argument("--eval", required=True, help="questions the collection answers")
    ap.add_argument("--questions", type=int, default=400, help="the first N of them")
    ap.add_argument(
        "--spread", action="store_true", help="N questions evenly spaced over the file instead"
    )
    ap.add_argument("--checkpoint", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--runtime", default="onnx-int8")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    examples = list(read_extractive(args.eval).examples)
    n = min(args.questions, len(examples))
    examples = [examples[i * len(examples) // n] for i in range(n)] if args.spread else examples[:n]
    scheme, all_gold = load_gold(args.eval)
    gold = {ex.id: all_gold[ex.id] for ex in examples}
    index = DocumentIndex.open(args.index)
    rows = {}
    for item in args.checkpoint:
        name, _, directory = item.partition("=")
        start = time.time()
        predictor = Predictor.from_checkpoint(directory, runtime=args.runtime)
        results = ask(index, predictor, [ex.question for ex in examples], set_threshold=None)
        answers = {
            ex.id: (r.answers[0].text if r.answers else "")
            for ex, r in zip(examples, results, strict=True)
        }
        scores = score_questions(scheme, gold, answers)
        rows[name] = {
            "checkpoint": directory,
            "null_threshold": predictor.null_threshold,
            "no_answer": sum(not a for a in answers.values()) / len(answers),
            "unanswerable": sum(not g for g in gold.values()) / len(gold),
            "exact_match": float(scores.exact_match.mean()),
            "f1": float(scores.f1.mean()),
            "seconds": round(time.time() - start, 1),
        }
        print(name, rows[name], flush=True)
    write_json(
        Path(args.out),
        {
            "index": args.index,
            "eval": args.eval,
            "questions": len(examples),
            "spread": args.spread,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
