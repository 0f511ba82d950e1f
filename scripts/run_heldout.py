"""One trained run of a reader build (``members/mI/best``), calibrated as the build's calibrate
stage calibrates the reader, scored on SQuAD 2.0 held-out: to compare two recipes' runs as soon
as each has trained, without waiting for the soup. The run's folder is not touched: its best/
is copied into ``--out`` and calibrated there.

The slice it is calibrated on is the one the run was chosen on (the run's
``validation.v2.json``): its human-written questions, weighted to SQuAD 2.0's unanswerable share
(:func:`structqa.reader.calibrate.calibrate_reader`). Held-out is scored once, after that.

    python scripts/run_heldout.py runs/reader/members/m0 --out runs/m0-heldout
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from structqa.io import write_json
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.prediction.scoring import evaluate_checkpoint
from structqa.provenance import git_info, machine_info
from structqa.reader.build import VALIDATION_FILE
from structqa.reader.calibrate import calibrate_reader
from structqa.reader.data import HELDOUT_SQUAD2, squad2_unanswerable_share
from structqa.runtime import cpu_kind

KEPT = ("exact", "f1", "HasAns_f1", "NoAns_f1", "NoAns_auc", "best_f1", "best_f1_thresh", "ece")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a trained run of a build (members/mI or run)")
    parser.add_argument("--out", type=Path, required=True, help="where to copy and score it")
    parser.add_argument("--data", help="data directory (else $STRUCTQA_DATA or ../shared/data)")
    args = parser.parse_args(argv)
    best, slice_file = args.run / "best", args.run / VALIDATION_FILE
    for path in (best / "model.safetensors", slice_file):
        if not path.is_file():
            parser.error(f"{path} is missing: give a run whose training has finished")
    t0 = time.perf_counter()
    data = resolve_data_dir(args.data, "--data")
    args.out.mkdir(parents=True, exist_ok=True)
    copy = args.out / "best"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(best, copy)
    shutil.copy(slice_file, args.out / VALIDATION_FILE)
    share = squad2_unanswerable_share(data)
    record = calibrate_reader(copy, args.out / VALIDATION_FILE, share, "auto")
    heldout = resolve_data_file(HELDOUT_SQUAD2, data)
    metrics = evaluate_checkpoint(copy, str(heldout), args.out / "squad2-torch", "torch")
    summary = {
        "run": str(args.run.resolve()),
        "calibration": record["calibration"]["method"],
        "null_threshold": record["calibration"]["null_threshold"],
        "slice_questions": record["questions"],
        "squad2_heldout": {k: metrics.get(k) for k in KEPT},
        "commit": git_info(),
        "machine": machine_info(),
        "cpu_kind": cpu_kind(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_json(args.out / "summary.json", summary)
    shown = {k: round(v, 2) for k, v in summary["squad2_heldout"].items() if v is not None}
    print(f"threshold {summary['null_threshold']:.2f}; SQuAD 2.0 held-out {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
