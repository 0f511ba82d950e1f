"""The answerability verifier on the SQuAD 2.0 grid's checkpoints, against their own null odds:
held-out scores at the threshold fitted on the validation slice, for three ways of scoring
"no answer":

- ``null odds``: the model's own (what ``scripts/squad2_heldout.py`` reports);
- ``verifier``: ``structqa calibrate --verifier`` (the model's scores and lexical features,
  :mod:`structqa.calibration.verifier`), fitted on the validation slice;
- ``verifier + sentence similarity``: the same with three more features from the default
  encoder as shipped (all-MiniLM-L6-v2 is a sentence-embedding model): the question's
  largest cosine similarity to a passage sentence, its similarity to the best span's
  sentence, and their difference. Not in the library: it needs a second encoder pass over
  every passage at serving time, and this script measures whether that would pay.

Each run needs ``best/`` (its answers to the validation slice, saved by the runner) and
``best/heldout/`` (its held-out answers, written by ``scripts/squad2_heldout.py``). The
held-out file is read only to score. Writes OUT/verifier.json and OUT/verifier.md.

    python scripts/squad2_verifier.py RUNS_DIR/squad2-grid --out docs/results/squad2
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from structqa.calibration.report import calibrate, midway, predictions_from_files, with_null_answers
from structqa.calibration.verifier import (
    feature_matrix,
    fit_verifier,
    sentence_spans,
    with_null_odds,
)
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.decoding import Prediction
from structqa.evaluation import best_null_threshold, score_predictions
from structqa.io import write_text
from structqa.paths import default_encoder_path, resolve_data_dir

log = logging.getLogger("squad2_verifier")
HELDOUT = "splits/squad2-heldout.v2.0.json"
KEYS = ("f1", "HasAns_f1", "NoAns_f1", "NoAns_auc")


class SentenceEncoder:
    """Mean-pooled, normalized embeddings of the default encoder as shipped."""

    def __init__(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = default_encoder_path()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        for i in range(0, len(todo), 64):
            chunk = todo[i : i + 64]
            batch = self.tokenizer(
                chunk, padding=True, truncation=True, max_length=128, return_tensors="pt"
            )
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"][..., None]
            pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
            self.cache.update(zip(chunk, pooled.numpy(), strict=True))
        return np.stack([self.cache[t] for t in texts])


def similarity_features(
    examples: Sequence[Example], predictions: Mapping[str, Prediction], encode: SentenceEncoder
) -> np.ndarray:
    """(Q, 3): largest question-sentence similarity, that of the best span's sentence, gap."""
    rows = []
    for ex in examples:
        spans = sentence_spans(ex.context)
        sims = encode([ex.context[a:b] for a, b in spans]) @ encode([ex.question])[0]
        p = predictions[ex.id]
        at = p.start_char if p.text else -1
        k = next((i for i, (a, b) in enumerate(spans) if a <= at < b), None)
        own = float(sims[k]) if k is not None else float(sims.min())
        rows.append([float(sims.max()), own, float(sims.max()) - own])
    return np.array(rows)


def fitted_scores(
    x_val: np.ndarray, val: Sequence[Example], pv: Mapping[str, Prediction]
) -> tuple[Any, float]:
    """A verifier on these features and its threshold (F1-best on its out-of-fold odds)."""
    y = np.array([ex.is_impossible for ex in val])
    verifier, oof = fit_verifier(x_val, y)
    gold = {ex.id: list(ex.gold_texts) for ex in val}
    oof_preds = with_null_odds(pv, [ex.id for ex in val], oof)
    threshold = midway(best_null_threshold(gold, oof_preds), oof)
    return verifier, threshold


def score_run(
    best: Path, val: list[Example], heldout: list[Example], encode: SentenceEncoder
) -> dict[str, Any]:
    pv = with_null_answers(val, predictions_from_files(best))
    ph = with_null_answers(heldout, predictions_from_files(best / "heldout"))
    out: dict[str, Any] = {}

    plain = calibrate(val, pv, True)
    got = score_predictions(heldout, ph, True, null_threshold=plain.null_threshold).metrics
    out["null odds"] = {k: got[k] for k in KEYS}

    lexical = calibrate(val, pv, True, verifier=True)
    verified = lexical.verify(heldout, ph)
    got = score_predictions(heldout, verified, True, null_threshold=lexical.null_threshold)
    out["verifier"] = {k: got.metrics[k] for k in KEYS}
    out["verifier"]["val_auc_out_of_fold"] = lexical.verifier.fit["auc_out_of_fold"]

    x_val = np.hstack([feature_matrix(val, pv), similarity_features(val, pv, encode)])
    x_ho = np.hstack([feature_matrix(heldout, ph), similarity_features(heldout, ph, encode)])
    verifier, threshold = fitted_scores(x_val, val, pv)
    odds = verifier.score(x_ho)
    both = with_null_odds(ph, [ex.id for ex in heldout], odds)
    got = score_predictions(heldout, both, True, null_threshold=threshold).metrics
    out["verifier + sentence similarity"] = {k: got[k] for k in KEYS}
    out["verifier + sentence similarity"]["val_auc_out_of_fold"] = verifier.fit["auc_out_of_fold"]
    return out


def table(runs: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    arms = ("null odds", "verifier", "verifier + sentence similarity")
    lines = [
        "| run | arm | F1 | HasAns F1 | NoAns F1 | no-answer AUC | val AUC (out of fold) |",
        "|---|---|---|---|---|---|---|",
    ]
    for run, arms_of in runs.items():
        for arm in arms:
            m = arms_of[arm]
            val = m.get("val_auc_out_of_fold")
            lines.append(
                f"| {run} | {arm} | {m['f1']:.2f} | {m['HasAns_f1']:.2f} | {m['NoAns_f1']:.2f} "
                f"| {m['NoAns_auc']:.1f} | {'' if val is None else f'{val:.1f}'} |"
            )
    heads = sorted({re.sub(r"^variant=(\w+),.*", r"\1", r) for r in runs})
    for head in heads:
        mine = [v for r, v in runs.items() if r.startswith(f"variant={head},")]
        for arm in arms:
            means = [statistics.fmean(m[arm][k] for m in mine) for k in KEYS]
            lines.append(
                f"| **{head}, mean of {len(mine)}** | {arm} | {means[0]:.2f} | {means[1]:.2f} "
                f"| {means[2]:.2f} | {means[3]:.1f} | |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", type=Path, help="the grid's runs directory (runs/squad2-grid)")
    p.add_argument("--out", type=Path, default=Path("docs/results/squad2"))
    p.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    split = next(args.runs.glob("_validation/*/val.json"))
    val = list(read_extractive(split).examples)
    heldout = list(read_extractive(resolve_data_dir(args.data) / HELDOUT).examples)
    encode = SentenceEncoder()
    runs = {}
    for best in sorted(args.runs.glob("variant=*/best")):
        if not (best / "heldout" / "nbest_predictions.json").is_file():
            log.warning("%s: no held-out answers (run scripts/squad2_heldout.py first)", best)
            continue
        runs[best.parent.name] = score_run(best, val, heldout, encode)
        log.info("%s: %s", best.parent.name, json.dumps(runs[best.parent.name]))
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "verifier.json", json.dumps(runs, indent=1) + "\n")
    write_text(args.out / "verifier.md", table(runs))
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
