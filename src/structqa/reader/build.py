"""``structqa reader build``: the general reader, in stages that each leave a record, so that
the same command run again goes on from where it stopped.

1. **data**: the training questions (:mod:`structqa.reader.data`);
2. **train**: the recipe (:data:`RECIPE`) on them, ``best/`` chosen on the validation slice
   (5 % of the passages; with ``--slice articles``, whole articles held out of training,
   ``data/slice.v2.json``), then calibrated there:
   answer probabilities, the no-answer threshold and the answerability verifier (the
   training run resumes from its last checkpoint). With
   ``members`` K > 1 (default 2), K runs from one start (``train.init_seed``) and K batch orders
   (``train.seed`` S..S+K-1), each recorded as it finishes (``members/mI``), then their greedy
   soup on the slice (:func:`greedy_soup`) as ``run/best``, calibrated there;
3. **calibrate**: the threshold, verifier and probabilities fitted again on the slice's
   human-written questions, weighted to SQuAD 2.0's unanswerable share
   (:mod:`structqa.reader.calibrate`), the threshold then moved by the recipe's offset for
   new articles (:data:`structqa.reader.calibrate.THRESHOLD_OFFSET`; none with ``--slice
   articles``, whose slice is new articles already); a build whose held-out
   scores were taken at an earlier calibration is scored again, and one calibrated at another
   offset is calibrated, exported and scored again;
4. **export**: the int8 ONNX graph beside the checkpoint (``run/best/onnx``);
5. **heldout**: SQuAD 1.1 held-out EM/F1 with answers forced and SQuAD 2.0 held-out
   F1/HasAns/AUC/ECE, for the checkpoint and its int8 graph;
6. **baseline** (``--baseline``): the plain recipe (:data:`BASELINE`: Independent head, the whole
   pool, no additions) on the SQuAD 1.1 questions the reader starts from and its slice's (which
   the baseline, chosen on nothing, trains on), scored the same;
7. **card**: ``card.json`` and ``MODEL_CARD.md`` (data, recipe, commit, scores, CPU, times).

A stage's record is ``stages/NAME.json``; a stage with a record is not run again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structqa.config import Config, load_config, validate
from structqa.io import read_json, write_json
from structqa.paths import resolve_data_dir, resolve_data_file
from structqa.provenance import git_info
from structqa.reader.data import (
    HELDOUT_SQUAD1,
    HELDOUT_SQUAD2,
    POOL_FILE,
    TRAIN_FILE,
    data_summary,
    validation_settings,
)
from structqa.reader.members import RUN, member_dir, soup_members
from structqa.reader.timing import estimate_seconds, last_state, seconds_per_step
from structqa.runtime import cpu_kind, default_device
from structqa.training.progress import format_duration

log = logging.getLogger(__name__)

#: the reader's recipe, as ``structqa train`` settings, with its slice (:func:`validation_settings`:
#: 5 % of the passages, or whole held-out articles with ``--slice articles``). The head: Independent
#: scored above DyREx on the validation slice of the same pool with the same rewrites (79.79 vs
#: 78.87 F1, docs/results/squad2-reader); the optimiser: the full-pool recipe (docs/results/combos-
#: full) with 3 epochs, not 2: on that slice 77.29 against 76.21 F1, higher on each of 3 seeds
#: (docs/results/reader-screen-gpu); an identity SA sub-layer in every encoder layer: on the same
#: slice 79.02 against 77.94 F1 (seed 0, docs/results/reader-screen-cpu-sa; it reads about 1.5x
#: slower)
RECIPE: tuple[str, ...] = (
    "model.encoder=default",
    "model.head=independent",
    "model.block=[sa,sa,ffn]",
    "model.null_head=span",
    "data.train_size=all",
    "data.dedupe_ids=true",
    "train.lr=1e-4",
    "train.head_lr=1e-3",
    "train.epochs=3",
    "train.batch_size=12",
    "train.warmup_ratio=0.1",
    "train.eval_every_epoch=true",
    "train.save_every_steps=200",
    "decode.verifier=auto",
)


#: the plain baseline: configs/combos/full-pool.yaml's Independent recipe (whole pool, no
#: validation slice, scored after the last epoch)
BASELINE: tuple[str, ...] = (
    "model.encoder=default",
    "model.head=independent",
    "data.validation=none",
    "data.train_size=all",
    "train.lr=1e-4",
    "train.head_lr=1e-3",
    "train.epochs=2",
    "train.batch_size=12",
    "train.warmup_ratio=0.1",
    "train.eval_every_epoch=false",
    "train.save_every_steps=200",
)

#: the validation slice, written beside the run (run/validation.v2.json)
VALIDATION_FILE = "validation.v2.json"

STAGES = ("data", "train", "calibrate", "export", "heldout", "baseline", "card")


@dataclass
class BuildOptions:
    out: Path
    seed: int = 0
    data_dir: str | None = None
    baseline: bool = False
    progress: bool = True
    overrides: tuple[str, ...] = ()
    command: str = "structqa reader build"
    heldout_size: int | None = None
    members: int = 2
    slice: str = "passages"  # or "articles": see structqa.reader.data


class Stopped(Exception):
    """A training stage stopped before finishing (SIGINT/SIGTERM): run the command again."""


def _record_path(out: Path, stage: str) -> Path:
    return out / "stages" / f"{stage}.json"


def done(out: Path, stage: str) -> dict[str, Any] | None:
    """A finished stage's record, or None."""
    path = _record_path(out, stage)
    return json.loads(path.read_text()) if path.is_file() else None


def _drop_if_offset_changed(out: Path, slice_kind: str = "passages") -> None:
    """A build calibrated at another threshold offset (one from before it had any: 0) is
    calibrated, exported (the int8 graph carries a copy of the calibration) and scored again;
    its training stands."""
    from structqa.reader.calibrate import recipe_offset

    offset = recipe_offset(slice_kind)

    record = done(out, "calibrate")
    if record is None or record.get("skipped"):
        return
    asked = record.get("threshold_offset_asked", record.get("threshold_offset", 0.0))
    if asked == offset:
        return
    log.info(
        "reader build: calibrated with threshold offset %s, the recipe's is %s: calibrating, "
        "exporting and scoring again",
        asked,
        offset,
    )
    for stage in ("calibrate", "export", "heldout"):
        _record_path(out, stage).unlink(missing_ok=True)


def _run_stage(
    opts: BuildOptions, stage: str, body: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    record = done(opts.out, stage)
    if record is not None:
        log.info("reader build: %s already done (%s)", stage, _record_path(opts.out, stage))
        return record
    log.info("reader build: %s", stage)
    # the stage's time over every start: a stopped start's seconds wait in stages/STAGE.spent
    spent_file = _record_path(opts.out, stage).with_suffix(".spent")
    spent = float(json.loads(spent_file.read_text())) if spent_file.is_file() else 0.0
    t0 = time.perf_counter()
    try:
        record = body()
    except BaseException:
        try:
            write_json(spent_file, round(spent + time.perf_counter() - t0, 1))
        except OSError:  # (a full disk: the stage's own error is the one to see)
            log.warning("reader build: %s's time so far could not be saved", stage)
        raise
    record["seconds"] = round(spent + time.perf_counter() - t0, 1)
    # the code that finished the stage: a build resumed across commits shows each on its card
    record["commit"] = git_info()
    write_json(_record_path(opts.out, stage), record)
    spent_file.unlink(missing_ok=True)
    return record


def train_config(
    opts: BuildOptions,
    recipe: tuple[str, ...],
    train_file: Path,
    run: str,
    extra: tuple[str, ...] = (),
    seed: int | None = None,
) -> Config:
    """The training config of the reader (or the baseline) in ``opts.out/run``, at ``seed``
    (default: the build's)."""
    overrides = [
        *recipe,
        *extra,
        f"data.train={train_file.resolve()}",
        f"train.seed={opts.seed if seed is None else seed}",
        f"train.output_dir={opts.out / run}",
        *opts.overrides,
    ]
    if opts.data_dir:
        overrides.append(f"data.dir={opts.data_dir}")
    return validate(load_config(None, overrides))  # a bad setting stops before any work


def _trained(cfg: Config) -> bool:
    """Whether the run in cfg's output directory finished its training (its record may not)."""
    return bool((last_state(cfg) or {}).get("finished"))


def _train(cfg: Config, progress: bool) -> dict[str, Any]:
    from structqa.calibration.report import CalibrateOnce
    from structqa.training.loop import StopFlag, run

    output = Path(cfg.train.output_dir)
    calibrate = CalibrateOnce()
    StopFlag.received = None
    # the build owns its output directory: whatever a stopped run left there is resumed
    # (nothing resumable, e.g. a stop during its first save: a fresh start)
    result = run(cfg, resume=True, progress=progress, calibrate=calibrate)
    if not _trained(cfg):
        raise Stopped(f"training in {output} stopped before finishing")
    if StopFlag.received is not None:  # a signal in the run's last step or evaluation
        StopFlag.received = None
        raise Stopped(f"training in {output} finished as it was asked to stop")
    cal = calibrate.done(cfg)
    validation = None
    if cfg.data.validation is not None:
        validation = str(_write_validation(cfg, output / VALIDATION_FILE))
    return {
        "validation_file": validation,
        "checkpoint": str(output / "best"),
        # the run's training time over every start (a stopped and resumed run, or one an
        # earlier command trained), which the stage's own seconds do not see
        "training_seconds": (last_state(cfg) or {}).get("seconds"),
        # best/'s validation scores: this start's evaluation, else (the run finished, or its
        # best epoch came, before this start) the scores saved with best/
        "validation": dict(result.metrics) if result is not None else _saved_metrics(output),
        "calibration": None
        if cal is None
        else {
            "method": cal.method,
            "null_threshold": cal.null_threshold,
            "verifier": None if cal.verifier is None else cal.verifier.names,
            "fit": cal.fit,
        },
    }


def _saved_metrics(output: Path) -> dict[str, Any] | None:
    path = output / "best" / "metrics.json"
    return read_json(path) if path.is_file() else None


def _write_validation(cfg: Config, path: Path) -> Path:
    """The validation slice that chose and calibrated the reader, as SQuAD 2.0 JSON: labelled
    questions it never trained on, e.g. to fit a collection's no-answer decision on."""
    from structqa.data.squad_json import write_squad_json
    from structqa.training.data import load_validation_examples

    examples, _ = load_validation_examples(cfg)
    write_squad_json(path, examples)
    return path


def _heldout(
    checkpoint: Path,
    out: Path,
    data: Path,
    runtimes: tuple[str, ...],
    size: int | None = None,
    tune: bool = False,
) -> dict:
    """SQuAD 1.1 held-out (answers forced) and SQuAD 2.0 held-out scores per runtime; ``tune``
    (the baseline, which has no validation slice to fit one on): SQuAD 2.0's no-answer
    threshold tuned on the held-out file itself, a ceiling, as its card row says."""
    from structqa.prediction.scoring import evaluate_checkpoint

    scores: dict[str, Any] = {}
    files = {"squad1": HELDOUT_SQUAD1, "squad2": HELDOUT_SQUAD2}
    for runtime in runtimes:
        for name, file in files.items():
            path = resolve_data_file(file, data)
            # SQuAD 1.1 has no unanswerable question: every question gets its best span
            extra = ["decode.version_2=false"] if name == "squad1" else []
            metrics = evaluate_checkpoint(
                checkpoint,
                str(path),
                out / f"{name}-{runtime}",
                runtime,
                overrides=extra,
                eval_size=size,
                tune_threshold=tune and name == "squad2",
            )
            scores[f"{name}/{runtime}"] = metrics
            log.info(
                "%s held-out, %s: %s",
                name,
                runtime,
                {k: round(metrics[k], 2) for k in ("exact_match", "exact", "f1") if k in metrics},
            )
    return scores


def _check_members(opts: BuildOptions) -> None:
    """Refuse to go on with a build in ``opts.out`` made with another ``--members``."""
    record = done(opts.out, "train")
    built = None if record is None else len(record.get("members") or [None])
    single = (opts.out / RUN / "last").exists()
    soup = (opts.out / "members").exists()
    if (
        built is not None
        and built != opts.members
        or (opts.members > 1 and single)
        or (opts.members == 1 and soup)
    ):
        was = built or (1 if single else "several")
        raise ValueError(
            f"{opts.out} holds a reader built with --members {was}, not {opts.members}: build "
            "into another --out, or run the same command as before"
        )


#: what :func:`_train` records of a run (the rest of a stage record is its scores)
TRAINED_KEYS = ("validation_file", "checkpoint", "training_seconds", "validation", "calibration")
OPTIONS_FILE = "build.json"  # the options a build in this folder was started with


def _check_options(opts: BuildOptions) -> None:
    """Refuse to go on with a build in ``opts.out`` started with another seed, number of
    members or recipe settings (its stages would mix two readers, and its card describe the
    wrong one); record them when the build starts. ``--heldout-size`` may change: the
    held-out stages are scored again."""
    path = opts.out / OPTIONS_FILE
    now = _options(opts)
    if not path.is_file():
        return  # (a build begun before the options were recorded: --members is checked)
    was = json.loads(path.read_text())

    def shown(value: Any) -> str:
        return (" ".join(value) or "none") if isinstance(value, list) else str(value)

    # a folder recorded before the slice was: passages (before the recipe was recorded too),
    # else articles (the recipe's default for a while)
    was.setdefault("slice", "articles" if "recipe" in was else "passages")
    if "recipe" in was and was["recipe"] != now["recipe"]:
        raise ValueError(
            f"{opts.out} holds a reader built with another recipe (see its build.json), whose "
            "stages cannot go on with this version's: move or delete that folder to build "
            "here, or build into another --out and point $STRUCTQA_READER at it"
        )
    flags = {"seed": "--seed", "members": "--members", "slice": "--slice", "settings": "settings"}
    for key, flag in flags.items():
        if key in was and was[key] != now[key]:
            again = (
                f"give --slice {was[key]} to go on with it"
                if key == "slice"
                else "run the same command as before"
            )
            raise ValueError(
                f"{opts.out} holds a reader built with {flag} {shown(was[key])}, not "
                f"{shown(now[key])}: build into another --out, or {again}"
            )


def _options(opts: BuildOptions) -> dict[str, Any]:
    return {
        "seed": opts.seed,
        "members": opts.members,
        "settings": list(opts.overrides),
        "recipe": list(RECIPE),
        "slice": opts.slice,
    }


def _record_options(opts: BuildOptions) -> None:
    """Record the options of a build in a new folder, once its settings were found valid (a
    first start stopped by a mistyped setting must not lock the folder to it)."""
    path = opts.out / OPTIONS_FILE
    if not path.is_file() and done(opts.out, "train") is None:
        write_json(path, _options(opts))


def _drop_if_resized(opts: BuildOptions, stage: str) -> dict[str, Any] | None:
    """A held-out stage scored on another ``--heldout-size`` is scored again: its record is
    removed (and returned, for what it holds besides the scores)."""
    record = done(opts.out, stage)
    if record is not None and record.get("heldout_size") != opts.heldout_size:
        log.info(
            "reader build: %s was scored on %s held-out questions; scoring it on %s",
            stage,
            record.get("heldout_size") or "all",
            opts.heldout_size or "all",
        )
        _record_path(opts.out, stage).unlink()
        return record
    return None


def _say(text: str) -> None:
    print(text, flush=True)  # a log file gets the time estimate when it is made, not at the end


def build(opts: BuildOptions, say: Callable[[str], None] = _say) -> dict[str, Any]:
    """Run (or go on with) every stage; return the card."""
    from structqa.reader.calibrate import calibrate_stage
    from structqa.reader.card import write_card
    from structqa.reader.data import assemble
    from structqa.text.annotate import Annotator

    opts.out.mkdir(parents=True, exist_ok=True)
    _check_options(opts)
    data_dir = resolve_data_dir(opts.data_dir, "--data")
    data_out = opts.out / "data"

    def data_stage() -> dict[str, Any]:
        articles = opts.slice == "articles"
        counts = assemble(data_dir, data_out, Annotator().annotate, opts.seed, articles)
        return {
            "counts": counts.to_json(),
            "summary": counts.summary(),
            "dir": str(data_dir),
            "slice": opts.slice,
        }

    data = _run_stage(opts, "data", data_stage)
    # the data stage wrote the training file for one slice (a record without it: articles
    # where it held some out)
    made_for = data.get("slice") or (
        "articles" if data["counts"].get("slice_articles") else "passages"
    )
    if made_for != opts.slice:
        raise ValueError(
            f"{opts.out} holds training data made for --slice {made_for}, not {opts.slice}: "
            f"give --slice {made_for} to go on with it, or build into another --out"
        )
    say(f"data: {data_summary(data)}")
    held_out = int(data["counts"].get("slice_questions") or 0)
    validation = validation_settings(data_out, held_out)
    if held_out and any(o.startswith("data.validation=") for o in opts.overrides):
        log.warning(
            "reader build: data.validation is set, so the reader is chosen there; the %d "
            "questions of the held-out articles stay out of its training all the same",
            held_out,
        )
    cfg = train_config(opts, RECIPE, data_out / TRAIN_FILE, "run", validation)
    # the baseline is scored once on the SQuAD 1.1 held-out split after its last epoch, as the
    # full-pool runs were (no choice is made on it)
    squad1 = resolve_data_file(HELDOUT_SQUAD1, data_dir).resolve()
    base_cfg = train_config(
        opts, BASELINE, data_out / POOL_FILE, "baseline", (f"data.eval={squad1}",)
    )
    member_cfgs = [cfg]
    if opts.members > 1:
        member_cfgs = [
            train_config(
                opts,
                RECIPE,
                data_out / TRAIN_FILE,
                member_dir(i),
                (*validation, f"train.init_seed={opts.seed}"),
                seed=opts.seed + i,
            )
            for i in range(opts.members)
        ]
    _check_members(opts)
    _record_options(opts)  # (the configs above checked every setting)
    left = [m for m in member_cfgs if not _trained(m)]
    if done(opts.out, "train") is None and left:
        step, length = seconds_per_step(cfg)
        total = sum(estimate_seconds(data["counts"]["total"], m, step, held_out) for m in left)
        if opts.baseline and done(opts.out, "baseline") is None:
            total += estimate_seconds(data["counts"]["pool"], base_cfg, step)
        device = default_device()
        where = "GPU" if device.type == "cuda" else f"this CPU ({cpu_kind()})"
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        if device.type != "cuda" and load > cores:  # the step was timed beside other work
            where += f", measured while busy: load {load:.1f} on {cores} cores"
        say(
            f"training will take about {format_duration(total)} on {where}"
            + (f" ({len(left)} of {opts.members} runs to train)" if opts.members > 1 else "")
            + ": "
            f"{step:.2f} s per step of {cfg.train.batch_size} windows of {length} tokens "
            "measured now; stop it "
            "at any time and run the same command again to go on"
        )

    def train_stage() -> dict[str, Any]:
        if opts.members == 1:
            return _train(cfg, opts.progress)
        records = [
            _run_stage(opts, f"member-{i}", lambda m=m: _train(m, opts.progress))
            for i, m in enumerate(member_cfgs)
        ]
        return soup_members(opts.out, member_cfgs, records)

    trained = _run_stage(opts, "train", train_stage)
    checkpoint = Path(trained["checkpoint"])
    if done(opts.out, "calibrate") is None and done(opts.out, "heldout") is not None:
        log.info("reader build: held-out scores taken before the calibrate stage: scoring again")
        _record_path(opts.out, "heldout").unlink()
    _drop_if_offset_changed(opts.out, opts.slice)
    _run_stage(opts, "calibrate", lambda: calibrate_stage(trained, cfg, data_dir, opts.slice))

    def export_stage() -> dict[str, Any]:
        from structqa.runtimes.onnx_export import export_onnx

        exported = export_onnx(checkpoint, checkpoint / "onnx", "int8")
        return {"dir": str(exported.directory), "sizes": exported.sizes}

    _run_stage(opts, "export", export_stage)
    heldout_dir = opts.out / "heldout"
    _drop_if_resized(opts, "heldout")
    _run_stage(
        opts,
        "heldout",
        lambda: {
            **_heldout(
                checkpoint,
                heldout_dir / "reader",
                data_dir,
                ("torch", "onnx-int8"),
                opts.heldout_size,
            ),
            "heldout_size": opts.heldout_size,
        },
    )
    if opts.baseline:
        rescored = _drop_if_resized(opts, "baseline")

        def baseline_stage() -> dict[str, Any]:
            # scored again for another --heldout-size: its training as recorded, not read,
            # featurized and checked again (minutes for the SQuAD 1.1 pool)
            trained = (
                {k: v for k, v in rescored.items() if k in TRAINED_KEYS}
                if rescored is not None and _trained(base_cfg)
                else _train(base_cfg, opts.progress)
            )
            best = Path(trained["checkpoint"])
            return {
                **trained,
                **_heldout(
                    best, heldout_dir / "baseline", data_dir, ("torch",), opts.heldout_size, True
                ),
                "heldout_size": opts.heldout_size,
            }

        _run_stage(opts, "baseline", baseline_stage)
    records = {stage: done(opts.out, stage) for stage in STAGES}
    # the slice named within the build's folder (its absolute path is in card.json's config)
    shown = [v.replace(str(opts.out.resolve()) + os.sep, "") for v in validation]
    at = RECIPE.index("model.null_head=span") + 1  # where the recipe always named its slice
    recipe = [*RECIPE[:at], *shown, *RECIPE[at:], *opts.overrides]
    card = write_card(
        opts.out, opts.command, recipe, records, cfg, base_cfg if opts.baseline else None
    )
    say(f"the reader is {checkpoint}; its card: {opts.out / 'MODEL_CARD.md'}")
    return card
