"""Does a recorded result (or a started run, or a pre-training arm) still stand for the recipe
the experiment's YAML now gives? The runner refuses to run or tabulate a grid whose results were
made with another recipe, since a table would silently average the two; ``--dry-run`` lists them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from structqa.config import VERIFIER_AUTO, ConfigError, config_changes
from structqa.experiments.results import LAST_PREFIX
from structqa.experiments.spec import RUNNER_KEYS, Experiment, Run, flatten, plan, pretrain_arm
from structqa.experiments.store import Paths, config_file, read_json
from structqa.experiments.weights import local_weights, same_weights, weights_change
from structqa.training.checkpoint import RESUME_MAY_CHANGE

# not compared: the runner's paths, and values the trainer derives from compared ones
# (data.token_tags: null becomes exactly the tags model.encoder reads; any other value must
# equal them)
NOT_COMPARED = frozenset(RUNNER_KEYS) | {"data.token_tags"}
#: in a fine-tune run's output directory, and as ``pretrain_arm`` in its result: the recipe of
#: the pre-training arm it started from (an arm's own record may be deleted to retrain it)
ARM_RECORD = "pretrain_arm.json"


def arm_record(experiment: Experiment, arm: str) -> dict[str, Any]:
    assert experiment.pretrain is not None
    return {"name": arm, "config": experiment.pretrain.config_for(arm).to_dict()}


def run_arm(experiment: Experiment, run: Run) -> str | None:
    """The pre-training arm ``run`` fine-tunes from (``model.encoder: pretrain:ARM``), if any."""
    return pretrain_arm(str(getattr(experiment.config_for(run).model, "encoder", "")))


def arm_changes(
    experiment: Experiment, arm: str | None, record: Mapping[str, Any] | None
) -> str | None:
    """How the pre-training arm a run started from (``record``, where it recorded one)
    differs from ``arm``, the one the YAML now gives it: another arm (a new name for a new
    recipe), or the same arm's changed settings; None where it is the same."""
    if not record:
        return None
    was = str(record.get("name"))
    if arm != was:
        return f"pretrain:{was} (now {f'pretrain:{arm}' if arm else 'another encoder'})"
    if experiment.pretrain is None or arm not in experiment.pretrain.arms:
        return None  # (an unknown arm is refused where the grid is read)
    now = arm_record(experiment, arm)["config"]
    changed = [k for k, _, _ in config_changes(record.get("config") or {}, now, RESUME_MAY_CHANGE)]
    return f"pretrain:{arm} ({', '.join(changed)})" if changed else None


# settings added after results were recorded whose default is how those results were made
_DEFAULT_WHEN_MISSING = frozenset({"decode.whole_words"})
# settings added after results were recorded, with the value those results were made with
# where it is not the new default (before data.validation, best/ was chosen on data.eval)
VALUE_WHEN_MISSING: dict[str, Any] = {"data.validation": None}
# (setting, recorded value, value now) that mean the same recipe for a result whose questions
# were all answerable (no "NoAns_total" among its metrics): decode.verifier's default became
# "auto", which fits no verifier on such questions, as false did
SAME_WHEN_ALL_ANSWERABLE = frozenset({("decode.verifier", False, VERIFIER_AUTO)})


def stale_keys(experiment: Experiment, run: Run, result: Mapping[str, Any]) -> list[str]:
    """The settings whose value in a finished ``result`` differs from what the experiment's
    YAML now gives ``run`` (settings that the result's version of structqa did not have, runner
    paths and derived values are not compared; nor is the encoder
    of a run fine-tuned from a pre-training arm, a path the runner sets: the arm's own recipe
    is compared by :func:`stale_arms`). A local encoder (or ``model.init``) is compared by the
    digest of its weights where the result recorded one (:mod:`~structqa.experiments.weights`),
    else by its path. Empty when the result still stands for the recipe."""
    if "config" not in result:
        return []
    cfg = experiment.config_for(run)
    weights_now = local_weights(cfg)
    by_weights = same_weights(result, weights_now)
    arm = pretrain_arm(str(getattr(cfg.model, "encoder", ""))) is not None
    if arm:  # (the arm's own recipe is compared instead)
        by_weights.pop("model.encoder", None)
        weights_now = {k: v for k, v in weights_now.items() if k != "model.encoder"}
    skip: set[str] = set(by_weights)
    if arm:
        skip.add("model.encoder")
    if experiment.validation is not None:  # the runner's split files stand in for these
        skip |= {"data.train", "data.eval", "data.validation"}
    # A setting the recorded config lacks did not exist when it ran, and is not compared
    # (e.g. train.head_lr_exclude, a no-op for heads without the parameter it names); except
    # those in _DEFAULT_WHEN_MISSING, which changed every run's scores when set: a run from
    # before them behaved as their default.
    recorded = flatten(json.loads(json.dumps(result["config"])))
    now = flatten(json.loads(json.dumps(cfg.to_dict())))
    defaults = flatten(json.loads(json.dumps(type(cfg)().to_dict())))
    for key in _DEFAULT_WHEN_MISSING & (now.keys() - recorded.keys()):
        recorded[key] = defaults[key]
    for key in VALUE_WHEN_MISSING.keys() & (now.keys() - recorded.keys()):
        recorded[key] = VALUE_WHEN_MISSING[key]
    skip |= NOT_COMPARED
    metrics = result.get("metrics")
    if isinstance(metrics, Mapping) and "NoAns_total" not in metrics:
        skip |= {
            k
            for k, was, is_now in SAME_WHEN_ALL_ANSWERABLE
            if recorded.get(k) == was and now.get(k) == is_now
        }
    changed = [k for k in recorded.keys() & now.keys() if k not in skip and recorded[k] != now[k]]
    changed += [
        weights_change(k, result, weights_now)
        for k, same in by_weights.items()
        if not same and k not in NOT_COMPARED and k in now
    ]
    return sorted(changed)


def stale_partial(experiment: Experiment, paths: Paths, run: Run) -> list[str]:
    """For a started, unfinished run: the settings its checkpoint was trained with that the
    YAML now gives otherwise, except those a resume may change (RESUME_MAY_CHANGE, as the
    trainer allows). The trainer would refuse to resume it; empty when it can go on, or when
    there is no checkpoint yet (the trainer then starts the run afresh)."""
    last = paths.output(run) / "last"
    saved = read_json(last / "structqa_config.json")
    if not saved or not (last / "resume.pt").exists():
        return []
    changed = [
        k for k in stale_keys(experiment, run, {"config": saved}) if k not in RESUME_MAY_CHANGE
    ]
    record = read_json(paths.output(run) / ARM_RECORD)
    if record and (change := arm_changes(experiment, run_arm(experiment, run), record)):
        changed.append(change)
    return changed


def stale_arms(experiment: Experiment, paths: Paths) -> dict[str, list[str]]:
    """Pre-training arms whose recorded config differs from the YAML's: arm -> keys."""
    if experiment.pretrain is None:
        return {}
    out = {}
    for arm in experiment.pretrain.arms:
        recorded = read_json(paths.pretrain_output(arm) / "config.json") or read_json(
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
        arm = run_arm(experiment, run)
        if arm in arms:
            keys.append(f"pretrain:{arm} ({', '.join(arms[arm])})")
        elif change := arm_changes(experiment, arm, results[run.name].get("pretrain_arm")):
            keys.append(change)
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
        f"{config_file(experiment)}: {len(stale)} finished result(s) in {paths.results} were "
        f"trained with other values than the YAML now gives ({shown}{more}). Restore those "
        f"values, or move the results (runs/NAME.json) and their output directories in "
        f"{paths.runs} aside to train them again; `--dry-run` lists them as stale"
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
        chosen_on_eval = cfg.data.validation is None
        if cfg.train.eval_every_epoch and several and cfg.data.eval and chosen_on_eval:
            picked.append(cfg.data.eval)
    if not picked:
        return None
    files = ", ".join(dict.fromkeys(picked))
    return (
        f"{config_file(experiment)}: best/ is the epoch with the best F1 on data.eval ({files}) "
        "when a run trains more than one epoch, and the table scores best/ on that same file. "
        "If it is your test split, set "
        "train.eval_every_epoch: false (score once, after the last epoch), or choose on a "
        "slice of the training pool: data.validation: FRACTION (the default) or a "
        "`validation:` section"
    )
