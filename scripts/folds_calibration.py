"""Calibration error out of domain, before and after fitting on the user's own labels, pooled
over the held-out folds of a k-fold split (the document-collection COVID-QA study).

    python scripts/folds_calibration.py runs/reader/run/best --folds runs/covidqa-folds \\
        --answers 'runs/covid-reader-fold{k}' --out docs/results/documents/covidqa-calibration

For each fold k (``FOLDS/fold{k}-test.json`` and ``fold{k}-train.json``, as `structqa split`
writes them), the answers that CHECKPOINT gave to that fold's test questions are read from
``--answers`` (the directory `structqa evaluate CHECKPOINT --eval FOLDS/fold{k}-test.json --out
DIR` wrote; the training questions of fold k are the other folds' test questions, so their
answers are there too). The probabilities returned for fold k's test questions are then scored:

- ``as shipped``: with the checkpoint's own calibration (fitted on SQuAD);
- ``a fifth of the articles``: calibrated on one fifth of fold k's training passages (whole
  passages: `structqa split FOLDS/fold{k}-train.json --folds 5`'s fold0-test.json), the fit
  `structqa calibrate CHECKPOINT --on SLICE --predictions DIR` makes from the same answers;
- ``N labels, spread``: on N questions drawn at random from all of fold k's training passages;
- ``every training question``: on all of fold k's training questions.

With ``--runs PATTERN`` (a fine-tuned run per fold, ``{k}`` in its directory, as
``configs/documents/covidqa-5fold.yaml`` writes them), also each finished run's own test
answers (best/eval/): uncalibrated, and calibrated on the validation slice of its training
articles that chose best/ (the fit `structqa train` and the experiment runner make; written
into best/calibration.json where it is missing).

The expected calibration error (15 bins; correct = token F1 >= 0.5) of each, per fold and
pooled over every fold's test questions, goes to OUT/calibration.json and a reliability
diagram of the pooled probabilities to OUT/reliability.png; beside each error, its floor: the
mean error of the same probabilities against outcomes drawn from them (what a perfectly
calibrated model would score on that many questions). Only saved answers are read: no
model runs here. SQuAD 1.1-style files only (every question answerable): a fold file with an
unanswerable question is refused.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

from structqa.calibration.fit import (
    CORRECT_F1,
    ECE_BINS,
    Scores,
    expected_calibration_error,
    outcomes,
    raw_probability,
    returned_correct,
    scores_from_predictions,
)
from structqa.calibration.report import (
    calibrate,
    calibrate_after_training,
    load_calibration,
    plot_reliability,
    predictions_from_files,
    saved_predictions,
)
from structqa.data.overlap import passage_key
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.data.sampling import passage_folds
from structqa.decoding import Prediction
from structqa.io import write_json
from structqa.models.build import checkpoint_config
from structqa.training.data import load_eval_examples
from structqa.training.heldout import TEST_DIR


def fold_files(folds: Path) -> list[tuple[Path, Path]]:
    """``(train, test)`` files of every fold under ``folds``, in fold order."""
    pairs = []
    k = 0
    while (folds / f"fold{k}-test.json").is_file():
        pairs.append((folds / f"fold{k}-train.json", folds / f"fold{k}-test.json"))
        k += 1
    if not pairs:
        raise SystemExit(f"{folds}: no fold0-test.json (write the folds with `structqa split`)")
    return pairs


def read_fold(path: Path, answers: dict[str, Prediction], pattern: str) -> list[Example]:
    """The questions of one fold file, each answered in ``answers`` and answerable."""
    examples = list(read_extractive(path).examples)
    if any(ex.is_impossible for ex in examples):
        raise SystemExit(f"{path}: has unanswerable questions; this script reads SQuAD 1.1 only")
    missing = [ex.id for ex in examples if ex.id not in answers]
    if missing:
        raise SystemExit(
            f"{path}: question {missing[0]!r} ({len(missing)} of {len(examples)}) has no answer "
            f"under {pattern}: evaluate every fold's test file into it first"
        )
    return examples


def answered(
    examples: list[Example], predictions: dict[str, Prediction]
) -> tuple[Scores, np.ndarray]:
    """What each question's probability is computed from, and whether its answer is right."""
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    ids = list(gold)
    scores = scores_from_predictions(predictions, ids, version_2=False)
    return scores, returned_correct(scores, outcomes(gold, predictions, ids), None)


def ece_floor(p: np.ndarray, draws: int = 200, seed: int = 0) -> float:
    """The mean ECE of ``p`` against outcomes drawn from ``p`` itself: what a perfectly
    calibrated model scores on this many questions (the error's sampling floor)."""
    rng = np.random.default_rng(seed)
    return float(
        np.mean([expected_calibration_error(p, rng.random(len(p)) < p) for _ in range(draws)])
    )


def label_sets(train: list[Example], labels: int, seed: int) -> dict[str, list[Example]]:
    """The user's labelled questions of one fold's training passages, three ways."""
    fifth = passage_folds(train, 5, 0)  # `structqa split TRAIN --folds 5`, its fold 0
    return {
        "a fifth of the articles": [ex for ex in train if fifth[passage_key(ex.context)] == 0],
        f"{labels} labels, spread": random.Random(seed).sample(train, min(labels, len(train))),
        "every training question": train,
    }


def fine_tuned(pattern: str, folds: int) -> dict[str, Any]:
    """Test-answer calibration of the finished fine-tuned runs ``pattern`` (with ``{k}``):
    per fold and pooled, uncalibrated and calibrated on each run's validation slice."""
    pooled: dict[str, list[np.ndarray]] = {"uncalibrated": [], "validation slice": []}
    correct_all, per_fold = [], []
    for k in range(folds):
        best = Path(pattern.format(k=k)) / "best"
        if not (best / TEST_DIR / "metrics.json").is_file():
            continue
        cfg = checkpoint_config(best)
        cal = load_calibration(best) or calibrate_after_training(cfg)
        test, _ = load_eval_examples(cfg)
        answers = saved_predictions(best / TEST_DIR, test, str(cfg.data.eval))
        scores, correct = answered(test, answers)
        p, raw = cal.probability(scores), raw_probability(scores, None)
        correct_all.append(correct)
        pooled["uncalibrated"].append(raw)
        pooled["validation slice"].append(p)
        per_fold.append(
            {
                "fold": k,
                "run": str(best.parent),
                "test_questions": len(test),
                "accuracy": float(correct.mean()),
                "ece_uncalibrated": expected_calibration_error(raw, correct),
                "ece": expected_calibration_error(p, correct),
                "method": cal.method,
                "validation_questions": cal.fit.get("questions"),
            }
        )
    if not per_fold:
        return {"folds": []}
    correct = np.concatenate(correct_all)
    return {
        "questions": len(correct),
        "accuracy": float(correct.mean()),
        "pooled_ece": {
            n: expected_calibration_error(np.concatenate(q), correct) for n, q in pooled.items()
        },
        "folds": per_fold,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--folds", type=Path, required=True)
    ap.add_argument("--answers", required=True, help="answer directory per fold, with {k}")
    ap.add_argument("--labels", type=int, default=300, help="size of the spread label set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", action="append", default=[], help="fine-tuned runs, with {k}")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    shipped = load_calibration(args.checkpoint)
    if shipped is None:
        raise SystemExit(f"{args.checkpoint}: no calibration.json to compare with")
    pairs = fold_files(args.folds)
    answers: dict[str, Prediction] = {}
    for k in range(len(pairs)):
        answers.update(predictions_from_files(args.answers.format(k=k)))
    curves: dict[str, list[np.ndarray]] = {}
    correct_all: list[np.ndarray] = []
    per_fold = []
    for k, (train_file, test_file) in enumerate(pairs):
        test = read_fold(test_file, answers, args.answers)
        train = read_fold(train_file, answers, args.answers)
        fold = {"fold": k, "test_questions": len(test)}
        scores, correct = answered(test, answers)
        correct_all.append(correct)
        fold["accuracy"] = float(correct.mean())
        results = {"as shipped": (shipped.probability(scores), None)}
        for name, labelled in label_sets(train, args.labels, args.seed + k).items():
            cal = calibrate(labelled, answers, False, source=f"{name} of {train_file}")
            results[name] = (cal.probability(scores), cal)
        for name, (q, cal) in results.items():
            curves.setdefault(name, []).append(q)
            fold[name] = {"ece": expected_calibration_error(q, correct), "floor": ece_floor(q)}
            if cal is not None:
                fold[name].update(method=cal.method, t_span=cal.t_span, fit=cal.fit)
        per_fold.append(fold)
        print(
            f"fold {k}: {len(test)} test questions, "
            + ", ".join(
                f"{n} {fold[n]['ece']:.3f} (floor {fold[n]['floor']:.3f})" for n in results
            ),
            file=sys.stderr,
        )
    correct = np.concatenate(correct_all)
    pooled = {n: np.concatenate(qs) for n, qs in curves.items()}
    summary = {
        "definition": f"ECE, {ECE_BINS} bins; correct: token F1 >= {CORRECT_F1}",
        "checkpoint": str(args.checkpoint),
        "questions": len(correct),
        "accuracy": float(correct.mean()),
        "pooled_ece": {n: expected_calibration_error(q, correct) for n, q in pooled.items()},
        "pooled_floor": {n: ece_floor(q) for n, q in pooled.items()},
        "folds": per_fold,
        "labels": args.labels,
        "seed": args.seed,
        "fine_tuned": {pattern: fine_tuned(pattern, len(pairs)) for pattern in args.runs},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "calibration.json", summary)
    plot_reliability(args.out / "reliability.png", pooled, correct)
    print(json.dumps({"ece": summary["pooled_ece"], "floor": summary["pooled_floor"]}, indent=2))
    for pattern, found in summary["fine_tuned"].items():
        print(pattern, json.dumps({k: v for k, v in found.items() if k != "folds"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
