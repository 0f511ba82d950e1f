"""The answerability verifier on SQuAD 2.0 checkpoints, against their own null odds:
held-out scores at the threshold fitted on the validation slice, for four ways of scoring
"no answer" (:mod:`structqa.calibration.verifier`):

- ``null odds``: the model's own (what ``scripts/squad2_heldout.py`` reports);
- ``lexical verifier``: ``structqa calibrate --verifier lexical``, the model's scores and
  lexical features, fitted on the validation slice;
- ``similarity verifier``: ``structqa calibrate --verifier similarity``, those and the
  question's sentence similarity to the passage by the default encoder as shipped;
- ``auto (the default)``: what ``decode.verifier``'s default fits, the similarity verifier
  where it ranks the validation questions better out of fold than the null odds, else none.

Each run needs ``best/`` (its answers to the validation slice, saved by the runner) and
``best/heldout/`` (its held-out answers, written by ``scripts/squad2_heldout.py``). The
held-out file is read only to score. Writes OUT/verifier.json, OUT/verifier.md and, for the
similarity verifier, each run's held-out reliability diagram in OUT/reliability/RUN/.

    python scripts/squad2_verifier.py RUNS_DIR/squad2-transfer --out docs/results/squad2/transfer
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from structqa.calibration.report import (
    calibrate,
    calibration_metrics,
    predictions_from_files,
    with_null_answers,
)
from structqa.data.readers import read_extractive
from structqa.data.records import Example
from structqa.evaluation import score_predictions
from structqa.io import write_text
from structqa.paths import resolve_data_dir

log = logging.getLogger("squad2_verifier")
HELDOUT = "splits/squad2-heldout.v2.0.json"
KEYS = ("f1", "HasAns_f1", "NoAns_f1", "NoAns_auc")


ARMS = {
    "null odds": False,
    "lexical verifier": "lexical",
    "similarity verifier": "similarity",
    "auto (the default)": "auto",
}


def score_run(
    best: Path, val: list[Example], heldout: list[Example], diagrams: Path
) -> dict[str, Any]:
    """Each arm's held-out scores at the threshold it fitted on the validation slice (and the
    similarity verifier's held-out reliability diagram in ``diagrams``)."""
    pv = with_null_answers(val, predictions_from_files(best))
    ph = with_null_answers(heldout, predictions_from_files(best / "heldout"))
    out: dict[str, Any] = {}
    for arm, kind in ARMS.items():
        cal = calibrate(val, pv, True, verifier=kind)
        verified = cal.verify(heldout, ph)
        got = score_predictions(heldout, verified, True, null_threshold=cal.null_threshold)
        out[arm] = {k: got.metrics[k] for k in KEYS}
        where = diagrams if kind == "similarity" else None
        got_ece = calibration_metrics(heldout, verified, True, cal.null_threshold, cal, where)
        out[arm]["ece"] = got_ece["ece"]
        if cal.verifier is not None:
            out[arm]["val_auc_out_of_fold"] = cal.verifier.fit["auc_out_of_fold"]
    return out


def table(runs: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    lines = [
        "| run | arm | F1 | HasAns F1 | NoAns F1 | no-answer AUC | ECE | val AUC (out of fold) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, arms_of in runs.items():
        for arm in ARMS:
            m = arms_of[arm]
            val = m.get("val_auc_out_of_fold")
            lines.append(
                f"| {run} | {arm} | {m['f1']:.2f} | {m['HasAns_f1']:.2f} | {m['NoAns_f1']:.2f} "
                f"| {m['NoAns_auc']:.1f} | {m['ece']:.3f} | {'' if val is None else f'{val:.1f}'} |"
            )

    def group(run: str) -> str:  # the run's name less its seed
        return re.sub(r",?seed=\d+", "", run).removeprefix("variant=")

    for head in sorted({group(r) for r in runs}):
        mine = [v for r, v in runs.items() if group(r) == head]
        for arm in ARMS:
            mean = {k: statistics.fmean(m[arm][k] for m in mine) for k in (*KEYS, "ece")}
            sd = {  # (sample standard deviation over seeds; none for one seed)
                k: f" ± {statistics.stdev(m[arm][k] for m in mine):.{d}f}" if len(mine) > 1 else ""
                for k, d in (("f1", 2), ("NoAns_auc", 1))
            }
            lines.append(
                f"| **{head}, mean of {len(mine)}** | {arm} | {mean['f1']:.2f}{sd['f1']} "
                f"| {mean['HasAns_f1']:.2f} | {mean['NoAns_f1']:.2f} "
                f"| {mean['NoAns_auc']:.1f}{sd['NoAns_auc']} | {mean['ece']:.3f} | |"
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
    runs = {}
    for best in sorted(args.runs.glob("variant=*/best")):
        if not (best / "heldout" / "nbest_predictions.json").is_file():
            log.warning("%s: no held-out answers (run scripts/squad2_heldout.py first)", best)
            continue
        runs[best.parent.name] = score_run(
            best, val, heldout, args.out / "reliability" / best.parent.name
        )
        log.info("%s: %s", best.parent.name, json.dumps(runs[best.parent.name]))
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "verifier.json", json.dumps(runs, indent=1) + "\n")
    write_text(args.out / "verifier.md", table(runs))
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
