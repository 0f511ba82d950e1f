"""The general reader as a soup of K runs (``structqa reader build --members K``).

K runs of the recipe share their start (``train.init_seed`` = the build's seed) and differ in
batch order and dropout (``train.seed`` S, S+1, ...). Each trains in ``members/mI`` and is
recorded as it finishes (``stages/member-I.json``), so a stopped build goes on with the run it
was in. Their greedy soup on the validation slice (:func:`structqa.training.soup.greedy_soup`:
never below the best member there) becomes ``run/best``, which is then calibrated on the same
slice as a single run's ``best/`` is."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from structqa.config import Config
from structqa.data.readers import read_extractive

log = logging.getLogger(__name__)

#: where the soup and its slice go: where a single build's run is (``run/best``)
RUN = "run"


def member_dir(i: int) -> str:
    return f"members/m{i}"


def slice_score(validation_file: Path, work: Path) -> Callable[[Path], float]:
    """A checkpoint's F1 on the validation slice as training chose ``best/`` by it (SQuAD 2.0:
    at the threshold that is best on the slice itself, as the trainer's validation reports)."""
    from structqa.prediction.scoring import evaluate_checkpoint

    def score(checkpoint: Path) -> float:
        out = work / "slice-eval"
        metrics = evaluate_checkpoint(checkpoint, str(validation_file), out, "torch")
        shutil.rmtree(out, ignore_errors=True)
        return float(metrics.get("best_f1", metrics["f1"]))

    return score


def soup_members(
    out: Path, member_cfgs: list[Config], member_records: list[dict[str, Any]]
) -> dict[str, Any]:
    """The greedy soup of the trained members as ``out/run/best``, calibrated on their shared
    validation slice; the record of the train stage."""
    from structqa.prediction.calibrate import calibrate_checkpoint
    from structqa.training.soup import greedy_soup

    t0 = time.perf_counter()
    run = out / RUN
    run.mkdir(parents=True, exist_ok=True)
    best = run / "best"
    if best.exists():  # a soup written before the stage could record it: make it again
        shutil.rmtree(best)
    validation = run / "validation.v2.json"
    shutil.copy2(member_records[0]["validation_file"], validation)
    score = slice_score(validation, run)
    scores = [float(r["validation"].get("best_f1", r["validation"]["f1"])) for r in member_records]
    path = greedy_soup([r["checkpoint"] for r in member_records], best, score, scores)
    # a slice without unanswerable questions (a tiny build's) fits no threshold: the soup
    # then answers every question, said in its calibration (answers_every_question)
    answer_all = not any(ex.is_impossible for ex in read_extractive(validation).examples)
    if answer_all:
        log.warning("reader build: the validation slice has no unanswerable question")
    cal = calibrate_checkpoint(
        best,
        on=str(validation),
        verifier=member_cfgs[0].decode.verifier,
        answer_all=answer_all,
    )
    return {
        "validation_file": str(validation),
        "checkpoint": str(best),
        "validation": {"f1": path["score"]},
        "members": member_records,
        "soup": path,
        "calibration": {
            "method": cal.method,
            "null_threshold": cal.null_threshold,
            "verifier": None if cal.verifier is None else cal.verifier.names,
            "fit": cal.fit,
        },
        "soup_seconds": round(time.perf_counter() - t0, 1),
    }


__all__ = ["RUN", "member_dir", "slice_score", "soup_members"]
