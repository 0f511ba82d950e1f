"""Experiment configs: a base config, grid axes and named variants, expanded into named runs.

An experiment YAML holds ``name``, ``kind`` (what a run trains: ``extractive``, the default, with
:class:`structqa.config.Config` and ``structqa train``; or ``drop``, with
:class:`structqa.ncbert.config.DropConfig` and ``structqa drop-train``), ``base`` (a mapping
shaped like that config), ``grid`` (dotted config key -> list of values; their product),
``variants`` (named override mappings for axes that are not a product), ``table`` (how results
are aggregated), and optionally ``seeds_if_noisy``, ``validation`` (extractive only) and
``pretrain`` (masked-LM pre-training arms that runs fine-tune from). Every
key is checked when the file is loaded: an unknown key is a
:class:`~structqa.config.ConfigError` naming the closest valid one, and every run's full config
is validated.

Pre-training arms: ``pretrain: {base: PRETRAIN.yaml | mapping, arms: {NAME: {dotted: value}}}``
declares ``structqa pretrain`` configs (the base with each arm's overrides, validated when the
file is loaded); a run whose ``model.encoder`` is ``pretrain:NAME`` fine-tunes that arm's
``final/`` checkpoint, and the runner pre-trains the arm first if it has not been (once per arm,
resumably). One command then reproduces a whole pre-train-then-fine-tune table.

Shared runs: ``reuse: [docs/results/OTHER]`` names the results directories of other
experiments; a run whose full config (all but ``train.output_dir`` and ``data.dir``) equals a
finished run's there, trained on the same kind of device in the same number format, takes that
result (marked ``reused_from``) instead of training again, e.g.
the query-mask grid's static and default-mask cells at 1024 questions are the heads grid's.

Runs come out in a deterministic order: variants in file order (outermost), then the product of
the grid axes in file order (the first axis outermost, the last one varying fastest). A run's
name is its axis values, ``label=value`` joined by commas (``head=dyrex,train_size=512,seed=1``).
"""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from structqa.config import Config, ConfigError, config_from_dict
from structqa.experiments.results import LAST_PREFIX
from structqa.experiments.spec import (
    KINDS,
    RUNNER_KEYS,
    SEED_KEY,
    VARIANT,
    Experiment,
    NoisySeeds,
    PretrainSpec,
    TableSpec,
    ValidationSpec,
    config_commands,
    flatten,
    format_value,
    lookup,
    merge_over,
    misplaced_key,
    nested,
    pretrain_arm,
)

TOP_KEYS = (
    "name",
    "kind",
    "description",
    "base",
    "grid",
    "variants",
    "table",
    "seeds_if_noisy",
    "validation",
    "pretrain",
    "reuse",
)
PRETRAIN_KEYS = ("base", "arms")
TABLE_KEYS = (
    "rows",
    "columns",
    "metrics",
    "summary",
    "summary_names",
    "title",
    "baseline",
    "contrasts",
)
NOISY_KEYS = ("std_above", "seeds", "metric", "also", "pair_baseline")
VALIDATION_KEYS = ("fraction", "seed")


def _did_you_mean(key: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, list(options), n=1, cutoff=0.4)
    return f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(options)}"


def _check_keys(mapping: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}{_did_you_mean(str(key), allowed)}")


def _resolve_value(key: str, value: Any, where: str, cls: type = Config) -> Any:
    """Validate ``key=value`` against the config class and return the value as it stores it."""
    if "." not in key:
        raise ConfigError(f"{where}: {key!r} must be a dotted key like 'model.head'")
    if key in RUNNER_KEYS:
        raise ConfigError(f"{where}: {key!r} is set by the runner (see --runs-dir / --data)")
    try:
        cfg = config_from_dict(nested({key: value}), cls=cls)
    except ConfigError as err:  # the message names the key: ``where`` need not say it again
        at = where.removesuffix(f".{key}")
        raise ConfigError(f"{at}: {misplaced_key(key, cls) or err}") from None
    return lookup(cfg, key)


def _labels(keys: Sequence[str]) -> dict[str, str]:
    """Short labels: the last part of a dotted key, or the whole key where two would clash."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {
        k: (s if last.count(s) == 1 and s != VARIANT else k)
        for k, s in zip(keys, last, strict=True)
    }


def _parse_grid(raw: Any, where: str, cls: type) -> dict[str, list[Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of dotted keys to lists of values")
    axes: dict[str, list[Any]] = {}
    for key, values in flatten(raw).items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}: expected a non-empty list of values")
        resolved = [_resolve_value(key, v, f"{where}.{key}", cls) for v in values]
        shown = [format_value(v) for v in resolved]
        if len(set(shown)) != len(shown):
            raise ConfigError(f"{where}.{key}: repeated values {shown}")
        axes[key] = resolved
    return axes


def _parse_variants(
    raw: Any, axes: Mapping[str, Any], where: str, cls: type
) -> list[tuple[str, dict[str, Any]]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: expected a non-empty list of mappings with a 'name'")
    out: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping) or not item.get("name"):
            raise ConfigError(f"{at}: each variant is a mapping with a 'name'")
        name = str(item["name"])
        if name != format_value(name) or "," in name or "=" in name:
            raise ConfigError(f"{at}: variant name {name!r} may not contain / \\ , or =")
        if name in {n for n, _ in out}:
            raise ConfigError(f"{at}: repeated variant name {name!r}")
        overrides = flatten({k: v for k, v in item.items() if k != "name"})
        resolved = {}
        for key, value in overrides.items():
            if key in axes:
                raise ConfigError(f"{at}: {key!r} is also a grid axis; set it in one place")
            resolved[key] = _resolve_value(key, value, f"{at}.{key}", cls)
        config_from_dict(nested(resolved), cls=cls)  # the variant's keys together
        out.append((name, resolved))
    return out


def _parse_table(
    raw: Any,
    cell_keys: Sequence[str],
    where: str,
    default_metrics: Sequence[str] = ("f1", "em"),
    cls: type = Config,
    known_metrics: frozenset[str] = frozenset(),
) -> TableSpec:
    if raw is None:
        raw = {"rows": list(cell_keys)[:1] or [VARIANT]} if cell_keys else {"rows": []}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping (rows, columns, metrics, summary)")
    _check_keys(raw, TABLE_KEYS, where)
    rows = raw.get("rows", [])
    rows = [rows] if isinstance(rows, str) else list(rows)
    columns = raw.get("columns")
    used = [*rows, *([columns] if columns else [])]
    for key in used:
        if key not in cell_keys:
            raise ConfigError(
                f"{where}: {key!r} is not a grid key{_did_you_mean(key, cell_keys)}"
                if cell_keys
                else f"{where}: {key!r}: this experiment has no grid axes besides the seed"
            )
    missing = [k for k in cell_keys if k not in used]
    if missing:
        raise ConfigError(
            f"{where}: grid keys {missing} are neither rows nor columns; only {SEED_KEY!r} "
            "may be averaged over"
        )
    metrics = raw.get("metrics", list(default_metrics))
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    if not metrics:
        raise ConfigError(f"{where}.metrics: name at least one metric (f1, em, ...)")
    for m in map(str, metrics):
        _check_metric(m, f"{where}.metrics", known_metrics)
    baseline = None
    if "baseline" in raw:  # (present: `baseline: null` names a row whose value is null)
        if not rows:
            raise ConfigError(f"{where}.baseline: a baseline is a row; this table has no rows")
        baseline = _baseline_label(raw["baseline"], rows, f"{where}.baseline", cls)
    contrasts = _parse_contrasts(raw.get("contrasts"), rows, f"{where}.contrasts", cls)
    names = raw.get("summary_names") or {}
    if not isinstance(names, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in names.items()
    ):
        raise ConfigError(
            f"{where}.summary_names: expected a mapping of row labels to the names "
            'summary.json gives them, e.g. {dyrex.minilm: "dyrex/minilm"}'
        )
    if len(set(names.values())) != len(names):
        raise ConfigError(f"{where}.summary_names: two rows would get the same name")
    return TableSpec(
        rows=tuple(rows),
        columns=columns,
        metrics=tuple(str(m) for m in metrics),
        summary=bool(raw.get("summary", False)),
        summary_names=dict(names),
        title=str(raw.get("title", "")),
        baseline=baseline,
        contrasts=contrasts,
    )


def _parse_contrasts(
    raw: Any, rows: Sequence[str], where: str, cls: type
) -> tuple[tuple[str, str], ...]:
    """``[[a, b], ...]``: each a pair of row labels, each label as a baseline is given."""
    if raw is None:
        return ()
    if not rows:
        raise ConfigError(f"{where}: a contrast compares two rows; this table has no rows")
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of [row, row] pairs, got {raw!r}")
    out = []
    for i, pair in enumerate(raw):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ConfigError(
                f"{where}[{i}]: expected [row, row] (first minus second), got {pair!r}"
            )
        first, second = (_baseline_label(side, rows, f"{where}[{i}]", cls) for side in pair)
        if first == second:
            raise ConfigError(f"{where}[{i}]: both sides are the row {first!r}")
        out.append((first, second))
    return tuple(out)


def _check_row(label: str, row_labels: Sequence[str], where: str) -> None:
    if label not in row_labels:
        close = difflib.get_close_matches(label, row_labels, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{where}: {label!r} is not a row; rows: {', '.join(map(repr, row_labels))}{hint}"
        )


def _baseline_label(raw: Any, rows: Sequence[str], where: str, cls: type) -> str:
    """The row label a baseline names, each part read as its row key's config type (so that
    YAML's string "1e-4" is the row of train.lr 0.0001). Several row keys: a list, one value
    per key."""
    values = list(raw) if isinstance(raw, list) and len(rows) > 1 else [raw]
    if len(values) != len(rows):
        raise ConfigError(f"{where}: give one value per row key {list(rows)}, got {raw!r}")
    parts = [
        str(value) if key == VARIANT else _row_value(key, value, where, cls)
        for key, value in zip(rows, values, strict=True)
    ]
    return ",".join(parts)


def _row_value(key: str, value: Any, where: str, cls: type) -> str:
    """A row key's value as its row label writes it; one the key cannot take at all (a choice
    outside its names) is kept as given, so that the row check names the rows it could be."""
    try:
        return format_value(_resolve_value(key, value, where, cls))
    except ConfigError:
        return str(value)


def _check_metric(m: str, where: str, known_metrics: frozenset[str]) -> None:
    name = m[len(LAST_PREFIX) :] if m.startswith(LAST_PREFIX) else m
    if known_metrics and name not in known_metrics:
        close = difflib.get_close_matches(name, sorted(known_metrics), n=1, cutoff=0.4)
        raise ConfigError(
            f"{where}: unknown metric {m!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; known: {', '.join(sorted(known_metrics))} (each also as last_NAME)"
        )


def _parse_noisy(
    raw: Any,
    axes: Mapping[str, list[Any]],
    where: str,
    cell_keys: Sequence[str] = (),
    cls: type = Config,
    variant_names: Sequence[str] = (),
    known_metrics: frozenset[str] = frozenset(),
) -> NoisySeeds | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping {{std_above: 2.0, seeds: [3, 4]}}")
    _check_keys(raw, NOISY_KEYS, where)
    if SEED_KEY not in axes:
        raise ConfigError(f"{where}: needs {SEED_KEY!r} as a grid axis")
    try:
        threshold = float(raw["std_above"])
        seeds = tuple(int(s) for s in raw["seeds"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(
            f"{where}: needs std_above (a number) and seeds (a list of ints)"
        ) from None
    if not seeds or set(seeds) & set(axes[SEED_KEY]) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}.seeds: give new seeds, distinct from the grid's {SEED_KEY}")
    if not math.isfinite(threshold) or threshold < 0:
        raise ConfigError(f"{where}.std_above: expected a non-negative number")
    also = []
    for i, item in enumerate(raw.get("also") or []):
        at = f"{where}.also[{i}]"
        if not isinstance(item, Mapping) or set(item) != set(cell_keys):
            raise ConfigError(
                f"{at}: expected a cell, a mapping of exactly {list(cell_keys)} to values"
            )
        labels = []
        for key in cell_keys:
            value = item[key] if key == VARIANT else _resolve_value(key, item[key], at, cls)
            if key == VARIANT and value not in variant_names:
                raise ConfigError(f"{at}.variant: {value!r} is not one of {variant_names}")
            if key != VARIANT and value not in axes[key]:
                raise ConfigError(f"{at}.{key}: {value!r} is not one of the grid's {axes[key]}")
            labels.append(format_value(value))
        also.append(tuple(labels))
    pair = raw.get("pair_baseline", False)
    if not isinstance(pair, bool):
        raise ConfigError(f"{where}.pair_baseline: expected true or false, got {pair!r}")
    metric = str(raw.get("metric", "f1"))
    _check_metric(metric, f"{where}.metric", known_metrics)
    return NoisySeeds(threshold, seeds, metric, tuple(also), pair)


def _parse_reuse(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
        raise ConfigError(
            f"{where}: expected a list of results directories (e.g. [docs/results/lowdata]), "
            f"got {raw!r}"
        )
    return tuple(items)


def _parse_validation(raw: Any, where: str) -> ValidationSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping {{fraction: 0.2, seed: 1234}}")
    _check_keys(raw, VALIDATION_KEYS, where)
    try:
        fraction, seed = float(raw["fraction"]), int(raw.get("seed", 0))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{where}: needs fraction (a number in (0, 1)) and seed") from None
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"{where}.fraction: must be between 0 and 1, got {fraction}")
    return ValidationSpec(fraction, seed)


def _parse_pretrain(raw: Any, where: str) -> PretrainSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping {{base: FILE.yaml, arms: {{NAME: ...}}}}")
    _check_keys(raw, PRETRAIN_KEYS, where)
    base_raw = raw.get("base") or {}
    base_file = ""
    if isinstance(base_raw, str):
        base_file = base_raw
        path = Path(base_raw)
        if not path.is_file():
            raise ConfigError(
                f"{where}.base: {base_raw} does not exist (paths are relative to the working "
                "directory, the repository root for the shipped configs)"
            )
        base_raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(base_raw, Mapping):
        raise ConfigError(f"{where}.base: expected a pretrain YAML file or a mapping")
    base = copy.deepcopy(dict(base_raw))
    arms_raw = raw.get("arms")
    if not isinstance(arms_raw, Mapping) or not arms_raw:
        raise ConfigError(f"{where}.arms: expected a mapping of arm names to overrides")
    arms: dict[str, dict[str, Any]] = {}
    for name, overrides in arms_raw.items():
        at = f"{where}.arms.{name}"
        if str(name) != format_value(str(name)) or "," in str(name) or "=" in str(name):
            raise ConfigError(f"{at}: an arm name may not contain / \\ , or =")
        if overrides is not None and not isinstance(overrides, Mapping):
            raise ConfigError(f"{at}: expected a mapping of dotted keys to values")
        flat = flatten(overrides or {})
        for key in flat:
            if "." not in key:
                raise ConfigError(f"{at}: {key!r} must be a dotted key like 'masking.scheme'")
            if key in RUNNER_KEYS:
                raise ConfigError(f"{at}: {key!r} is set by the runner")
        arms[str(name)] = flat
    spec = PretrainSpec(base_file, base, arms)
    for name in arms:
        try:
            spec.config_for(name)
        except ConfigError as err:
            raise ConfigError(f"{where}.arms.{name}: {err}") from None
    return spec


def experiment_from_dict(data: Mapping[str, Any], source: str = "") -> Experiment:
    where = source or "experiment"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: the top level must be a mapping")
    stray = {k: v for k, v in data.items() if k not in TOP_KEYS}  # model:, train:, ...?
    if stray and (commands := config_commands(stray)):
        keys = ", ".join(map(str, stray))
        if len(stray) < len(data):
            raise ConfigError(
                f"{where}: {keys} at the top level: an experiment sets its runs' config under "
                f"base (base: {{{next(iter(stray))}: ...}}), grid or variants"
            )
        raise ConfigError(
            f"{where} is not an experiment grid (it has {keys} and no name, base, grid or "
            f"variants): it looks like a config for {' or '.join(f'`{c}`' for c in commands)}: "
            f"run `{commands[0]} {source or 'FILE'}`"
        )
    _check_keys(data, TOP_KEYS, where)
    name = data.get("name")
    if not name or format_value(str(name)) != str(name):
        raise ConfigError(f"{where}: needs a 'name' (used in paths; no slashes)")
    kind_name = str(data.get("kind", "extractive"))
    if kind_name not in KINDS:
        hint = _did_you_mean(kind_name, list(KINDS))
        raise ConfigError(f"{where}.kind: unknown kind {kind_name!r}{hint}")
    kind = KINDS[kind_name]
    if kind.name != "extractive" and data.get("validation") is not None:
        raise ConfigError(f"{where}.validation: only extractive experiments split off validation")
    base = data.get("base") or {}
    if not isinstance(base, Mapping):
        raise ConfigError(f"{where}.base: expected a mapping shaped like the train config")
    try:
        base_cfg = config_from_dict(copy.deepcopy(dict(base)), cls=kind.config_cls)
    except ConfigError as err:
        hints = (misplaced_key(k, kind.config_cls) for k in flatten(base))
        raise ConfigError(f"{where}.base: {next(filter(None, hints), err)}") from None
    del base_cfg
    axes = _parse_grid(data.get("grid"), f"{where}.grid", kind.config_cls)
    variants = _parse_variants(data.get("variants"), axes, f"{where}.variants", kind.config_cls)
    labels = _labels(list(axes))
    cell_keys = ([VARIANT] if variants else []) + [k for k in axes if k != SEED_KEY]
    experiment = Experiment(
        name=str(name),
        source=source,
        base=copy.deepcopy(dict(base)),
        axes=axes,
        variants=variants,
        table=_parse_table(
            data.get("table"),
            cell_keys,
            f"{where}.table",
            kind.metrics,
            kind.config_cls,
            kind.known_metrics,
        ),
        description=str(data.get("description", "")),
        seeds_if_noisy=_parse_noisy(
            data.get("seeds_if_noisy"),
            axes,
            f"{where}.seeds_if_noisy",
            cell_keys,
            kind.config_cls,
            [name for name, _ in variants],
            kind.known_metrics,
        ),
        validation=_parse_validation(data.get("validation"), f"{where}.validation"),
        labels=labels,
        kind=kind.name,
        pretrain=_parse_pretrain(data.get("pretrain"), f"{where}.pretrain"),
        reuse=_parse_reuse(data.get("reuse"), f"{where}.reuse"),
    )
    runs = experiment.runs()
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: two runs would share a name; make the variant names unique")
    baseline = experiment.table.baseline
    row_labels = list(dict.fromkeys(",".join(r.cell(experiment.table.rows)) for r in runs))
    if baseline is not None:
        _check_row(baseline, row_labels, f"{where}.table.baseline")
        if len(row_labels) < 2:
            raise ConfigError(f"{where}.table.baseline: the table has no other row to compare")
    for i, pair in enumerate(experiment.table.contrasts):
        for label in pair:
            _check_row(label, row_labels, f"{where}.table.contrasts[{i}]")
    for label in experiment.table.summary_names:
        _check_row(label, row_labels, f"{where}.table.summary_names")
    noisy = experiment.seeds_if_noisy
    if noisy is not None and noisy.pair_baseline and baseline is None:
        raise ConfigError(
            f"{where}.seeds_if_noisy.pair_baseline: needs table.baseline (the row to pair with)"
        )
    for run in runs:  # every key was checked alone; check each full combination
        try:
            cfg = experiment.config_for(run)
        except ConfigError as err:
            at = experiment.origin(run, str(err))
            raise ConfigError(f"{where}{at}: run {run.name}: {err}") from None
        arm = pretrain_arm(str(getattr(cfg.model, "encoder", "")))
        if arm is not None and (experiment.pretrain is None or arm not in experiment.pretrain.arms):
            known = list(experiment.pretrain.arms) if experiment.pretrain else []
            raise ConfigError(
                f"{where}: run {run.name}: model.encoder names pre-training arm {arm!r}, "
                + (
                    f"not one of {known}{_did_you_mean(arm, known)}"
                    if known
                    else "but the experiment has no 'pretrain' section"
                )
            )
        if kind.name == "drop" and not cfg.data.test:
            raise ConfigError(
                f"{where}: run {run.name}: a drop experiment reports on data.test "
                "(e.g. drop/drop-contrast-sets.json); it is null"
            )
    return experiment


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment YAML file (with the file it ``extends:``, if any)."""
    path = Path(path)
    return experiment_from_dict(read_experiment_yaml(path), source=str(path))


def read_experiment_yaml(path: Path, _chain: tuple[Path, ...] = ()) -> Any:
    """The YAML of an experiment file, with ``extends: OTHER.yaml`` resolved: OTHER's mapping
    (itself possibly extending another) with this file's keys laid over it, mappings merged key
    by key and everything else (lists, values) replaced, so that a variant of a grid (more
    seeds for a GPU, say) states only what differs. OTHER is a path from the working directory
    (the repository root for the shipped configs) or from this file's folder."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, Mapping) or "extends" not in data:
        return data
    data = dict(data)
    parent_raw = data.pop("extends")
    if not isinstance(parent_raw, str) or not parent_raw:
        raise ConfigError(f"{path}.extends: expected the path of another experiment YAML")
    parent = Path(parent_raw)
    if not parent.is_file() and (path.parent / parent).is_file():
        parent = path.parent / parent
    if not parent.is_file():
        raise ConfigError(
            f"{path}.extends: {parent_raw} does not exist (a path from the working directory, "
            "the repository root for the shipped configs, or from this file's folder)"
        )
    chain = (*_chain, path.resolve())
    if parent.resolve() in chain:
        raise ConfigError(f"{path}.extends: {parent_raw} extends this file again (a cycle)")
    base = read_experiment_yaml(parent, chain)
    if not isinstance(base, Mapping):
        raise ConfigError(f"{parent}: the top level must be a mapping")
    if not data.get("name") or data.get("name") == base.get("name"):
        raise ConfigError(
            f"{path}: an experiment that extends {parent_raw} needs a 'name' of its own (its "
            "results and checkpoints go under that name)"
        )
    return merge_over(dict(base), data)
