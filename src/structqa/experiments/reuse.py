"""Reusing another experiment's identical run: ``reuse: [docs/results/OTHER]`` in the YAML.

A run whose full config (all but the runner's paths and derived values) equals a finished
run's in one of those results directories, trained on the same kind of device in the same
number format as a run here would be (``train.bf16: auto`` resolves per machine), takes that
result, marked ``reused_from``, instead of training again. A local encoder's (or
``model.init``'s) weights count, not its path, where the result recorded their digest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from structqa.config import Config
from structqa.experiments.results import metric_value
from structqa.experiments.spec import Experiment, Run, flatten
from structqa.experiments.stale import NOT_COMPARED, VALUE_WHEN_MISSING
from structqa.experiments.store import Paths, device_and_bf16, display_path, read_json
from structqa.experiments.weights import local_weights, same_weights
from structqa.io import write_json
from structqa.ncbert.config import DropConfig

log = logging.getLogger(__name__)


def _comparable(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A config flattened for comparison: runner paths and derived values dropped, and keys a
    recorded config lacks (fields added to structqa after it was written) at their defaults."""
    flat = flatten(json.loads(json.dumps(config)))
    defaults = {**defaults, **{k: v for k, v in VALUE_WHEN_MISSING.items() if k in defaults}}
    return {k: flat.get(k, v) for k, v in defaults.items() if k not in NOT_COMPARED} | {
        k: v for k, v in flat.items() if k not in NOT_COMPARED
    }


def _without(flat: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flat.items() if k not in keys}


def reuse_candidates(experiment: Experiment) -> list[tuple[Path, dict[str, Any]]]:
    """Every finished result (file, content) in ``experiment.reuse``'s directories."""
    return [
        (path, result)
        for directory in experiment.reuse
        for path in sorted((Path(directory) / "runs").glob("*.json"))
        if "config" in (result := read_json(path))
    ]


def find_reusable(
    experiment: Experiment,
    cfg: Config | DropConfig,
    candidates: Sequence[tuple[Path, dict[str, Any]]] | None = None,
) -> tuple[Path, dict[str, Any]] | None:
    """The first finished result in ``experiment.reuse``'s directories (or in ``candidates``,
    read from them beforehand) trained with exactly ``cfg`` (the run's resolved config), on
    the device kind and in the number format a run of it here would use (where the result
    records them), as (its file, its content); else None. A local encoder (or ``model.init``)
    counts as the same where its weights' digest is the one the result recorded, wherever it
    lies (:mod:`~structqa.experiments.weights`); without a recorded digest, by its path."""
    if not experiment.reuse:
        return None
    defaults = flatten(json.loads(json.dumps(type(cfg)().to_dict())))
    want = _comparable(cfg.to_dict(), defaults)
    weights_now = local_weights(cfg)
    here = device_and_bf16(cfg)
    for path, result in reuse_candidates(experiment) if candidates is None else candidates:
        by_weights = same_weights(result, weights_now)
        theirs = _comparable(result["config"], defaults)
        if _without(theirs, by_weights) != _without(want, by_weights):
            continue
        if not all(by_weights.values()):
            changed = ", ".join(k for k, same in by_weights.items() if not same)
            log.info(
                "%s: the same config, but other weights in %s; trained here, not taken over",
                display_path(path),
                changed,
            )
            continue
        there = (result.get("device"), result.get("bf16"))
        if None not in there and there != here:  # one table, one number format and device
            log.info(
                "%s: the same config, trained on %s in %s; here a run trains on %s in %s, "
                "so it is trained here, not taken over",
                display_path(path),
                there[0],
                _precision(there[1]),
                here[0],
                _precision(here[1]),
            )
            continue
        return path, result
    return None


def _precision(bf16: bool) -> str:
    return "bf16" if bf16 else "fp32"


def reuse_result(
    experiment: Experiment, run: Run, paths: Paths, source: Path, result: Mapping[str, Any]
) -> None:
    """Write ``run``'s result as a copy of another experiment's identical run, saying so."""
    reused = {
        **result,
        "experiment": experiment.name,
        "run": run.name,
        "grid": run.values,
        "extra_seed": run.extra,
        "reused_from": {
            "result": display_path(source),
            "experiment": result.get("experiment"),
            "run": result.get("run"),
        },
        "reused_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(paths.result(run), reused)
    log.info(
        "%s: reused %s (identical config), F1 %.2f",
        run.name,
        display_path(source),
        metric_value(reused["metrics"], "f1"),
    )
