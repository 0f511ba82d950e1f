"""Train (or continue) one run of an experiment and write its result JSON once it finishes.

An extractive run trains with :func:`structqa.training.loop.run`; a ``kind: drop`` run with
:func:`structqa.ncbert.loop.run`, and its result adds the full DROP scores of ``best/`` on the
dev file (``dev``) and on the test file (``test``, with per-type EM/F1). A run fine-tuned from a
pre-training arm gets that arm first (:mod:`structqa.experiments.arms`).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from structqa.calibration.fit import Calibrator
from structqa.calibration.report import CalibrateOnce, calibration_on_test
from structqa.config import ConfigError
from structqa.experiments.arms import ensure_pretrained
from structqa.experiments.results import drop_table_metrics, metric_value
from structqa.experiments.run_config import resolve_config
from structqa.experiments.spec import Experiment, Run, pretrain_arm
from structqa.experiments.stale import ARM_RECORD, arm_record, stale_partial
from structqa.experiments.store import (
    Launch,
    Paths,
    answers_source,
    device_and_bf16,
    eval_history,
    read_json,
    run_status,
    save_answers,
    tested_once,
    timed_training,
)
from structqa.experiments.weights import local_weights
from structqa.io import write_json
from structqa.ncbert import loop as drop_loop
from structqa.ncbert.config import DropConfig
from structqa.provenance import INIT_RECORD
from structqa.training import loop
from structqa.training.heldout import TEST_DIR

log = logging.getLogger(__name__)


def execute_run(
    experiment: Experiment,
    run: Run,
    paths: Paths,
    launch: Launch,
) -> bool:
    """Train (or continue) one run; write its result JSON if it finished. True if it did."""
    cfg, split = resolve_config(experiment, run, paths, launch.data_dir)
    arm = pretrain_arm(str(getattr(cfg.model, "encoder", "")))
    out = Path(cfg.train.output_dir)
    resume = run_status(paths, run) == "partial"
    if resume and (changed := stale_partial(experiment, paths, run)):  # before any pre-training
        raise ConfigError(
            f"{run.name}: its unfinished output {out} was started with other values than the "
            f"YAML now gives ({', '.join(changed)}). Restore them to continue it, or delete "
            f"{out} to train this run afresh with the YAML's values"
        )
    if arm is not None:
        final = ensure_pretrained(experiment, arm, paths, launch)
        if final is None:
            return False
        cfg.model.encoder = str(final)
    started_from = arm_record(experiment, arm) if arm is not None else None
    fresh = not (out / "last" / "resume.pt").exists()  # the trainer starts it afresh
    if started_from is not None and (fresh or not (out / ARM_RECORD).is_file()):
        write_json(out / ARM_RECORD, started_from)
    before = read_json(out / "last" / "train_state.json")
    # an extractive run is calibrated on its validation questions before its test, as
    # `structqa train` does (the test then uses that threshold and map)
    calibrate = None if isinstance(cfg, DropConfig) else CalibrateOnce()

    def train() -> Any:
        if calibrate is None:
            return drop_loop.run(cfg, resume=resume, progress=launch.progress)
        return loop.run(cfg, resume=resume, progress=launch.progress, calibrate=calibrate)

    timing = timed_training(out, train)
    state = read_json(out / "last" / "train_state.json")
    if not state.get("finished"):
        if resume and state.get("global_step") == before.get("global_step"):
            # A signal always lets the current step finish, so a resumed run that returns
            # without a step and unfinished would do the same again on every call.
            raise RuntimeError(
                f"{run.name}: resuming made no progress (step {state.get('global_step')}, not "
                f"finished); the trainer cannot finish this checkpoint. Delete {out} to rerun it."
            )
        return False
    metrics_file = out / "best" / "metrics.json"
    if not metrics_file.exists():
        raise FileNotFoundError(f"{run.name}: training finished but {metrics_file} is missing")
    metrics = json.loads(metrics_file.read_text())
    scores: dict[str, Any] = {}
    config = cfg.to_dict()
    data = config["data"]
    if isinstance(cfg, DropConfig):
        test_file = out / "best" / "test" / "metrics.json"
        if not test_file.exists():
            raise FileNotFoundError(f"{run.name}: training finished but {test_file} is missing")
        best_state = read_json(out / "best" / "train_state.json")
        scores = {
            "dev": metrics,
            "test": json.loads(test_file.read_text()),
            "best_step": best_state.get("global_step"),  # (selection may happen mid-epoch)
        }
        metrics = drop_table_metrics(scores["test"], scores["dev"])
    elif tested_once(data):  # best/'s metrics are the validation slice's; the test is best/eval
        test_file = out / "best" / TEST_DIR / "metrics.json"
        if not test_file.exists():
            raise FileNotFoundError(f"{run.name}: training finished but {test_file} is missing")
        scores = {"dev": metrics}
        metrics = json.loads(test_file.read_text())
        if calibrate is not None and (cal := calibrate.done(cfg)) is not None:
            scores["calibration"] = fitted(cal)
            metrics.update(calibration_on_test(cfg, cal))
    source = answers_source(experiment.kind, out, data)
    if not save_answers(source, paths.answers(run)):
        raise FileNotFoundError(f"{run.name}: training finished but {source} is missing")
    if split is not None and not isinstance(cfg, DropConfig):
        scores["calibration"] = calibrate_on_validation(out / "best", cfg)
    device, bf16 = device_and_bf16(cfg)
    if isinstance(state.get("bf16"), bool):  # what it trained in, not what this machine would
        bf16 = state["bf16"]
    result = {
        "experiment": experiment.name,
        "run": run.name,
        "grid": run.values,
        "extra_seed": run.extra,
        "seed": cfg.train.seed,
        "metrics": metrics,
        **scores,
        "best_epoch": read_json(out / "best" / "train_state.json").get("best_epoch"),
        "epochs": state.get("epoch"),
        "steps": state.get("global_step"),
        "eval_history": eval_history(out),
        "wall_time_s": round(timing["wall_time_s"], 3),
        "sessions": timing["sessions"],
        "device": device,
        "bf16": bf16,
        **launch.provenance,
        "command": launch.command,
        "config_file": experiment.source,
        "validation": split,
        "config": config,
        **({"pretrain_arm": read_json(out / ARM_RECORD)} if started_from else {}),
        **({"init_from": start} if (start := read_json(out / INIT_RECORD)) else {}),
        **({"local_weights": weights} if (weights := local_weights(cfg)) else {}),
        # each start that trained it (step, commit, CPU, device, precision): a resumed run's
        # provenance above is its last start's
        "stints": state.get("stints", []),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(paths.result(run), result)
    log.info(
        "%s: F1 %.2f EM %.2f (best epoch %s)",
        run.name,
        metric_value(result["metrics"], "f1"),
        metric_value(result["metrics"], "em"),
        result["best_epoch"],
    )
    return True


def calibrate_on_validation(best: Path, cfg: Any) -> dict[str, Any]:
    """Fit the null threshold and answer probabilities of ``best`` on the validation slice it
    was scored on (calibration.json, used by evaluate, predict and serve); what was fitted."""
    from structqa.calibration.report import calibrate_evaluated
    from structqa.training.data import load_eval_examples

    examples, v2 = load_eval_examples(cfg)
    cal = calibrate_evaluated(
        best, examples, v2, source=cfg.data.eval, verifier=cfg.decode.verifier
    )
    return fitted(cal)


def fitted(cal: Calibrator) -> dict[str, Any]:
    """What a result records of a calibration: everything but the isotonic map's knots."""
    return {k: v for k, v in cal.to_dict().items() if k != "isotonic"}
