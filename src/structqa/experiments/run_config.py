"""A run's config as it trains: its output directory, ``--data``, and, when the experiment asks
for a ``validation`` split, the split's files in place of ``data.train``/``data.eval``.

The split divides the training file by context and is written once as SQuAD JSON under
``<runs-dir>/_validation/`` (``split.json``, written last, marks a complete split).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from structqa.config import Config
from structqa.data import validation_split
from structqa.data.overlap import drop_overlap
from structqa.data.readers import read_extractive
from structqa.data.squad_json import to_squad_json
from structqa.experiments.spec import Experiment, Run, ValidationSpec
from structqa.experiments.store import Paths
from structqa.io import write_json
from structqa.ncbert.config import DropConfig
from structqa.training.data import data_path

log = logging.getLogger(__name__)


def resolve_config(
    experiment: Experiment, run: Run, paths: Paths, data_dir: str | None = None
) -> tuple[Config | DropConfig, dict | None]:
    """The run's config as it trains: its output directory, ``--data``, and the validation
    split files in place of data.train/data.eval when the experiment asks for one."""
    cfg = experiment.config_for(run)
    cfg.train.output_dir = str(paths.output(run))
    if data_dir:
        cfg.data.dir = data_dir
    split = None
    if experiment.validation is not None:
        train_file, val_file, split = validation_files(
            cfg, experiment.validation, paths.runs / "_validation"
        )
        cfg.data.train, cfg.data.eval = str(train_file), str(val_file)
        cfg.data.validation = None  # best/ on the split's validation file, now data.eval
    return cfg, split


def validation_files(cfg: Config, spec: ValidationSpec, root: Path) -> tuple[Path, Path, dict]:
    """Split ``cfg.data.train`` by context and write ``train.json``/``val.json`` under ``root``
    (once; ``split.json``, written last, marks a complete split). Returns both paths and the
    split's description."""
    source = data_path(cfg, cfg.data.train)
    excluded = [str(data_path(cfg, name)) for name in cfg.data.exclude]
    tag = f"{source.name.split('.')[0]}-val{spec.fraction:g}-seed{spec.seed}"
    if excluded:  # another pool: its own folder
        tag += "-excl" + hashlib.sha1("\n".join(sorted(excluded)).encode()).hexdigest()[:8]
    folder = root / tag
    train_file, val_file, info_file = (
        folder / "train.json",
        folder / "val.json",
        folder / "split.json",
    )
    wanted: dict[str, Any] = {"source": str(source), "fraction": spec.fraction, "seed": spec.seed}
    if excluded:
        wanted["exclude"] = excluded
    if info_file.exists() and train_file.exists() and val_file.exists():
        info = json.loads(info_file.read_text())
        if all(info.get(k) == v for k, v in wanted.items()):
            return train_file, val_file, info
    pool = list(read_extractive(source).examples)
    if excluded:  # before the split: no excluded passage on either side
        pool, report = drop_overlap(pool, excluded)
        log.info("data.exclude: %s: %s", source, report.summary())
        wanted["excluded_questions"] = report.dropped
    train, val = validation_split(pool, spec.fraction, spec.seed)
    write_json(train_file, to_squad_json(train, targets=True), indent=None)
    write_json(val_file, to_squad_json(val, targets=False), indent=None)
    info = {
        **wanted,
        "train_questions": len(train),
        "val_questions": len(val),
        "train_contexts": len({e.context for e in train}),
        "val_contexts": len({e.context for e in val}),
    }
    write_json(info_file, info)
    log.info(
        "validation split of %s: %d train / %d validation questions in %s",
        source,
        len(train),
        len(val),
        folder,
    )
    return train_file, val_file, info
