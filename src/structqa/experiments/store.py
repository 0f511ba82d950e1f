"""Where an experiment's runs and results live on disk, and what a finished run leaves there.

``<results>/runs/<run>.json`` (a run's result: config, metrics, provenance),
``<results>/answers/<run>.json.gz`` (its best/ answers, for ``--bootstrap``),
``<results>/pretrain/<arm>.json``; ``<runs-dir>/<run>/`` and ``<runs-dir>/pretrain/<arm>/`` hold
the checkpoints (never committed), with ``experiment_time.json`` summing the wall time of every
stint a run trained for.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structqa.config import Config
from structqa.experiments.spec import Experiment, Run
from structqa.io import read_json as read_json_file
from structqa.io import write_bytes, write_json
from structqa.ncbert.config import DropConfig
from structqa.pretrain.config import PretrainConfig
from structqa.training.heldout import TEST_DIR

TIME_FILE = "experiment_time.json"  # wall time summed over every stint of one run

ANSWERS_DIR = "answers"  # in the results directory: <run>.json.gz, see Paths.answers


def answers_file(results_dir: Path, run_name: str) -> Path:
    """Where a results directory keeps run ``run_name``'s answers."""
    return results_dir / ANSWERS_DIR / f"{run_name}.json.gz"


def kept_answers(results_dir: Path, run_name: str, result: Mapping[str, Any]) -> Path:
    """Where a finished run's answers are kept: beside its result in ``results_dir``, or for a
    result reused from another experiment (``reused_from``), beside that experiment's."""
    reused = result.get("reused_from")
    if isinstance(reused, Mapping) and reused.get("result"):
        source = Path(str(reused["result"]))  # <results dir>/runs/<run>.json
        return answers_file(source.parent.parent, str(reused.get("run", run_name)))
    return answers_file(results_dir, run_name)


def tested_once(data: Mapping[str, Any]) -> bool:
    """Whether an extractive run with these data settings chose best/ on a validation slice
    of its training file and then scored its test file (data.eval) once, into best/eval/."""
    return data.get("validation") is not None and bool(data.get("eval"))


def answers_source(kind: str, out: Path, data: Mapping[str, Any]) -> Path:
    """The test answers a finished run left in its output directory ``out``: a DROP run's
    ``best/test/predictions.json``; an extractive run's ``best/eval/predictions.json`` when it
    was :func:`tested_once`, else ``best/predictions.json`` (best/ chosen on data.eval itself).
    ``data``: the run's data settings."""
    if kind == "drop":
        return out / "best" / "test" / "predictions.json"
    if tested_once(data):
        return out / "best" / TEST_DIR / "predictions.json"
    return out / "best" / "predictions.json"


def save_answers(source: Path, dest: Path) -> bool:
    """Copy ``source`` (:func:`answers_source`) to ``dest`` gzipped (byte-for-byte
    reproducible: no timestamp in the gzip header), atomically; False when it is missing."""
    if not source.is_file():
        return False
    write_bytes(dest, gzip.compress(source.read_bytes(), compresslevel=9, mtime=0))
    return True


def keep_answers(
    experiment: Experiment,
    runs: Sequence[Run],
    results: Mapping[str, Mapping[str, Any]],
    paths: Paths,
) -> int:
    """Save the answers of every finished run trained here (not reused) that has them in its
    output directory but not yet in the results directory; how many were saved. Runs that
    finished before answers were kept get them on the next ``--refresh`` or finished run, as
    long as their output directories exist."""
    saved = 0
    for run in runs:
        result = results.get(run.name)
        if result is None or result.get("reused_from") or paths.answers(run).is_file():
            continue
        data = result.get("config", {}).get("data", {})  # (a result written by hand has none)
        source = answers_source(experiment.kind, paths.output(run), data)
        saved += save_answers(source, paths.answers(run))
    return saved


@dataclass(frozen=True)
class Launch:
    """What every run and arm this process trains records or reads: the command line, its
    provenance (git, machine), the data root (else the configs' own) and progress bars."""

    command: str
    provenance: Mapping[str, Any]
    data_dir: str | None = None
    progress: bool = True


@dataclass(frozen=True)
class Paths:
    results: Path  # table.md, summary.json, runs/<run>.json
    runs: Path  # <run>/ output directories (checkpoints; never committed)

    @classmethod
    def default(cls, experiment: Experiment) -> Paths:
        return cls(Path("docs/results") / experiment.name, Path("runs") / experiment.name)

    def result(self, run: Run) -> Path:
        return self.results / "runs" / f"{run.name}.json"

    def output(self, run: Run) -> Path:
        return self.runs / run.name

    def answers(self, run: Run) -> Path:
        """The run's answers (:func:`answers_source`, gzipped), kept with its result so
        that ``--bootstrap`` works from a checkout without the runs directory."""
        return answers_file(self.results, run.name)

    def pretrain_result(self, arm: str) -> Path:
        return self.results / "pretrain" / f"{arm}.json"

    def pretrain_output(self, arm: str) -> Path:
        return self.runs / "pretrain" / arm


def pretrain_status(paths: Paths, arm: str) -> str:
    """``done``, ``partial`` or ``todo`` for a pre-training arm, as :func:`run_status`."""
    out = paths.pretrain_output(arm)
    if paths.pretrain_result(arm).exists() and arm_finished(out / "final"):
        return "done"
    return "partial" if out.is_dir() and any(out.iterdir()) else "todo"


def run_status(paths: Paths, run: Run) -> str:
    """``done`` (result written), ``partial`` (output directory started) or ``todo``."""
    if paths.result(run).exists():
        return "done"
    out = paths.output(run)
    if out.is_dir() and any(out.iterdir()):
        return "partial"
    return "todo"


def display_path(path: str | Path) -> str:
    """A path relative to the working directory where it lies under it (for commands)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def config_file(experiment: Experiment) -> str:
    """How tables and results name the experiment's YAML."""
    return display_path(experiment.source) if experiment.source else experiment.name


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file's content ({} where there is none); one that does not parse is named."""
    return read_json_file(path) if path.exists() else {}


def arm_finished(final: Path) -> bool:
    return bool(read_json(final / "train_state.json").get("finished"))


def eval_history(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"epoch": r["epoch"], "step": r["step"], **r["eval"]} for r in rows if "eval" in r]


def timed_training(out: Path, train: Callable[[], Any]) -> dict[str, Any]:
    """Train once (a first stint or a resumed one); its wall time is added to ``out``'s
    experiment_time.json (also when it is interrupted). Returns the totals: ``wall_time_s`` and
    ``sessions`` (the number of stints, under the key results have always used)."""
    timing = read_json(out / TIME_FILE)
    t0 = time.perf_counter()
    try:
        train()
    finally:
        timing = {
            "wall_time_s": timing.get("wall_time_s", 0.0) + time.perf_counter() - t0,
            "sessions": timing.get("sessions", 0) + 1,
        }
        if out.is_dir():
            write_json(out / TIME_FILE, timing)
    return timing


def device_and_bf16(cfg: Config | DropConfig | PretrainConfig) -> tuple[str, bool]:
    """What the trainer chose: CUDA when there is one, bf16 as ``train.bf16`` resolves there."""
    import torch

    from structqa.runtime import use_bf16

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device.type, use_bf16(cfg.train.bf16, device)
