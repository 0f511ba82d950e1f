"""How well SQuAD 2.0 runs find the answer span, apart from whether they abstain.

    python scripts/forced_answers.py ../shared/data/splits/squad2-heldout.v2.0.json \\
        runs/anna-squad2/variant=no-pretrain,seed=0 [RUN_DIR ...]

The official v2.0 scores mix two skills: finding the span and deciding to abstain. A model
that abstains on every question scores the no-answer share of the file (52.96 on
splits/squad2-heldout) with a HasAns F1 of 0, whatever it knows about spans. This script
forces an answer: for each answerable question it takes the run's best non-empty span from
``best/nbest_predictions.json`` and scores it against the gold texts with the official v2.0
definitions (``raw_scores_v2``: the maximum over gold answers). It also reports how
often the saved ``best/predictions.json`` abstains, on answerable and unanswerable questions,
and how well ``best/null_odds.json`` (the no-answer score minus the best span's) separates the
two kinds whatever the threshold: the no-answer AUC, the chance that an unanswerable question
gets higher odds than an answerable one (ties count half; 50 % = no separation).
Prints one markdown row per run directory.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scipy.stats import mannwhitneyu

from structqa.metrics.squad import gold_from_squad_json, raw_scores_v2


def forced_scores(
    gold: Mapping[str, Sequence[str]],
    has_ans: Mapping[str, bool],
    nbest: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, float]:
    """Forced-answer F1 and EM (percent) over the answerable questions; a question whose
    n-best list has no non-empty span scores 0."""
    answerable = [q for q in gold if has_ans[q]]
    if not answerable:
        raise ValueError("no answerable question in the gold file")
    forced = {
        q: next((c["text"] for c in nbest.get(q, []) if c.get("text")), "") for q in answerable
    }
    exact, f1 = raw_scores_v2({q: gold[q] for q in answerable}, forced)
    n = len(answerable)
    return {"forced_f1": 100 * sum(f1.values()) / n, "forced_em": 100 * sum(exact.values()) / n}


def abstentions(has_ans: Mapping[str, bool], preds: Mapping[str, str]) -> dict[str, float]:
    """Percent of answerable and of unanswerable questions whose prediction is empty."""
    out = {}
    for key, kind in (("abstain_has_ans", True), ("abstain_no_ans", False)):
        qids = [q for q, has in has_ans.items() if has is kind]
        out[key] = 100 * sum(not preds.get(q, "") for q in qids) / max(len(qids), 1)
    return out


def no_answer_auc(has_ans: Mapping[str, bool], null_odds: Mapping[str, float]) -> float:
    """Percent chance that an unanswerable question's null odds exceed an answerable one's
    (Mann-Whitney U over the pairs, ties half), over the questions of ``has_ans``."""
    missing = [q for q in has_ans if q not in null_odds]
    if missing:
        raise ValueError(f"no null odds for {len(missing)} question(s), e.g. {missing[0]!r}")
    has = [null_odds[q] for q, a in has_ans.items() if a]
    no = [null_odds[q] for q, a in has_ans.items() if not a]
    if not has or not no:
        raise ValueError("the no-answer AUC needs answerable and unanswerable questions")
    return 100 * float(mannwhitneyu(no, has).statistic) / (len(no) * len(has))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gold", help="the SQuAD 2.0 file the runs were scored on")
    p.add_argument("runs", nargs="+", help="run directories (each with best/)")
    args = p.parse_args(argv)
    gold, has_ans = gold_from_squad_json(json.loads(Path(args.gold).read_text(encoding="utf-8")))
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
            auc = no_answer_auc(has_ans, odds)
        except ValueError as err:
            raise SystemExit(f"{best / 'null_odds.json'}: {err}") from None
        s = {**forced_scores(gold, has_ans, nbest), **abstentions(has_ans, preds)}
        print(
            f"| {run.parent.name}/{run.name} | {s['forced_f1']:.2f} | {s['forced_em']:.2f} | "
            f"{s['abstain_has_ans']:.1f} % | {s['abstain_no_ans']:.1f} % | {auc:.1f} % |"
        )


if __name__ == "__main__":
    main()
