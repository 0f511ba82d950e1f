"""How well SQuAD 2.0 runs find the answer span, apart from whether they abstain (issue 4).

    python scripts/forced_answers.py ../shared/data/splits/squad2-heldout.v2.0.json \\
        runs/anna-squad2/variant=no-pretrain,seed=0 [RUN_DIR ...]

The official v2.0 scores mix two skills: finding the span and deciding to abstain. A model
that abstains on every question scores the no-answer share of the file (52.96 on
splits/squad2-heldout) with a HasAns F1 of 0, whatever it knows about spans. This script
forces an answer: for each answerable question it takes the run's best non-empty span from
``best/nbest_predictions.json`` and scores it against the gold texts with the official v2.0
definitions (``f1_v2``, ``exact_match``; the maximum over gold answers). It also reports how
often the saved ``best/predictions.json`` abstains, on answerable and unanswerable questions,
and how well ``best/null_odds.json`` (the no-answer score minus the best span's) separates the
two kinds whatever the threshold: the no-answer AUC, the chance that an unanswerable question
gets higher odds than an answerable one (ties count half; 50 % = no separation).
Prints one markdown row per run directory.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from structqa.metrics.squad import exact_match, f1_v2, gold_from_squad_json


def forced_scores(
    gold: dict[str, list[str]], nbest: dict[str, list[dict[str, Any]]]
) -> dict[str, float]:
    """Forced-answer F1 and EM (percent) over the answerable questions of ``gold``; a question
    whose n-best list has no non-empty span scores 0."""
    f1s, ems = [], []
    for qid, answers in gold.items():
        golds = [a for a in answers if a.strip()]
        if not golds:
            continue
        spans = [c["text"] for c in nbest.get(qid, []) if c.get("text")]
        pred = spans[0] if spans else ""
        f1s.append(max(f1_v2(pred, g) for g in golds))
        ems.append(max(exact_match(pred, g) for g in golds))
    if not f1s:
        raise ValueError("no answerable question in the gold file")
    return {"forced_f1": 100 * sum(f1s) / len(f1s), "forced_em": 100 * sum(ems) / len(ems)}


def abstentions(gold: dict[str, list[str]], preds: dict[str, str]) -> dict[str, float]:
    """Percent of answerable and of unanswerable questions whose prediction is empty."""
    has = [qid for qid, a in gold.items() if any(x.strip() for x in a)]
    answerable = set(has)
    no = [qid for qid in gold if qid not in answerable]
    return {
        "abstain_has_ans": 100 * sum(not preds.get(q, "") for q in has) / max(len(has), 1),
        "abstain_no_ans": 100 * sum(not preds.get(q, "") for q in no) / max(len(no), 1),
    }


def no_answer_auc(gold: dict[str, list[str]], null_odds: dict[str, float]) -> float:
    """Percent chance that an unanswerable question's null odds exceed an answerable one's
    (Mann-Whitney, ties half), over the questions of ``gold``."""
    missing = [q for q in gold if q not in null_odds]
    if missing:
        raise ValueError(f"no null odds for {len(missing)} question(s), e.g. {missing[0]!r}")
    has = [null_odds[q] for q, a in gold.items() if any(x.strip() for x in a)]
    no = [null_odds[q] for q, a in gold.items() if not any(x.strip() for x in a)]
    if not has or not no:
        raise ValueError("the no-answer AUC needs answerable and unanswerable questions")
    ranked = sorted([(v, 0) for v in has] + [(v, 1) for v in no])
    rank_sum, i = 0.0, 0
    while i < len(ranked):  # average ranks over ties (1-based)
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mean_rank = (i + 1 + j) / 2
        rank_sum += mean_rank * sum(kind for _, kind in ranked[i:j])
        i = j
    u = rank_sum - len(no) * (len(no) + 1) / 2
    return 100 * u / (len(no) * len(has))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gold", help="the SQuAD 2.0 file the runs were scored on")
    p.add_argument("runs", nargs="+", help="run directories (each with best/)")
    args = p.parse_args(argv)
    gold, _ = gold_from_squad_json(json.loads(Path(args.gold).read_text(encoding="utf-8")))
    print(
        "| run | forced F1 | forced EM | abstains, answerable | abstains, unanswerable "
        "| no-answer AUC |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for run in map(Path, args.runs):
        best = run / "best"
        try:
            nbest = json.loads((best / "nbest_predictions.json").read_text(encoding="utf-8"))
            preds = json.loads((best / "predictions.json").read_text(encoding="utf-8"))
            odds = json.loads((best / "null_odds.json").read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise SystemExit(f"{run}: no saved answers ({err.filename})") from None
        try:
            auc = no_answer_auc(gold, odds)
        except ValueError as err:
            raise SystemExit(f"{best / 'null_odds.json'}: {err}") from None
        s = {**forced_scores(gold, nbest), **abstentions(gold, preds)}
        print(
            f"| {run.parent.name}/{run.name} | {s['forced_f1']:.2f} | {s['forced_em']:.2f} | "
            f"{s['abstain_has_ans']:.1f} % | {s['abstain_no_ans']:.1f} % | {auc:.1f} % |"
        )


if __name__ == "__main__":
    main()
