"""How much a SQuAD 2.0 reader's held-out F1 depends on the unanswerable share its threshold
was fitted for: the threshold fitted on validation questions weighted to each share of a grid
(``structqa calibrate --unanswerable-share``), applied to held-out answers already scored.

This reports, it chooses nothing: the general reader's share is counted on SQuAD 2.0's
training split (:func:`structqa.reader.data.squad2_unanswerable_share`), never on held-out.
The verifier is refitted at each share (its fit does not depend on the share), and each fit
must equal the checkpoint's saved one, so the held-out null odds that ``structqa evaluate``
saved at the checkpoint's calibration (torch, as the build scores) are the ones each
threshold applies to; anything else is refused.

    python scripts/share_sensitivity.py runs/reader/run/best \\
        --on runs/reader/run/validation-human.v2.json \\
        --heldout ../shared/data/splits/squad2-heldout.v2.0.json \\
        --scored runs/reader/heldout/reader/squad2-torch --out share.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from structqa.calibration.report import calibrate
from structqa.data.readers import read_extractive
from structqa.io import write_json
from structqa.metrics.squad import squad_v2
from structqa.prediction.predictor import Predictor

SHARES = (None, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.514, 0.55, 0.6)


def heldout_f1(heldout: str, scored: Path, threshold: float) -> dict[str, float]:
    """F1, HasAns F1 and NoAns F1 of the saved held-out answers at ``threshold``."""
    gold = {ex.id: list(ex.gold_texts) for ex in read_extractive(heldout).examples}
    nbest = json.loads((scored / "nbest_predictions.json").read_text())
    odds = json.loads((scored / "null_odds.json").read_text())
    answers = {
        q: "" if odds[q] > threshold or not nbest.get(q) else nbest[q][0]["text"] for q in gold
    }
    m = squad_v2(gold, answers)
    return {k: float(m[k]) for k in ("f1", "HasAns_f1", "NoAns_f1")}


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=float)


def check_scored(checkpoint: Path, scored: Path, on: str) -> None:
    """Refuse held-out answers not scored at ``checkpoint``'s calibration (its threshold,
    its verifier's odds) or a calibration not fitted on ``on``."""
    saved = json.loads((checkpoint / "calibration.json").read_text())
    metrics = json.loads((scored / "metrics.json").read_text())
    if not str(saved["fit"].get("source", "")).endswith(Path(on).name):
        raise SystemExit(f"{checkpoint} was calibrated on {saved['fit'].get('source')}, not {on}")
    same = metrics.get("null_threshold") == saved["null_threshold"]
    if not same or bool(metrics.get("null_odds_verified")) != bool(saved.get("verifier")):
        raise SystemExit(
            f"{scored} was not scored at {checkpoint}'s calibration: score it again with "
            f"`structqa evaluate {checkpoint} --eval HELDOUT --runtime torch --out {scored}`"
        )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("checkpoint", help="a calibrated SQuAD 2.0 checkpoint (its verifier kind)")
    ap.add_argument("--on", required=True, help="the validation questions it was fitted on")
    ap.add_argument("--heldout", required=True, help="the SQuAD 2.0 held-out file")
    ap.add_argument("--scored", required=True, help="`structqa evaluate --out` of held-out")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    start = time.time()
    check_scored(Path(args.checkpoint), Path(args.scored), args.on)
    predictor = Predictor.from_checkpoint(args.checkpoint, runtime="torch")
    examples = list(read_extractive(args.on).examples)
    raw = dict(predictor.predict_examples(examples, verify=False))
    saved = json.loads((Path(args.checkpoint) / "calibration.json").read_text())
    verifier = saved.get("verifier")
    kind: bool | str = False if not verifier else "similarity" if verifier["encoder"] else "lexical"
    # calibrate fits the threshold on the verifier's out-of-fold odds; its verifier fit is
    # the same at every share, so each share's threshold applies to the same held-out odds
    rows = []
    for share in SHARES:
        fitted = calibrate(examples, raw, True, verifier=kind, unanswerable_share=share)
        if _json(fitted.to_dict()["verifier"]) != _json(verifier):
            raise SystemExit(
                f"the verifier refitted on {args.on} differs from {args.checkpoint}'s: its "
                "held-out odds would not be the ones this threshold is fitted for"
            )
        row = {"share": share, "threshold": fitted.null_threshold}
        row.update(heldout_f1(args.heldout, Path(args.scored), float(fitted.null_threshold)))
        rows.append(row)
        print(json.dumps(row), flush=True)
    unanswerable = [ex.is_impossible for ex in examples]
    write_json(
        Path(args.out),
        {
            "checkpoint": args.checkpoint,
            "on": args.on,
            "questions": len(examples),
            "own_share": sum(unanswerable) / len(examples),
            "rows": rows,
            "seconds": round(time.time() - start, 1),
        },
    )


if __name__ == "__main__":
    main()
