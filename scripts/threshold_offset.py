"""How far a reader's no-answer threshold, fitted on passages of the articles it trained on,
sits from the one that is best on articles it never saw: measured on a *fold reader*, a run of
the recipe trained without some of the training split's articles (``data.exclude``) and
without the build's validation slice, so that both kinds of question are new to it.

1. the fold reader is calibrated as the calibrate stage calibrates a build's reader
   (:func:`structqa.reader.calibrate.calibrate_reader`): on the human-written questions of
   ``--seen`` (the slice, less the fold's passages), weighted to the unanswerable share of
   SQuAD 2.0's training split; its threshold applies to the verifier's odds;
2. it answers ``--unseen`` (every question of the fold's articles) at that calibration, and
   the threshold that is F1-best there, at the same share, is found the same way;
3. the offset is the second threshold less the first.

Training data only: the fold's articles are SQuAD 2.0 *training* articles. Nothing here
reads a held-out file.

    python scripts/threshold_offset.py /work/fold-a/run --seen seen-slice.v2.json \\
        --unseen fold.v2.json --out /work/fold-a/offset
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from structqa.calibration.report import load_calibration, midway, predictions_from_files
from structqa.data.readers import read_extractive
from structqa.decoding import Prediction
from structqa.evaluation import best_null_threshold, share_weights
from structqa.io import write_json
from structqa.metrics.squad import raw_scores_v2
from structqa.models.build import checkpoint_config
from structqa.paths import resolve_data_dir
from structqa.prediction.scoring import evaluate_checkpoint
from structqa.provenance import git_info, machine_info
from structqa.reader.calibrate import calibrate_reader, odds_kind
from structqa.reader.data import squad2_unanswerable_share


def scored(
    folder: Path, examples_file: Path, dedupe_ids: bool = False
) -> tuple[dict[str, list[str]], dict[str, Prediction]]:
    """Gold answers (repeated ids renamed as evaluate renamed them) and the saved answers
    (best span, the odds it was scored at)."""
    examples = read_extractive(examples_file, dedupe_ids=dedupe_ids).examples
    gold = {ex.id: list(ex.gold_texts) for ex in examples}
    saved = predictions_from_files(folder)
    return gold, {q: saved[q] for q in gold}


def weighted_f1(
    gold: dict[str, list[str]], predictions: dict[str, Prediction], share: float, threshold: float
) -> float:
    """F1 (0-100) at ``threshold`` on these questions weighted to ``share`` unanswerable."""
    ids = list(gold)
    answers = {q: "" if predictions[q].null_odds > threshold else predictions[q].text for q in ids}
    _, f1 = raw_scores_v2(gold, answers)
    weights = share_weights(np.array([not gold[q] for q in ids]), share)
    return float(100 * np.average([f1[q] for q in ids], weights=weights))


def best_threshold_interval(
    gold: dict[str, list[str]],
    predictions: dict[str, Prediction],
    share: float,
    resamples: int,
    seed: int = 0,
) -> list[float]:
    """The 2.5th and 97.5th percentiles of the F1-best threshold over questions drawn with
    replacement (the same search, :func:`best_null_threshold`, on each draw)."""
    ids = list(gold)
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(resamples):
        drawn = [ids[i] for i in rng.integers(0, len(ids), len(ids))]
        keys = [f"{q}#{n}" for n, q in enumerate(drawn)]
        found.append(
            best_null_threshold(
                {k: gold[q] for k, q in zip(keys, drawn, strict=True)},
                {k: predictions[q] for k, q in zip(keys, drawn, strict=True)},
                share,
            )
        )
    return [float(x) for x in np.percentile(found, [2.5, 97.5])]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the fold reader's run folder (its best/)")
    parser.add_argument("--seen", type=Path, required=True, help="the slice less the fold")
    parser.add_argument("--unseen", type=Path, required=True, help="the fold's questions")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="draws of the unseen questions (0: none)"
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    share = squad2_unanswerable_share(resolve_data_dir(args.data, "--data"))
    args.out.mkdir(parents=True, exist_ok=True)
    copy = args.out / "best"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.run / "best", copy)
    seen = args.out / "seen" / args.seen.name  # its human-written questions are written beside
    seen.parent.mkdir(exist_ok=True)
    shutil.copy(args.seen, seen)
    cfg = checkpoint_config(copy)  # the recipe's verifier and id renaming, as the stage uses
    record = calibrate_reader(copy, seen, share, cfg.decode.verifier)
    if "calibration" not in record:
        parser.error(f"{args.seen}: {record['skipped']}")
    seen_threshold = float(record["calibration"]["null_threshold"])
    folder = args.out / "unseen"
    evaluate_checkpoint(copy, str(args.unseen), folder, "torch")
    gold, predictions = scored(folder, args.unseen, cfg.data.dedupe_ids)
    best = best_null_threshold(gold, predictions, share)
    unseen_threshold = midway(best, np.array([p.null_odds for p in predictions.values()]))
    summary = {
        "run": str(args.run.resolve()),
        "seen": str(args.seen.resolve()),
        "unseen": str(args.unseen.resolve()),
        "unanswerable_share": share,
        "odds": odds_kind(load_calibration(copy).verifier),
        "seen_questions": record["questions"],
        "unseen_questions": len(gold),
        "unseen_unanswerable": sum(not g for g in gold.values()),
        "seen_threshold": seen_threshold,
        "unseen_threshold": unseen_threshold,
        "offset": unseen_threshold - seen_threshold,
        # over draws of the unseen questions; the seen threshold's own noise is not in it
        "offset_interval_95": [
            t - seen_threshold
            for t in best_threshold_interval(gold, predictions, share, args.bootstrap)
        ]
        if args.bootstrap
        else None,
        "unseen_f1_at_seen_threshold": weighted_f1(gold, predictions, share, seen_threshold),
        "unseen_f1_at_unseen_threshold": weighted_f1(gold, predictions, share, unseen_threshold),
        "commit": git_info(),
        "machine": machine_info(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_json(args.out / "offset.json", summary)
    print(
        f"threshold {seen_threshold:.3f} on the seen slice, {unseen_threshold:.3f} best on the "
        f"unseen articles: offset {summary['offset']:+.3f}, 95 % over draws of those questions "
        f"{summary['offset_interval_95']} (weighted F1 there "
        f"{summary['unseen_f1_at_seen_threshold']:.2f} -> "
        f"{summary['unseen_f1_at_unseen_threshold']:.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
