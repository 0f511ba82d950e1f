"""The output ensemble of several runs, from the n-best answers each saved: what averaging the
runs' weights (`structqa soup`) is measured against.

For every question, each distinct span (its start and end character) scores the mean over
the runs of the probability each gave it (0 where a run did not list it); the ensemble
answers the best-scoring span. It reads at K models' cost, where a soup reads at one's.

    python scripts/ensemble_nbest.py RUN_A/best/eval/nbest_predictions.json \\
        RUN_B/best/eval/nbest_predictions.json ... --out ensemble/predictions.json

Score it with `structqa score` or compare it with `structqa compare`.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any


def ensemble(nbests: list[dict[str, list[dict[str, Any]]]]) -> dict[str, str]:
    """The best span per question by mean probability over the runs' n-best lists."""
    questions = set(nbests[0])
    for n, nbest in enumerate(nbests[1:], 1):
        if set(nbest) != questions:
            raise ValueError(f"n-best file {n + 1} answers other questions than the first")
    answers = {}
    for qid in sorted(questions):
        score: dict[tuple[int, int], float] = defaultdict(float)
        text: dict[tuple[int, int], str] = {}
        for nbest in nbests:
            for candidate in nbest[qid]:
                span = (candidate.get("start_char", -1), candidate.get("end_char", -1))
                score[span] += candidate["probability"] / len(nbests)
                text.setdefault(span, candidate["text"])
        answers[qid] = text[max(score, key=lambda s: (score[s], -s[0], -s[1]))]
    return answers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("nbest", nargs="+", help="nbest_predictions.json of each run")
    p.add_argument("--out", required=True, help="predictions.json to write")
    args = p.parse_args(argv)
    if len(args.nbest) < 2:
        p.error("give the n-best files of two or more runs")
    nbests = [json.loads(Path(f).read_text(encoding="utf-8")) for f in args.nbest]
    answers = ensemble(nbests)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(answers, indent=1), encoding="utf-8")
    print(f"wrote {out}: {len(answers)} answers, the ensemble of {len(nbests)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
