"""Pre-training arms: ``structqa pretrain`` runs that an experiment's runs fine-tune from.

A run whose ``model.encoder`` is ``pretrain:NAME`` needs arm NAME's ``final/`` checkpoint; the
arm trains into ``<runs-dir>/pretrain/NAME/`` (resumably, once per arm, under its claim so that
two workers never train one arm) and leaves ``<results>/pretrain/NAME.json``: held-out MLM loss
and accuracy, config, provenance and wall time.
"""

from __future__ import annotations

import logging
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from structqa.config import ConfigError, config_changes
from structqa.experiments.claims import RunBusy, held_by, try_claim
from structqa.experiments.spec import Experiment
from structqa.experiments.store import (
    TIME_FILE,
    Launch,
    Paths,
    arm_finished,
    device_and_bf16,
    read_json,
    timed_training,
)
from structqa.io import write_json
from structqa.pretrain import loop as pretrain_loop
from structqa.training.checkpoint import RESUME_MAY_CHANGE, resumable

log = logging.getLogger(__name__)

# the checkpoint directories a fresh start will not overwrite, each written as a ``.tmp`` twin
CHECKPOINT_DIRS = ("last", "best", "final")


def ensure_pretrained(
    experiment: Experiment,
    arm: str,
    paths: Paths,
    launch: Launch,
) -> Path | None:
    """Pre-train (or continue) one arm; its ``final/`` directory once finished, else None.

    Runs under the arm's claim, so that two workers never train one arm: raises
    :class:`RunBusy` naming the holder when another worker has it. An arm whose recorded
    config differs from the experiment's (the YAML changed after it was
    trained) is an error: its checkpoint would silently stand for another recipe."""
    if experiment.pretrain is None or arm not in experiment.pretrain.arms:
        raise ConfigError(f"{experiment.name}: no pre-training arm {arm!r}")
    out = paths.pretrain_output(arm)
    final = out / "final"
    cfg = experiment.pretrain.config_for(arm)
    cfg.train.output_dir = str(out)
    if launch.data_dir:
        cfg.data.dir = launch.data_dir
    recorded = read_json(out / "config.json")  # what the pre-training loop ran with
    changed = [k for k, _, _ in config_changes(recorded or {}, cfg.to_dict(), RESUME_MAY_CHANGE)]
    if changed:
        raise ConfigError(
            f"pre-training arm {arm!r}: {out} was trained with other values of "
            f"{', '.join(changed)} than {experiment.source or 'the experiment'} now gives; "
            f"delete {out} (and {paths.pretrain_result(arm)}) to retrain it, with the runs "
            f"fine-tuned from it (their results and folders in {paths.runs}), or give the new "
            "recipe a new arm name"
        )

    def finished() -> bool:
        return paths.pretrain_result(arm).exists() and arm_finished(final)

    if finished():
        return final  # no claim needed (a worker training an arm holds it for minutes)
    claim = try_claim(paths.runs, f"pretrain/{arm}")  # (the name held_by reads too)
    if claim is None:
        who = held_by(paths.runs, f"pretrain/{arm}")
        raise RunBusy(f"pre-training arm {arm!r} is being trained by {who}", f"pretrain/{arm}")
    with claim:
        if finished():  # by another worker since the check above
            return final
        return _pretrain_and_record(experiment, arm, paths, cfg, launch)


def arm_resumable(out: Path) -> bool:
    """Whether the arm's output directory ``out`` holds a checkpoint to go on from, after
    repairing a checkpoint swap that a kill cut short between its renames (``last.old`` put
    back as ``last/``, as a fine-tuning run's resume does). When it holds none, the ``.tmp``
    directories of checkpoints whose writing a kill cut short are removed: they are not
    checkpoints, and a fresh start would take them for another run's and refuse to begin."""
    if resumable(out / "last"):
        return True
    for name in CHECKPOINT_DIRS:
        partial = out / f"{name}.tmp"
        if partial.is_dir():
            log.warning("%s: removing %s, a checkpoint whose writing was cut short", out, partial)
            shutil.rmtree(partial)
    return False


def _pretrain_and_record(
    experiment: Experiment,
    arm: str,
    paths: Paths,
    cfg: Any,
    launch: Launch,
) -> Path | None:
    """:func:`ensure_pretrained`'s work under the arm's claim: train (or resume) the arm into
    ``cfg.train.output_dir`` and write its result JSON; ``final/``, or None if interrupted."""
    assert experiment.pretrain is not None
    out = Path(cfg.train.output_dir)
    final = out / "final"
    timing = read_json(out / TIME_FILE)
    if not arm_finished(final):
        resume = arm_resumable(out)  # (first: it may put last/ back)
        before = read_json(out / "last" / "train_state.json")
        log.info("pre-training arm %s (%s) into %s", arm, "resumed" if resume else "new", out)
        timing = timed_training(
            out, lambda: pretrain_loop.run(cfg, resume=resume, progress=launch.progress)
        )
        if not arm_finished(final):
            state = read_json(out / "last" / "train_state.json")
            if resume and state.get("global_step") == before.get("global_step"):
                raise RuntimeError(
                    f"pre-training arm {arm!r}: resuming made no progress (step "
                    f"{state.get('global_step')}); delete {out} to retrain it"
                )
            return None  # interrupted: last/ holds the state
    state = read_json(final / "train_state.json")
    device, bf16 = device_and_bf16(cfg)
    if isinstance(state.get("bf16"), bool):  # what it trained in, not what this machine would
        bf16 = state["bf16"]
    write_json(
        paths.pretrain_result(arm),
        {
            "experiment": experiment.name,
            "arm": arm,
            "overrides": experiment.pretrain.arms[arm],
            # held-out MLM loss/accuracy ({} when the corpus left no held-out chunk)
            "metrics": read_json(final / "metrics.json"),
            "steps": state.get("global_step"),
            "seed": cfg.train.seed,
            "wall_time_s": round(timing.get("wall_time_s", 0.0), 3),
            "sessions": timing.get("sessions", 0),
            "device": device,
            "bf16": bf16,
            **launch.provenance,
            "command": launch.command,
            "config_file": experiment.source,
            "pretrain_base": experiment.pretrain.base_file,
            "config": cfg.to_dict(),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    return final
