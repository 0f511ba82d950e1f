"""How far a SQuAD 2.0 reader's abstention can go by calibration alone: its held-out scores
article by article, and what the verifier and threshold give when fitted on data of other
kinds than the build's validation slice.

The general reader fits its no-answer threshold and answerability verifier on a validation
slice of its own training articles (:mod:`structqa.reader.build`). This script measures,
for a checkpoint with ``calibration.json``:

1. **per article** of the held-out file: the unanswerable share, the AUC of the model's own
   null odds and of the shipped verifier, the F1 at the shipped threshold and at the
   article's own F1-best one;
2. **the verifier and threshold refitted on the slice's human-written questions only** (the
   slice's unanswerable rewrites, ``ID-neg-RULE``, left out), with the threshold moved to
   the held-out's unanswerable share estimated without labels (EM on the verifier's
   posteriors, Saerens et al. 2002);
3. **a bound, not a result: leave one held-out article out.** The threshold, and then the
   verifier too, fitted on the other held-out articles (their labels used) and applied to
   the one left out. No calibration fitted on other articles of SQuAD 2.0's own kind can be
   expected to do better; if this misses a bar, the bar needs a better ranker, not a better
   fit.

Writes OUT/articles.json and OUT/articles.md.

    python scripts/squad2_articles.py runs/reader3/run/best \\
        --slice runs/reader3/run/validation.v2.json \\
        --heldout ../shared/data/splits/squad2-heldout.v2.0.json --out docs/results/reader/articles
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from structqa.calibration.verifier import (
    Verifier,
    feature_matrix,
    fit_verifier,
    with_null_odds,
)
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.decoding import Prediction
from structqa.evaluation import best_null_threshold, score_predictions
from structqa.io import write_json
from structqa.prediction.predictor import Predictor
from structqa.training.negatives import REWRITE_MARK

FEW_FEATURES = ("null_odds", "sentence_similarity", "answer_sentence_similarity")


class Scored:
    """One file's questions, the model's raw predictions and the verifier's features."""

    def __init__(self, examples: Sequence[Example], predictions: dict[str, Prediction], x):
        self.examples = list(examples)
        self.predictions = predictions
        self.x = x
        self.y = np.array([ex.is_impossible for ex in self.examples], dtype=int)
        self.titles = np.array([ex.title for ex in self.examples])

    def subset(self, keep: np.ndarray) -> Scored:
        examples = [ex for ex, k in zip(self.examples, keep, strict=True) if k]
        return Scored(examples, self.predictions, self.x[keep])

    def with_odds(self, odds: np.ndarray) -> dict[str, Prediction]:
        """These questions' predictions (only theirs) with the null odds ``odds``."""
        ids = [ex.id for ex in self.examples]
        return with_null_odds({q: self.predictions[q] for q in ids}, ids, odds)


def _score(data: Scored, odds: np.ndarray, threshold: float | None) -> dict[str, float]:
    """F1 at ``threshold`` (None: the F1-best one on these questions) and the odds' AUC."""
    metrics = score_predictions(data.examples, data.with_odds(odds), True, threshold).metrics
    return {"f1": metrics["f1"], "auc": metrics.get("NoAns_auc", float("nan"))}


def _threshold(data: Scored, odds: np.ndarray) -> float:
    gold = {ex.id: list(ex.gold_texts) for ex in data.examples}
    return best_null_threshold(gold, data.with_odds(odds))


def _logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


def em_prior(odds: np.ndarray, prior: float, iterations: int = 200) -> float:
    """The unanswerable share of questions whose verifier log-odds ``odds`` were fitted under
    the share ``prior``, estimated without labels by EM on the posteriors."""
    share = prior
    for _ in range(iterations):
        shifted = odds + _logit(share) - _logit(prior)
        share = float(np.mean(1.0 / (1.0 + np.exp(-shifted))))
    return share


def per_article(held: Scored, verifier: Verifier, threshold: float) -> list[dict[str, Any]]:
    rows = []
    for title in sorted(set(held.titles)):
        part = held.subset(held.titles == title)
        odds = verifier.score(part.x)
        raw = part.x[:, verifier.names.index("null_odds")]
        rows.append(
            {
                "article": title,
                "questions": len(part.y),
                "unanswerable_share": float(part.y.mean()),
                "auc_null_odds": 100 * float(roc_auc_score(part.y, raw)),
                "auc_verifier": 100 * float(roc_auc_score(part.y, odds)),
                "f1_shipped_threshold": _score(part, odds, threshold)["f1"],
                "f1_best_threshold": _score(part, odds, None)["f1"],
            }
        )
    return rows


def human_slice_refit(sliced: Scored, held: Scored, names: list[str], encoder) -> dict:
    """The verifier and threshold fitted on the slice's human-written questions only."""
    human = np.array([REWRITE_MARK not in ex.id for ex in sliced.examples])
    part = sliced.subset(human)
    cols = [names.index(n) for n in names]
    verifier, oof = fit_verifier(part.x[:, cols], part.y, names=names, encoder=encoder)
    threshold = _threshold(part, oof)
    odds = verifier.score(held.x[:, cols])
    share = em_prior(odds, float(part.y.mean()))
    moved = threshold - (_logit(share) - _logit(float(part.y.mean())))
    return {
        "slice_questions": int(len(part.y)),
        "slice_unanswerable_share": float(part.y.mean()),
        "auc_out_of_fold": verifier.fit["auc_out_of_fold"],
        "heldout_at_slice_threshold": _score(held, odds, threshold),
        "em_unanswerable_share": share,
        "heldout_at_em_threshold": _score(held, odds, moved),
    }


def leave_one_article_out(held: Scored, verifier: Verifier, names: Sequence[str]) -> dict:
    """Each held-out article scored by a threshold (and a verifier) fitted on the others."""
    shipped = verifier.score(held.x)
    out: dict[str, Any] = {}
    fits = (("threshold", None), ("verifier_all", verifier.names), ("verifier_few", names))
    for label, refit in fits:
        odds = np.zeros(len(held.y))
        thresholds = np.zeros(len(held.y))
        for title in sorted(set(held.titles)):
            test = held.titles == title
            train = held.subset(~test)
            if refit is None:
                odds[test] = shipped[test]
                thresholds[test] = _threshold(train, shipped[~test])
                continue
            cols = [verifier.names.index(n) for n in refit]
            fitted, oof = fit_verifier(train.x[:, cols], train.y, names=list(refit))
            odds[test] = fitted.score(held.x[test][:, cols])
            thresholds[test] = _threshold(train, oof)
        abstain = odds > thresholds
        f1 = _answer_f1(held)
        out[label] = {
            "f1": 100 * float(np.mean(np.where(abstain, held.y == 1, f1))),
            "auc": 100 * float(roc_auc_score(held.y, odds)),
        }
    return out


def _answer_f1(data: Scored) -> np.ndarray:
    """Each question's F1 when answered with its best span (0 for an unanswerable one)."""
    from structqa.metrics.squad import raw_scores_v2

    gold = {ex.id: list(ex.gold_texts) for ex in data.examples}
    _, f1 = raw_scores_v2(gold, {k: data.predictions[k].text for k in gold})
    return np.array([0.0 if y else f1[ex.id] for ex, y in zip(data.examples, data.y, strict=True)])


def _scored(predictor: Predictor, path: str, verifier: Verifier) -> Scored:
    examples = list(read_extractive(path).examples)
    predictions = dict(predictor.predict_examples(examples, verify=False))
    x = feature_matrix(examples, predictions, verifier.names, verifier.encoder)
    return Scored(examples, predictions, x)


def markdown(result: dict[str, Any]) -> str:
    head = (
        "| article | questions | unanswerable | AUC null odds | AUC verifier "
        "| F1 shipped threshold | F1 article's best |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in result["per_article"]:
        cells = [
            r["article"],
            str(r["questions"]),
            f"{100 * r['unanswerable_share']:.0f} %",
            f"{r['auc_null_odds']:.1f}",
            f"{r['auc_verifier']:.1f}",
            f"{r['f1_shipped_threshold']:.2f}",
            f"{r['f1_best_threshold']:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    h, b = result["human_slice"], result["leave_one_article_out"]
    share = 100 * h["em_unanswerable_share"]
    rows = [
        ("shipped (verifier and threshold fitted on the whole slice)", result["shipped"]),
        ("refitted on the slice's human-written questions", h["heldout_at_slice_threshold"]),
        (f"the same, threshold at the EM share ({share:.1f} %)", h["heldout_at_em_threshold"]),
        ("bound: threshold fitted on the other held-out articles", b["threshold"]),
        ("bound: verifier (all features) and threshold on the other articles", b["verifier_all"]),
        (
            f"bound: verifier ({len(FEW_FEATURES)} features) and threshold on the other articles",
            b["verifier_few"],
        ),
    ]
    lines += ["", "| calibration | held-out F1 | AUC |", "|---|---|---|"]
    lines += [f"| {name} | {m['f1']:.2f} | {m['auc']:.2f} |" for name, m in rows]
    best = result["heldout_best_f1"]
    lines.append(f"| in-sample: the F1-best threshold on the whole held-out file | {best:.2f} | |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("checkpoint", help="a SQuAD 2.0 checkpoint with a verifier in calibration.json")
    ap.add_argument("--slice", required=True, help="the validation slice it was calibrated on")
    ap.add_argument("--heldout", required=True, help="SQuAD 2.0 held-out file (with titles)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    start = time.time()
    predictor = Predictor.from_checkpoint(args.checkpoint)
    calibration = json.loads((Path(args.checkpoint) / "calibration.json").read_text())
    if not calibration.get("verifier"):
        raise SystemExit(
            f"{args.checkpoint}/calibration.json has no verifier: fit one with "
            "`structqa calibrate --verifier similarity` first"
        )
    verifier = Verifier.from_dict(calibration["verifier"])
    threshold = float(calibration["null_threshold"])
    sliced = _scored(predictor, args.slice, verifier)
    held = _scored(predictor, args.heldout, verifier)
    shipped = verifier.score(held.x)
    result = {
        "checkpoint": args.checkpoint,
        "slice": args.slice,
        "heldout": args.heldout,
        "shipped": _score(held, shipped, threshold),
        "heldout_best_f1": _score(held, shipped, None)["f1"],
        "per_article": per_article(held, verifier, threshold),
        "human_slice": human_slice_refit(sliced, held, verifier.names, verifier.encoder),
        "leave_one_article_out": leave_one_article_out(held, verifier, FEW_FEATURES),
        "wall_time_s": round(time.time() - start, 1),
    }
    out = Path(args.out)
    write_json(out / "articles.json", result)
    (out / "articles.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
