"""`structqa experiment CONFIG.yaml`: run a grid of training runs one after another, resumably.

Each run trains into ``<runs-dir>/<run>/`` and, once finished, leaves one result JSON in
``<results>/runs/<run>.json`` (config, metrics, provenance); then the tables are refreshed.
An extractive run trains with :func:`structqa.training.loop.run`; a ``kind: drop`` run with
:func:`structqa.ncbert.loop.run`, and its result adds the full DROP scores of ``best/`` on the
dev file (``dev``) and on the test file (``test``, with per-type EM/F1).
A run whose ``model.encoder`` is ``pretrain:NAME`` first gets that pre-training arm (see
:mod:`structqa.experiments.grid`): ``structqa pretrain`` into ``<runs-dir>/pretrain/NAME/``,
resumable the same way, leaving ``<results>/pretrain/NAME.json`` (held-out MLM loss and
accuracy, config, provenance, wall time); later runs of that arm reuse its ``final/``.
A run with a result is skipped; a run with an output directory but no result is resumed.
Several workers may run the same experiment at once (e.g. one per core, with ``--threads``):
each claims a run before training it (:mod:`structqa.experiments.claims`) and skips runs
another worker holds.
SIGINT/SIGTERM stop the current run cleanly (the trainer saves ``last/``) and the runner exits
without a result for it; the same command continues later.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from structqa.config import Config, ConfigError, config_changes
from structqa.data import Example, validation_split
from structqa.data.readers import read_extractive
from structqa.experiments.aggregate import (
    LAST_PREFIX,
    drop_table_metrics,
    load_results,
    metric_value,
    refresh,
)
from structqa.experiments.claims import holder, try_claim
from structqa.experiments.grid import (
    RUNNER_KEYS,
    Experiment,
    Run,
    ValidationSpec,
    _flatten,
    load_experiment,
    plan,
    pretrain_arm,
)
from structqa.io import write_bytes, write_json
from structqa.ncbert import loop as drop_loop
from structqa.ncbert.config import DropConfig
from structqa.pretrain import loop as pretrain_loop
from structqa.pretrain.config import PretrainConfig
from structqa.provenance import git_info, machine_info
from structqa.training import loop
from structqa.training.checkpoint import RESUME_MAY_CHANGE
from structqa.training.data import data_path, load_eval_examples

log = logging.getLogger(__name__)

EXIT_INTERRUPTED = 130


class RunBusy(Exception):
    """Another worker holds something this run needs (its pre-training arm): ``claim``."""

    def __init__(self, message: str, claim: str) -> None:
        super().__init__(message)
        self.claim = claim


#: seconds between looks at a busy arm's claim, once a worker has nothing else to run
ARM_WAIT_POLL_S = 10.0


_TIME_FILE = "experiment_time.json"  # wall time summed over the sessions of one run
ANSWERS_DIR = "answers"  # in the results directory: <run>.json.gz, see Paths.answers


def answers_file(results_dir: Path, run_name: str) -> Path:
    """Where a results directory keeps run ``run_name``'s answers."""
    return results_dir / ANSWERS_DIR / f"{run_name}.json.gz"


def save_answers(out: Path, dest: Path) -> bool:
    """Copy ``out/best/predictions.json`` to ``dest`` gzipped (byte-for-byte reproducible: no
    timestamp in the gzip header), atomically; False when ``out`` has no such file."""
    source = out / "best" / "predictions.json"
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
    if experiment.kind != "extractive":
        return 0
    saved = 0
    for run in runs:
        result = results.get(run.name)
        if result is None or result.get("reused_from") or paths.answers(run).is_file():
            continue
        saved += save_answers(paths.output(run), paths.answers(run))
    return saved


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
        """The run's answers (its best/predictions.json, gzipped), kept with its result so
        that ``--bootstrap`` works from a checkout without the runs directory."""
        return answers_file(self.results, run.name)

    def pretrain_result(self, arm: str) -> Path:
        return self.results / "pretrain" / f"{arm}.json"

    def pretrain_output(self, arm: str) -> Path:
        return self.runs / "pretrain" / arm


def pretrain_status(paths: Paths, arm: str) -> str:
    """``done``, ``partial`` or ``todo`` for a pre-training arm, as :func:`run_status`."""
    out = paths.pretrain_output(arm)
    if paths.pretrain_result(arm).exists() and _arm_finished(out / "final"):
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


# ---- provenance ------------------------------------------------------------------------


def _device_and_bf16(cfg: Config | DropConfig | PretrainConfig) -> tuple[str, bool]:
    """What the trainer chose: CUDA when there is one, bf16 as ``train.bf16`` resolves there."""
    import torch

    from structqa.runtime import use_bf16

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device.type, use_bf16(cfg.train.bf16, device)


# ---- a validation split of the training file, as SQuAD JSON ------------------------------


def _squad_answers(example: Example, targets: bool) -> list[dict[str, Any]]:
    """The ``answers`` of one SQuAD question.

    ``targets`` (the training part): the located answers, so that reading the file back gives
    the same training targets. Otherwise (the part that is scored): every gold text in order,
    so that scoring sees the same gold answers; a gold text with no located span gets
    ``answer_start`` -1.
    """
    located = [{"text": a.text, "answer_start": a.start} for a in example.answers]
    if targets and located:
        return located
    starts: dict[str, list[int]] = {}
    for answer in example.answers:
        starts.setdefault(answer.text, []).append(answer.start)
    used: dict[str, int] = {}
    out = []
    for text in example.gold_texts:
        options = starts.get(text, [-1])
        out.append({"text": text, "answer_start": options[used.get(text, 0) % len(options)]})
        used[text] = used.get(text, 0) + 1
    return out


def to_squad_json(examples: Iterable[Example], targets: bool) -> dict[str, Any]:
    """Examples as a SQuAD JSON document (v2.0 if any question is unanswerable, else v1.1):
    articles by title and paragraphs by context, in order of first appearance."""
    examples = list(examples)
    v2 = any(e.is_impossible for e in examples)
    articles: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for ex in examples:
        qa: dict[str, Any] = {"id": ex.id, "question": ex.question}
        qa["answers"] = [] if ex.is_impossible else _squad_answers(ex, targets)
        if v2:
            qa["is_impossible"] = ex.is_impossible
        articles.setdefault(ex.title, {}).setdefault(ex.context, []).append(qa)
    data = [
        {
            "title": title,
            "paragraphs": [{"context": c, "qas": qas} for c, qas in paragraphs.items()],
        }
        for title, paragraphs in articles.items()
    ]
    return {"version": "v2.0" if v2 else "1.1", "data": data}


def validation_files(cfg: Config, spec: ValidationSpec, root: Path) -> tuple[Path, Path, dict]:
    """Split ``cfg.data.train`` by context and write ``train.json``/``val.json`` under ``root``
    (once; ``split.json``, written last, marks a complete split). Returns both paths and the
    split's description."""
    source = data_path(cfg, cfg.data.train)
    folder = root / f"{source.name.split('.')[0]}-val{spec.fraction:g}-seed{spec.seed}"
    train_file, val_file, info_file = (
        folder / "train.json",
        folder / "val.json",
        folder / "split.json",
    )
    wanted = {"source": str(source), "fraction": spec.fraction, "seed": spec.seed}
    if info_file.exists() and train_file.exists() and val_file.exists():
        info = json.loads(info_file.read_text())
        if all(info.get(k) == v for k, v in wanted.items()):
            return train_file, val_file, info
    train, val = validation_split(read_extractive(source).examples, spec.fraction, spec.seed)
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


# ---- running -----------------------------------------------------------------------------


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
    return cfg, split


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _eval_history(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"epoch": r["epoch"], "step": r["step"], **r["eval"]} for r in rows if "eval" in r]


def _timed_session(out: Path, train: Callable[[], Any]) -> dict[str, Any]:
    """Run one training session; its wall time is added to ``out``'s experiment_time.json
    (also when it is interrupted). Returns the totals: wall_time_s and sessions."""
    timing = _read_json(out / _TIME_FILE)
    t0 = time.perf_counter()
    try:
        train()
    finally:
        timing = {
            "wall_time_s": timing.get("wall_time_s", 0.0) + time.perf_counter() - t0,
            "sessions": timing.get("sessions", 0) + 1,
        }
        if out.is_dir():
            write_json(out / _TIME_FILE, timing)
    return timing


def _arm_finished(final: Path) -> bool:
    return bool(_read_json(final / "train_state.json").get("finished"))


def ensure_pretrained(
    experiment: Experiment,
    arm: str,
    paths: Paths,
    *,
    command: str,
    provenance: Mapping[str, Any],
    data_dir: str | None = None,
    progress: bool = True,
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
    if data_dir:
        cfg.data.dir = data_dir
    recorded = _read_json(out / "config.json")  # what the pre-training loop ran with
    changed = [k for k, _, _ in config_changes(recorded or {}, cfg.to_dict(), RESUME_MAY_CHANGE)]
    if changed:
        raise ConfigError(
            f"pre-training arm {arm!r}: {out} was trained with other values of "
            f"{', '.join(changed)} than {experiment.source or 'the experiment'} now gives; "
            f"delete {out} (and {paths.pretrain_result(arm)}) to retrain it, or give the new "
            "recipe a new arm name"
        )

    def finished() -> bool:
        return paths.pretrain_result(arm).exists() and _arm_finished(final)

    if finished():
        return final  # no claim needed (a worker training an arm holds it for minutes)
    claim = try_claim(paths.runs, f"pretrain/{arm}")  # (the name _who reads too)
    if claim is None:
        raise RunBusy(
            f"pre-training arm {arm!r} is being trained by {_who(paths, f'pretrain/{arm}')}",
            f"pretrain/{arm}",
        )
    with claim:
        if finished():  # by another worker since the check above
            return final
        return _pretrain_and_record(experiment, arm, paths, cfg, command, provenance, progress)


def _pretrain_and_record(
    experiment: Experiment,
    arm: str,
    paths: Paths,
    cfg: Any,
    command: str,
    provenance: Mapping[str, Any],
    progress: bool,
) -> Path | None:
    """:func:`ensure_pretrained`'s work under the arm's claim: train (or resume) the arm into
    ``cfg.train.output_dir`` and write its result JSON; ``final/``, or None if interrupted."""
    assert experiment.pretrain is not None
    out = Path(cfg.train.output_dir)
    final = out / "final"
    timing = _read_json(out / _TIME_FILE)
    if not _arm_finished(final):
        before = _read_json(out / "last" / "train_state.json")
        resume = (out / "last").is_dir()
        log.info("pre-training arm %s (%s) into %s", arm, "resumed" if resume else "new", out)
        timing = _timed_session(
            out, lambda: pretrain_loop.run(cfg, resume=resume, progress=progress)
        )
        if not _arm_finished(final):
            state = _read_json(out / "last" / "train_state.json")
            if resume and state.get("global_step") == before.get("global_step"):
                raise RuntimeError(
                    f"pre-training arm {arm!r}: resuming made no progress (step "
                    f"{state.get('global_step')}); delete {out} to retrain it"
                )
            return None  # interrupted: last/ holds the state
    state = _read_json(final / "train_state.json")
    device, bf16 = _device_and_bf16(cfg)
    write_json(
        paths.pretrain_result(arm),
        {
            "experiment": experiment.name,
            "arm": arm,
            "overrides": experiment.pretrain.arms[arm],
            # held-out MLM loss/accuracy ({} when the corpus left no held-out chunk)
            "metrics": _read_json(final / "metrics.json"),
            "steps": state.get("global_step"),
            "seed": cfg.train.seed,
            "wall_time_s": round(timing.get("wall_time_s", 0.0), 3),
            "sessions": timing.get("sessions", 0),
            "device": device,
            "bf16": bf16,
            **provenance,
            "command": command,
            "config_file": experiment.source,
            "pretrain_base": experiment.pretrain.base_file,
            "config": cfg.to_dict(),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    return final


def execute_run(
    experiment: Experiment,
    run: Run,
    paths: Paths,
    *,
    command: str,
    provenance: Mapping[str, Any],
    data_dir: str | None = None,
    progress: bool = True,
) -> bool:
    """Train (or continue) one run; write its result JSON if it finished. True if it did."""
    cfg, split = resolve_config(experiment, run, paths, data_dir)
    arm = pretrain_arm(str(getattr(cfg.model, "encoder", "")))
    if arm is not None:
        final = ensure_pretrained(
            experiment,
            arm,
            paths,
            command=command,
            provenance=provenance,
            data_dir=data_dir,
            progress=progress,
        )
        if final is None:
            return False
        cfg.model.encoder = str(final)
    out = Path(cfg.train.output_dir)
    resume = run_status(paths, run) == "partial"
    if resume and (changed := stale_partial(experiment, paths, run)):
        raise ConfigError(
            f"{run.name}: its unfinished output {out} was started with other values than the "
            f"YAML now gives ({', '.join(changed)}). Restore them to continue it, or delete "
            f"{out} to train this run afresh with the YAML's values"
        )
    before = _read_json(out / "last" / "train_state.json")
    trainer = drop_loop.run if isinstance(cfg, DropConfig) else loop.run
    timing = _timed_session(out, lambda: trainer(cfg, resume=resume, progress=progress))
    state = _read_json(out / "last" / "train_state.json")
    if not state.get("finished"):
        if resume and state.get("global_step") == before.get("global_step"):
            # A signal always lets the current step finish, so a resumed session that returns
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
    if isinstance(cfg, DropConfig):
        test_file = out / "best" / "test" / "metrics.json"
        if not test_file.exists():
            raise FileNotFoundError(f"{run.name}: training finished but {test_file} is missing")
        best_state = _read_json(out / "best" / "train_state.json")
        scores = {
            "dev": metrics,
            "test": json.loads(test_file.read_text()),
            "best_step": best_state.get("global_step"),  # (selection may happen mid-epoch)
        }
        metrics = drop_table_metrics(scores["test"], scores["dev"])
    elif not save_answers(out, paths.answers(run)):
        raise FileNotFoundError(
            f"{run.name}: training finished but {out / 'best' / 'predictions.json'} is missing"
        )
    if split is not None and not isinstance(cfg, DropConfig):
        scores["calibration"] = calibrate_on_validation(out / "best", cfg)
    device, bf16 = _device_and_bf16(cfg)
    result = {
        "experiment": experiment.name,
        "run": run.name,
        "grid": run.values,
        "extra_seed": run.extra,
        "seed": cfg.train.seed,
        "metrics": metrics,
        **scores,
        "best_epoch": _read_json(out / "best" / "train_state.json").get("best_epoch"),
        "epochs": state.get("epoch"),
        "steps": state.get("global_step"),
        "eval_history": _eval_history(out),
        "wall_time_s": round(timing["wall_time_s"], 3),
        "sessions": timing["sessions"],
        "device": device,
        "bf16": bf16,
        **provenance,
        "command": command,
        "config_file": experiment.source,
        "validation": split,
        "config": cfg.to_dict(),
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


def calibrate_on_validation(best: Path, cfg: Config) -> dict[str, Any]:
    """Fit the null threshold and answer probabilities of ``best`` on the validation slice it
    was scored on (calibration.json, used by evaluate, predict and serve); what was fitted."""
    from structqa.calibration.report import calibrate_evaluated

    examples, v2 = load_eval_examples(cfg)
    cal = calibrate_evaluated(best, examples, v2, source=cfg.data.eval)
    return {k: v for k, v in cal.to_dict().items() if k != "isotonic"}


def _who(paths: Paths, name: str) -> str:
    """'pid N on HOST' for the worker holding ``name``'s claim, as its lock file says."""
    record = holder(paths.runs, name)
    if record is None:
        return "another worker"
    return f"pid {record['pid']} on {record.get('host', '?')}"


# ---- reusing another experiment's identical run ------------------------------------------


# not compared: the runner's paths, and values the trainer derives from compared ones
# (data.token_tags: null becomes exactly the tags model.encoder reads; any other value must
# equal them)
_NOT_COMPARED = frozenset(RUNNER_KEYS) | {"data.token_tags"}
# settings added after results were recorded whose default is how those results were made
_DEFAULT_WHEN_MISSING = frozenset({"decode.whole_words"})


def _comparable(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A config flattened for comparison: runner paths and derived values dropped, and keys a
    recorded config lacks (fields added to structqa after it was written) at their defaults."""
    flat = _flatten(json.loads(json.dumps(config)))
    return {k: flat.get(k, v) for k, v in defaults.items() if k not in _NOT_COMPARED} | {
        k: v for k, v in flat.items() if k not in _NOT_COMPARED
    }


def stale_keys(experiment: Experiment, run: Run, result: Mapping[str, Any]) -> list[str]:
    """The settings whose value in a finished ``result`` differs from what the experiment's
    YAML now gives ``run`` (settings that the result's version of structqa did not have, runner
    paths and derived values are not compared; nor is the encoder
    of a run fine-tuned from a pre-training arm, a path the runner sets: the arm's own recipe
    is compared by :func:`stale_arms`). Empty when the result still stands for the recipe."""
    if "config" not in result:
        return []
    cfg = experiment.config_for(run)
    skip: set[str] = set()
    if pretrain_arm(str(getattr(cfg.model, "encoder", ""))) is not None:
        skip.add("model.encoder")
    if experiment.validation is not None:  # the runner's split files stand in for these
        skip |= {"data.train", "data.eval"}
    # A setting the recorded config lacks did not exist when it ran, and is not compared
    # (e.g. train.head_lr_exclude, a no-op for heads without the parameter it names); except
    # those in _DEFAULT_WHEN_MISSING, which changed every run's scores when set: a run from
    # before them behaved as their default.
    recorded = _flatten(json.loads(json.dumps(result["config"])))
    now = _flatten(json.loads(json.dumps(cfg.to_dict())))
    defaults = _flatten(json.loads(json.dumps(type(cfg)().to_dict())))
    for key in _DEFAULT_WHEN_MISSING & (now.keys() - recorded.keys()):
        recorded[key] = defaults[key]
    skip |= _NOT_COMPARED
    return sorted(
        k for k in recorded.keys() & now.keys() if k not in skip and recorded[k] != now[k]
    )


def selection_note(experiment: Experiment) -> str | None:
    """A warning when an extractive grid's runs pick best/ by F1 on ``data.eval`` every epoch
    and the table reports best/'s scores on that same file: if it is the test split, the table
    is tuned on its own test set. None when no run does (``eval_every_epoch: false``, a
    ``validation`` split, one epoch, or a table of ``last_`` metrics)."""
    if experiment.kind != "extractive" or experiment.validation is not None:
        return None
    if all(m.startswith(LAST_PREFIX) for m in experiment.table.metrics):
        return None
    picked = []
    for run in experiment.runs():
        cfg = experiment.config_for(run)
        several = cfg.train.epochs > 1 or cfg.train.max_steps  # (steps may span epochs)
        if cfg.train.eval_every_epoch and several and cfg.data.eval:
            picked.append(cfg.data.eval)
    if not picked:
        return None
    files = ", ".join(dict.fromkeys(picked))
    return (
        f"{_config_file(experiment)}: best/ is the epoch with the best F1 on data.eval ({files}) "
        "when a run trains more than one epoch, and the table scores best/ on that same file. "
        "If it is your test split, set "
        "train.eval_every_epoch: false (score once, after the last epoch) or add a "
        "`validation:` section to choose on a slice of the training pool"
    )


def stale_partial(experiment: Experiment, paths: Paths, run: Run) -> list[str]:
    """For a started, unfinished run: the settings its checkpoint was trained with that the
    YAML now gives otherwise, except those a resume may change (RESUME_MAY_CHANGE, as the
    trainer allows). The trainer would refuse to resume it; empty when it can go on, or when
    there is no checkpoint yet (the trainer then starts the run afresh)."""
    last = paths.output(run) / "last"
    saved = _read_json(last / "structqa_config.json")
    if not saved or not (last / "resume.pt").exists():
        return []
    changed = stale_keys(experiment, run, {"config": saved})
    return [k for k in changed if k not in RESUME_MAY_CHANGE]


def stale_arms(experiment: Experiment, paths: Paths) -> dict[str, list[str]]:
    """Pre-training arms whose recorded config differs from the YAML's: arm -> keys."""
    if experiment.pretrain is None:
        return {}
    out = {}
    for arm in experiment.pretrain.arms:
        recorded = _read_json(paths.pretrain_output(arm) / "config.json") or _read_json(
            paths.pretrain_result(arm)
        ).get("config")
        if not recorded:
            continue
        changed = config_changes(
            recorded, experiment.pretrain.config_for(arm).to_dict(), RESUME_MAY_CHANGE
        )
        if changed:
            out[arm] = [k for k, _, _ in changed]
    return out


def stale_results(
    experiment: Experiment,
    paths: Paths,
    results: Mapping[str, Mapping[str, Any]],
    arms: Mapping[str, list[str]] | None = None,
) -> dict[str, list[str]]:
    """Finished runs that no longer stand for the YAML's recipe: run name -> changed keys
    (their own, or ``pretrain:ARM`` when the arm they were fine-tuned from changed;
    ``arms``: :func:`stale_arms`, when the caller has it already)."""
    arms = stale_arms(experiment, paths) if arms is None else arms
    out: dict[str, list[str]] = {}
    for run in plan(experiment, results):
        if run.name not in results:
            continue
        keys = stale_keys(experiment, run, results[run.name])
        arm = pretrain_arm(str(run.overrides.get("model.encoder", "")))
        if arm in arms:
            keys.append(f"pretrain:{arm} ({', '.join(arms[arm])})")
        if keys:
            out[run.name] = keys
    return out


def check_not_stale(experiment: Experiment, paths: Paths, results) -> None:
    """Refuse to run or tabulate a grid whose finished results were made with another recipe
    than the YAML now gives: a table would silently average the two."""
    stale = stale_results(experiment, paths, results)
    if not stale:
        return
    shown = "; ".join(f"{name}: {', '.join(keys)}" for name, keys in list(stale.items())[:5])
    more = f" (and {len(stale) - 5} more)" if len(stale) > 5 else ""
    raise ConfigError(
        f"{_config_file(experiment)}: {len(stale)} finished result(s) in {paths.results} were "
        f"trained with other values than the YAML now gives ({shown}{more}). Restore those "
        f"values, or move the results (runs/NAME.json) and their output directories in "
        f"{paths.runs} aside to train them again; `--dry-run` lists them as stale"
    )


def reuse_candidates(experiment: Experiment) -> list[tuple[Path, dict[str, Any]]]:
    """Every finished result (file, content) in ``experiment.reuse``'s directories."""
    return [
        (path, result)
        for directory in experiment.reuse
        for path in sorted((Path(directory) / "runs").glob("*.json"))
        if "config" in (result := _read_json(path))
    ]


def find_reusable(
    experiment: Experiment,
    cfg: Config | DropConfig,
    candidates: Sequence[tuple[Path, dict[str, Any]]] | None = None,
) -> tuple[Path, dict[str, Any]] | None:
    """The first finished result in ``experiment.reuse``'s directories (or in ``candidates``,
    read from them beforehand) trained with exactly ``cfg`` (the run's resolved config), as
    (its file, its content); else None."""
    if not experiment.reuse:
        return None
    defaults = _flatten(json.loads(json.dumps(type(cfg)().to_dict())))
    want = _comparable(cfg.to_dict(), defaults)
    for path, result in reuse_candidates(experiment) if candidates is None else candidates:
        if _comparable(result["config"], defaults) == want:
            return path, result
    return None


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


def _raise_interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside (as SIGINT does), so a killed worker stops
    resumably; outside the main thread signals are left to the trainer."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def display_path(path: str | Path) -> str:
    """A path relative to the working directory where it lies under it (for commands)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def selected(runs: Sequence[Run], only: str | None) -> list[Run]:
    """The runs whose name contains ``only`` (all when None); text that matches no run is an
    error naming a few of the runs, not a silent no-op."""
    picked = [r for r in runs if not only or only in r.name]
    if only and not picked:
        names = ", ".join(r.name for r in runs[:3])
        raise ConfigError(f"--only {only!r} matches no run of the grid (runs look like {names})")
    return picked


def pretrain_arms(
    experiment: Experiment,
    paths: Paths,
    *,
    command: str,
    only: str | None = None,
    data_dir: str | None = None,
    progress: bool = True,
) -> int:
    """``--pretrain-only``: pre-train (or continue) every arm that a selected run fine-tunes
    from, in plan order, and fine-tune nothing; 0 when done, 130 when interrupted. An arm
    another worker holds is skipped, as the grid skips a claimed run."""
    if experiment.pretrain is None:
        raise ConfigError(
            f"{experiment.name}: --pretrain-only, but the YAML has no pretrain section"
        )
    results = load_results(paths.results)
    check_not_stale(experiment, paths, results)
    runs = selected(plan(experiment, results), only)
    arms: list[str] = []
    for run in runs:
        cfg = resolve_config(experiment, run, paths, data_dir)[0]
        arm = pretrain_arm(str(getattr(cfg.model, "encoder", "")))
        if arm is not None and arm not in arms:
            arms.append(arm)
    if not arms:
        where = f" whose name contains {only!r}" if only else ""
        raise ConfigError(
            f"{experiment.name}: no run{where} fine-tunes from a pre-training arm "
            f"(arms: {', '.join(experiment.pretrain.arms)})"
        )
    how: dict[str, Any] = {
        "command": command,
        "provenance": {"git": git_info(), "machine": machine_info()},
        "data_dir": data_dir,
        "progress": progress,
    }
    loop.StopFlag.received = None
    done, skipped = 0, []
    try:
        with _sigterm_as_interrupt():
            for arm in arms:
                try:
                    final = ensure_pretrained(experiment, arm, paths, **how)
                except RunBusy as busy:
                    log.info("%s; skipping it", busy)
                    skipped.append(arm)
                    continue
                if final is None:
                    log.warning(
                        "pre-training arm %s stopped before finishing; run the same command "
                        "to continue",
                        arm,
                    )
                    return EXIT_INTERRUPTED
                done += 1
                if loop.StopFlag.received is not None:
                    loop.StopFlag.received = None
                    log.warning("pre-training arm %s finished; stopping as signalled", arm)
                    return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        log.warning("interrupted; run the same command to continue")
        return EXIT_INTERRUPTED
    results = load_results(paths.results)
    if results:  # table.md lists the arms' status
        refresh(
            experiment, plan(experiment, results), results, paths.results, _config_file(experiment)
        )
    log.info(
        "%d pre-training arm(s) ready: %s", done, ", ".join(a for a in arms if a not in skipped)
    )
    if skipped:
        log.info("skipped, held by another worker: %s", ", ".join(skipped))
    return 0


def run_experiment(
    experiment: Experiment,
    paths: Paths,
    *,
    command: str,
    only: str | None = None,
    max_runs: int | None = None,
    data_dir: str | None = None,
    progress: bool = True,
) -> int:
    """Run every unfinished run of the plan in order; 0 when done or stopped by --max-runs,
    130 when interrupted. The plan is recomputed after each run, so the extra seeds of a noisy
    cell join the queue as soon as that cell's grid seeds are in. A run claimed by another
    worker (another ``structqa experiment`` on the same runs directory) is skipped. A run whose
    pre-training arm another worker is training is put off: once nothing else is left, the
    worker waits for that arm's claim and then fine-tunes from it (or, if its holder stopped
    before finishing, resumes the arm itself)."""
    check_not_stale(experiment, paths, load_results(paths.results))
    if note := selection_note(experiment):
        log.warning("%s", note)
    loop.StopFlag.received = None  # (a signal an earlier call in this process handled)
    provenance = {"git": git_info(), "machine": machine_info()}
    config_file = _config_file(experiment)
    finished = 0
    skipped: list[str] = []
    tried: set[str] = set()
    waiting: dict[str, list[str]] = {}  # a busy arm's claim -> the runs put off until it is free
    try:
        with _sigterm_as_interrupt():
            while True:
                results = load_results(paths.results)
                runs = plan(experiment, results)
                todo = [
                    r for r in selected(runs, only) if r.name not in results and r.name not in tried
                ]
                if not todo and waiting:
                    _wait_for_claims(paths, waiting)
                    tried.difference_update(*waiting.values())
                    waiting.clear()
                    continue
                if not todo:
                    break
                if max_runs is not None and finished >= max_runs:
                    log.info("stopping after %d run(s) (--max-runs); %d left", finished, len(todo))
                    break
                run = todo[0]
                tried.add(run.name)
                claim = try_claim(paths.runs, run.name)
                if claim is None:
                    log.info(
                        "%s is being trained by %s; skipping it", run.name, _who(paths, run.name)
                    )
                    skipped.append(run.name)
                    continue
                with claim:
                    if paths.result(run).exists():  # another worker finished it since the plan
                        continue
                    source = (
                        find_reusable(
                            experiment, resolve_config(experiment, run, paths, data_dir)[0]
                        )
                        if experiment.reuse
                        else None
                    )
                    if source is not None:
                        reuse_result(experiment, run, paths, *source)
                        finished += 1
                        results = load_results(paths.results)
                        refresh(
                            experiment,
                            plan(experiment, results),
                            results,
                            paths.results,
                            config_file,
                        )
                        continue
                    left = len(todo)
                    log.info(
                        "run %s (%s; %d left in this selection)",
                        run.name,
                        run_status(paths, run),
                        left,
                    )
                    try:
                        done = execute_run(
                            experiment,
                            run,
                            paths,
                            command=command,
                            provenance=provenance,
                            data_dir=data_dir,
                            progress=progress,
                        )
                    except RunBusy as busy:
                        log.info("%s: %s; putting it off", run.name, busy)
                        waiting.setdefault(busy.claim, []).append(run.name)
                        continue
                if not done:
                    log.warning(
                        "%s stopped before finishing; run the same command to continue", run.name
                    )
                    return EXIT_INTERRUPTED
                finished += 1
                results = load_results(paths.results)
                refresh(experiment, plan(experiment, results), results, paths.results, config_file)
                if loop.StopFlag.received is not None:
                    # the signal came during the run's last step or final evaluation: the run
                    # finished and its result is saved, but the grid stops here as asked
                    loop.StopFlag.received = None
                    log.warning("%s finished; stopping as signalled", run.name)
                    return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        log.warning("interrupted; run the same command to continue")
        return EXIT_INTERRUPTED
    results = load_results(paths.results)
    if results and not finished:  # (after a finished run the tables are fresh already)
        refresh(experiment, plan(experiment, results), results, paths.results, config_file)
    if results:
        kept = keep_answers(experiment, plan(experiment, results), results, paths)
        if kept:
            log.info("saved the answers of %d earlier run(s) in %s", kept, paths.results)
    log.info("%d run(s) finished in this session; results in %s", finished, paths.results)
    if skipped:
        log.info(
            "%d run(s) skipped because another worker held them: %s",
            len(skipped),
            ", ".join(skipped),
        )
    return 0


def _wait_for_claims(paths: Paths, waiting: Mapping[str, Sequence[str]]) -> None:
    """Block until no other worker holds any of ``waiting``'s claims (a worker holds an arm's
    claim while it trains the arm; the claim goes with the worker if it dies)."""
    for name, runs in waiting.items():
        log.info(
            "waiting for %s (held by %s) before its %d run(s): %s",
            name,
            _who(paths, name),
            len(runs),
            ", ".join(runs),
        )
        while (claim := try_claim(paths.runs, name)) is None:
            time.sleep(ARM_WAIT_POLL_S)
        claim.release()


def _config_file(experiment: Experiment) -> str:
    """How tables and results name the experiment's YAML."""
    return display_path(experiment.source) if experiment.source else experiment.name


def print_plan(experiment: Experiment, paths: Paths, only: str | None = None) -> None:
    """The --dry-run listing: every planned run with its status (and scores when done)."""
    from rich.console import Console
    from rich.table import Table

    results = load_results(paths.results)
    runs = selected(plan(experiment, results), only)
    table = Table(title=f"{experiment.name}: {len(runs)} run(s)")
    for col in ("#", "run", "status", "F1", "EM"):
        table.add_column(col, justify="right" if col in ("#", "F1", "EM") else "left")
    counts: dict[str, int] = {}
    candidates = reuse_candidates(experiment)  # (read once for the whole listing)
    changed_arms = stale_arms(experiment, paths)
    stale = stale_results(experiment, paths, results, changed_arms)
    for i, run in enumerate(runs, 1):
        status = run_status(paths, run)
        if run.name in stale:
            status = "stale"
        elif status == "partial" and (changed := stale_partial(experiment, paths, run)):
            stale[run.name] = changed
            status = "stale"
        counts[status] = counts.get(status, 0) + 1
        if status == "stale":
            status = f"stale: {', '.join(stale[run.name])}"
        elif status != "done" and (record := holder(paths.runs, run.name)) is not None:
            status = f"running (pid {record['pid']})"
        elif (
            status != "done"
            and experiment.reuse
            and (
                source := find_reusable(
                    experiment, resolve_config(experiment, run, paths)[0], candidates
                )
            )
        ):
            status += f" (will reuse {display_path(source[0])})"
        elif status == "done" and results.get(run.name, {}).get("reused_from"):
            status = "done (reused)"
        scores = ["", ""]
        if run.name in results:
            m = results[run.name]["metrics"]
            scores = [f"{metric_value(m, 'f1'):.2f}", f"{metric_value(m, 'em'):.2f}"]
        name = run.name + (" (extra seed)" if run.extra else "")
        table.add_row(str(i), name, status, *scores)
    console = Console()
    if experiment.pretrain is not None:
        arms = Table(
            title=f"{experiment.name}: {len(experiment.pretrain.arms)} pre-training arm(s)"
        )
        for col in ("arm", "status", "MLM acc", "MLM loss"):
            arms.add_column(col, justify="right" if col.startswith("MLM") else "left")
        for arm in experiment.pretrain.arms:
            m = _read_json(paths.pretrain_result(arm)).get("metrics", {})
            acc, loss = m.get("mlm_accuracy"), m.get("mlm_loss")
            arms.add_row(
                arm,
                f"stale: {', '.join(changed_arms[arm])}"
                if arm in changed_arms
                else pretrain_status(paths, arm),
                "" if acc is None else f"{100 * acc:.2f}",
                "" if loss is None else f"{loss:.4f}",
            )
        console.print(arms)
    console.print(table)
    console.print(
        ", ".join(f"{counts.get(s, 0)} {s}" for s in ("done", "partial", "todo"))
        + (
            f", {counts['stale']} stale (YAML changed since they started)"
            if "stale" in counts
            else ""
        )
    )
    console.print(f"outputs: {paths.runs}  results: {paths.results}")
    if note := selection_note(experiment):
        console.print(f"note: {note}", markup=False)


# ---- the CLI subcommand ------------------------------------------------------------------


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed when it came from the command line, else an equivalent one."""
    if "experiment" in sys.argv[1:]:
        return shlex.join(["structqa", *sys.argv[1:]])
    mode = []
    if getattr(args, "bootstrap", False):
        mode = ["--bootstrap", "--resamples", str(args.resamples)]
    return shlex.join(["structqa", "experiment", args.config, *mode, *_flags(args)])


def _flags(args: argparse.Namespace, threads: int | None = None) -> list[str]:
    """The options of this command that a re-run passes on (``threads`` overrides --threads)."""
    parts: list[str] = []
    for flag, value in (
        ("--only", args.only),
        ("--max-runs", args.max_runs),
        ("--results", args.results),
        ("--runs-dir", args.runs_dir),
        ("--data", args.data),
        ("--threads", args.threads if threads is None else threads),
    ):
        if value is not None:
            parts += [flag, str(value)]
    if getattr(args, "pretrain_only", False):
        parts.append("--pretrain-only")
    return parts


def run_workers(args: argparse.Namespace, experiment: Experiment, paths: Paths) -> int:
    """``--workers N``: N child processes run this same experiment (claims keep them apart),
    each with ``--threads`` (default: the cores split evenly); then the tables are refreshed
    once with every result. SIGTERM/SIGINT reach every worker, and each stops resumably.
    Exit status 130 if any worker was interrupted, else the highest status of a worker."""
    cores = os.cpu_count() or 1
    threads = args.threads or max(1, cores // args.workers)
    cmd = [sys.executable, "-m", "structqa", "experiment", args.config, "--no-progress"]
    cmd += _flags(args, threads)  # (--max-runs is refused with --workers)
    log.info(
        "starting %d workers with %d thread(s) each: %s", args.workers, threads, shlex.join(cmd)
    )
    children: list[subprocess.Popen] = []

    def forward(signum: int, frame: Any) -> None:  # noqa: ARG001
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for i in range(args.workers):
            children.append(subprocess.Popen(cmd))
            if i + 1 < args.workers:
                time.sleep(1.0)  # (claims make this unnecessary; it only tidies the log)
        codes = [child.wait() for child in children]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    results = load_results(paths.results)
    if results:
        refresh(
            experiment, plan(experiment, results), results, paths.results, _config_file(experiment)
        )
    log.info("workers finished with status %s", ", ".join(map(str, codes)))
    if EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    return max(codes)


def cmd_experiment(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    if extra:
        raise ConfigError(
            f"experiment takes no config overrides ({' '.join(extra)}); set them in the "
            "YAML's base or grid"
        )
    experiment = load_experiment(args.config)
    default = Paths.default(experiment)
    paths = Paths(
        Path(args.results) if args.results else default.results,
        Path(args.runs_dir) if args.runs_dir else default.runs,
    )
    if args.max_runs is not None and args.max_runs < 1:
        raise ConfigError("--max-runs must be at least 1")
    if args.workers is not None:
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.dry_run or args.refresh or args.bootstrap or args.max_runs is not None:
            raise ConfigError(
                "--workers runs the grid; it takes no --dry-run/--refresh/--bootstrap/--max-runs"
            )
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError("--threads must be at least 1")
        import torch

        torch.set_num_threads(args.threads)
    for flag, on in (("--refresh", args.refresh), ("--bootstrap", args.bootstrap)):
        if on and (args.only is not None or args.max_runs is not None):
            raise ConfigError(f"{flag} reads every result there; it takes no --only/--max-runs")
    if args.resamples < 1:
        raise ConfigError("--resamples must be at least 1")
    if args.pretrain_only and args.max_runs is not None:
        raise ConfigError("--pretrain-only fine-tunes nothing; it takes no --max-runs")
    if args.dry_run:
        print_plan(experiment, paths, args.only)
        return 0
    if args.bootstrap:
        from structqa.experiments.bootstrap import write_bootstrap

        results = load_results(paths.results)
        if not results:
            raise ConfigError(f"--bootstrap: no results in {paths.results} to compare")
        check_not_stale(experiment, paths, results)
        out = write_bootstrap(
            experiment,
            plan(experiment, results),
            results,
            paths,
            command=_command_line(args),
            provenance={"git": git_info(), "machine": machine_info()},
            data_dir=args.data,
            resamples=args.resamples,
        )
        print(out.read_text(encoding="utf-8"))
        log.info("wrote %s and bootstrap.json", out)
        return 0
    if args.refresh:
        results = load_results(paths.results)
        if not results:
            raise ConfigError(f"--refresh: no results in {paths.results} to tabulate")
        check_not_stale(experiment, paths, results)
        runs = plan(experiment, results)
        refresh(experiment, runs, results, paths.results, _config_file(experiment))
        log.info("rewrote the tables in %s from %d result(s)", paths.results, len(results))
        kept = keep_answers(experiment, runs, results, paths)
        if kept:
            log.info("saved the answers of %d run(s) in %s/%s", kept, paths.results, ANSWERS_DIR)
        return 0
    if args.workers is not None and args.workers > 1:
        return run_workers(args, experiment, paths)
    if args.pretrain_only:
        return pretrain_arms(
            experiment,
            paths,
            command=_command_line(args),
            only=args.only,
            data_dir=args.data,
            progress=not args.no_progress,
        )
    return run_experiment(
        experiment,
        paths,
        command=_command_line(args),
        only=args.only,
        max_runs=args.max_runs,
        data_dir=args.data,
        progress=not args.no_progress,
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``experiment`` on a ``parser.add_subparsers()`` object."""
    p = subparsers.add_parser(
        "experiment",
        help="run a grid of training runs from a YAML config, resumably, and tabulate results",
        description="Runs every run of CONFIG.yaml's grid in order (skipping finished ones, "
        "resuming interrupted ones), writing one result JSON per run and refreshing table.md.",
    )
    p.add_argument("config", help="experiment YAML (name, base, grid/variants, table)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="list the runs with their status")
    mode.add_argument(
        "--refresh",
        action="store_true",
        help="only rewrite table.md (and summary.json) from the results there, e.g. after "
        "editing the YAML's table section",
    )
    mode.add_argument(
        "--bootstrap",
        action="store_true",
        help="compare every table row with the baseline row by a paired bootstrap over the "
        "evaluation questions (reads the runs' saved answers); writes bootstrap.md/.json",
    )
    mode.add_argument(
        "--pretrain-only",
        action="store_true",
        help="only pre-train (or continue) the pretrain: arms that the selected runs fine-tune "
        "from, and fine-tune nothing (with --workers, one arm per worker at a time)",
    )
    p.add_argument(
        "--resamples", type=int, default=10_000, help="bootstrap resamples (with --bootstrap)"
    )
    p.add_argument("--only", metavar="SUBSTRING", help="only runs whose name contains this")
    p.add_argument("--max-runs", type=int, metavar="N", help="stop after N finished runs")
    p.add_argument("--results", metavar="DIR", help="default docs/results/<name>")
    p.add_argument("--runs-dir", metavar="DIR", help="run outputs; default runs/<name>")
    p.add_argument(
        "--data", metavar="DIR", help="data directory (else $STRUCTQA_DATA or ../shared/data)"
    )
    p.add_argument("--no-progress", action="store_true", help="no training progress bars")
    p.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads for this worker (torch.set_num_threads); with several workers on "
        "one grid, e.g. one per core with --threads 1",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="run N worker processes on this grid at once (each claims the runs it trains), "
        "each with --threads or the cores split evenly; on a CPU, one per core trains more per "
        "hour than one process on all cores",
    )
    p.set_defaults(func=cmd_experiment)
    return p
