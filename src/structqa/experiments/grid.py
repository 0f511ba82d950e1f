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
finished run's there takes that result (marked ``reused_from``) instead of training again, e.g.
the query-mask grid's static and default-mask cells at 1024 questions are the heads grid's.

Runs come out in a deterministic order: variants in file order (outermost), then the product of
the grid axes in file order (the first axis outermost, the last one varying fastest). A run's
name is its axis values, ``label=value`` joined by commas (``head=dyrex,train_size=512,seed=1``).
"""

from __future__ import annotations

import copy
import difflib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from structqa.config import Config, ConfigError, config_from_dict, mapping_fields
from structqa.config import validate as validate_extractive
from structqa.experiments.aggregate import (
    DROP_METRIC_NAMES,
    DROP_METRICS,
    EXTRACTIVE_METRIC_NAMES,
    LAST_PREFIX,
    metric_value,
    sample_std,
)
from structqa.ncbert.config import DropConfig
from structqa.ncbert.config import validate as validate_drop
from structqa.pretrain.config import PretrainConfig
from structqa.pretrain.config import validate as validate_pretrain

SEED_KEY = "train.seed"
VARIANT = "variant"  # the row/column key that means "the variant's name"
# Keys the runner sets itself, so a grid must not vary them.
RUNNER_KEYS = ("train.output_dir", "data.dir")
# mapping-valued fields of any config kind: values, not sections
MAPPING_KEYS = frozenset().union(
    *(mapping_fields(cls) for cls in (Config, DropConfig, PretrainConfig))
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
PRETRAIN_PREFIX = "pretrain:"  # model.encoder=pretrain:NAME -> that arm's final/ checkpoint
TABLE_KEYS = ("rows", "columns", "metrics", "summary", "title", "baseline", "contrasts")
NOISY_KEYS = ("std_above", "seeds", "metric", "also", "pair_baseline")
VALIDATION_KEYS = ("fraction", "seed")
_UNSAFE_NAME_CHARS = ("/", "\\", "\x00")


def _did_you_mean(key: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, list(options), n=1, cutoff=0.4)
    return f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(options)}"


def _check_keys(mapping: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}{_did_you_mean(str(key), allowed)}")


def nested(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"model.head": "dyrex"}`` -> ``{"model": {"head": "dyrex"}}``."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        parts = key.split(".")
        cur = out
        for part in parts[:-1]:
            nxt = cur.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"{key}: {part!r} is a value, not a section")
            cur = nxt
        cur[parts[-1]] = value
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"head": "dyrex"}}`` -> ``{"model.head": "dyrex"}``; a mapping-valued
    config field (``train.param_lr``) stays one value."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and dotted not in MAPPING_KEYS:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _lookup(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


@dataclass(frozen=True)
class Kind:
    """What the runs of an experiment train: the config class their keys refer to, the check
    of a whole config, and the table's metrics unless the YAML names them."""

    name: str
    config_cls: type
    check: Callable[[Any], Any]  # returns the config, raises ConfigError
    metrics: tuple[str, ...]
    known_metrics: frozenset[str] = frozenset()  # what a table may name (see aggregate)


KINDS = {
    "extractive": Kind(
        "extractive", Config, validate_extractive, ("f1", "em"), EXTRACTIVE_METRIC_NAMES
    ),
    "drop": Kind("drop", DropConfig, validate_drop, DROP_METRICS, DROP_METRIC_NAMES),
}


def _resolve_value(key: str, value: Any, where: str, cls: type = Config) -> Any:
    """Validate ``key=value`` against the config class and return the value as it stores it."""
    if "." not in key:
        raise ConfigError(f"{where}: {key!r} must be a dotted key like 'model.head'")
    if key in RUNNER_KEYS:
        raise ConfigError(f"{where}: {key!r} is set by the runner (see --runs-dir / --data)")
    try:
        cfg = config_from_dict(nested({key: value}), cls=cls)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    return _lookup(cfg, key)


def format_value(value: Any) -> str:
    """A value as it appears in run names and tables: ``3e-05``, ``null``, ``true``, ``512``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "+".join(format_value(v) for v in value)
    if isinstance(value, Mapping):  # e.g. train.param_lr: head.scorer.W:1e-05
        return "+".join(f"{format_value(k)}:{format_value(v)}" for k, v in value.items()) or "{}"
    text = str(value)
    for ch in _UNSAFE_NAME_CHARS:
        text = text.replace(ch, "_")
    return text


@dataclass(frozen=True)
class TableSpec:
    """How results become a table: one markdown row per value of ``rows`` (grid keys or
    ``variant``), one column per value of ``columns`` (or one column per metric without it);
    the remaining axis, ``train.seed``, is what mean and std are taken over."""

    rows: tuple[str, ...]
    columns: str | None = None
    metrics: tuple[str, ...] = ("f1", "em")
    summary: bool = False  # also write summary.json: {row: {column: {f1_mean, ...}}}
    title: str = ""
    # a row label (several row keys: their labels joined by commas): table.md also shows
    # every other row's difference from it, paired by seed (same seed = same training subset)
    baseline: str | None = None
    # (row, row) label pairs: table.md also shows the first row minus the second, paired by
    # seed, each pair listed (comparisons between two non-baseline rows, e.g. anna - token-mlm)
    contrasts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NoisySeeds:
    """Cells whose seed std of ``metric`` over the grid's own seeds exceeds ``std_above`` get
    runs with ``seeds`` too, once all of the grid's seeds of that cell have finished."""

    std_above: float
    seeds: tuple[int, ...]
    metric: str = "f1"
    # cells (label tuples in cell_keys order) that get the extra seeds whatever their std,
    # e.g. a comparison the YAML says needs more pairs; stated in the YAML with the reason
    also: tuple[tuple[str, ...], ...] = ()
    # when a cell gets the extra seeds, the table's baseline row in the same column gets them
    # too, so that every extra seed has its pair (same seed = same training subset)
    pair_baseline: bool = False


@dataclass(frozen=True)
class ValidationSpec:
    """Split the training file by context: train on one part, evaluate on ``fraction``."""

    fraction: float
    seed: int


@dataclass(frozen=True)
class PretrainSpec:
    """Masked-LM pre-training arms: a base ``structqa pretrain`` config and per-arm overrides."""

    base_file: str  # the base YAML as written in the experiment ("" when given inline)
    base: dict[str, Any]
    arms: dict[str, dict[str, Any]]  # name -> dotted overrides, file order

    def config_for(self, arm: str) -> PretrainConfig:
        """The arm's full config, validated (before the runner sets output_dir and data.dir)."""
        cfg = config_from_dict(_merge(self.base, nested(self.arms[arm])), cls=PretrainConfig)
        return validate_pretrain(cfg)


def pretrain_arm(encoder: str) -> str | None:
    """``NAME`` for ``model.encoder: pretrain:NAME``, else None."""
    return encoder[len(PRETRAIN_PREFIX) :] if encoder.startswith(PRETRAIN_PREFIX) else None


@dataclass(frozen=True)
class Run:
    """One training run of an experiment."""

    name: str
    values: dict[str, Any]  # dotted key -> value (the config's type), plus "variant" -> name
    overrides: dict[str, Any]  # dotted key -> value, what is applied to the base config
    seed: int
    extra: bool = False  # added by seeds_if_noisy

    def label(self, key: str) -> str:
        return format_value(self.values[key])

    def cell(self, keys: Sequence[str]) -> tuple[str, ...]:
        return tuple(self.label(k) for k in keys)


@dataclass(frozen=True)
class Experiment:
    name: str
    source: str  # the YAML file it was read from ("" when built from a dict)
    base: dict[str, Any]
    axes: dict[str, list[Any]]  # dotted key -> values (the config's types), file order
    variants: list[tuple[str, dict[str, Any]]]  # (name, dotted overrides), file order
    table: TableSpec
    description: str = ""
    seeds_if_noisy: NoisySeeds | None = None
    validation: ValidationSpec | None = None
    labels: dict[str, str] = field(default_factory=dict)  # dotted key -> short label in names
    kind: str = "extractive"  # a key of KINDS
    pretrain: PretrainSpec | None = None
    # results directories of other experiments: a run whose full config equals one of their
    # finished runs' takes that result instead of training again
    reuse: tuple[str, ...] = ()

    @property
    def trains(self) -> Kind:
        return KINDS[self.kind]

    @property
    def cell_keys(self) -> tuple[str, ...]:
        """The keys that tell cells apart: everything that varies except the seed."""
        keys = [VARIANT] if self.variants else []
        return tuple(keys + [k for k in self.axes if k != SEED_KEY])

    def config_for(self, run: Run) -> Any:
        """The run's full config, a :class:`Config` or :class:`DropConfig` by ``kind``, checked
        (before the runner sets output_dir, data.dir and split files)."""
        kind = self.trains
        return kind.check(
            config_from_dict(_merge(self.base, nested(run.overrides)), cls=kind.config_cls)
        )

    def runs(self) -> list[Run]:
        """Every run of the grid itself, in execution order (no extra seeds): seed by seed
        (every cell's first seed, then every cell's second, ...), so an interrupted grid
        has filled whole tables rather than all seeds of its first cells."""
        runs = self._expand(list(self.axes.items()), extra=False)
        if SEED_KEY not in self.axes:
            return runs
        order = {seed: i for i, seed in enumerate(self.axes[SEED_KEY])}
        return sorted(runs, key=lambda r: order[r.overrides[SEED_KEY]])  # stable

    def extra_runs(self, cell: tuple[str, ...]) -> list[Run]:
        """The seeds_if_noisy runs of one cell (a tuple of labels in cell_keys order)."""
        if self.seeds_if_noisy is None:
            return []
        axes = [(k, v) for k, v in self.axes.items() if k != SEED_KEY]
        axes.append((SEED_KEY, list(self.seeds_if_noisy.seeds)))
        return [r for r in self._expand(axes, extra=True) if r.cell(self.cell_keys) == cell]

    def _expand(self, axes: list[tuple[str, list[Any]]], extra: bool) -> list[Run]:
        variants = self.variants or [("", {})]
        keys = [k for k, _ in axes]
        base_cfg = config_from_dict(copy.deepcopy(self.base), cls=self.trains.config_cls)
        base_seed = _lookup(base_cfg, SEED_KEY)
        out = []
        for variant, var_overrides in variants:
            for combo in itertools.product(*(vals for _, vals in axes)):
                overrides = {**var_overrides, **dict(zip(keys, combo, strict=True))}
                values = {VARIANT: variant} if self.variants else {}
                values.update(zip(keys, combo, strict=True))
                parts = [f"{VARIANT}={variant}"] if self.variants else []
                parts += [
                    f"{self.labels[k]}={format_value(v)}" for k, v in zip(keys, combo, strict=True)
                ]
                seed = overrides.get(SEED_KEY, base_seed)
                out.append(
                    Run(
                        name=",".join(parts) or "base",
                        values=values,
                        overrides=overrides,
                        seed=int(seed),
                        extra=extra,
                    )
                )
        return out


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
    for key, values in _flatten(raw).items():
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
        overrides = _flatten({k: v for k, v in item.items() if k != "name"})
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
        name = m[len(LAST_PREFIX) :] if m.startswith(LAST_PREFIX) else m
        if known_metrics and name not in known_metrics:
            close = difflib.get_close_matches(name, sorted(known_metrics), n=1, cutoff=0.4)
            raise ConfigError(
                f"{where}.metrics: unknown metric {m!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; known: {', '.join(sorted(known_metrics))} (each also as last_NAME)"
            )
    baseline = None
    if "baseline" in raw:  # (present: `baseline: null` names a row whose value is null)
        if not rows:
            raise ConfigError(f"{where}.baseline: a baseline is a row; this table has no rows")
        baseline = _baseline_label(raw["baseline"], rows, f"{where}.baseline", cls)
    contrasts = _parse_contrasts(raw.get("contrasts"), rows, f"{where}.contrasts", cls)
    return TableSpec(
        rows=tuple(rows),
        columns=columns,
        metrics=tuple(str(m) for m in metrics),
        summary=bool(raw.get("summary", False)),
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
        str(value) if key == VARIANT else format_value(_resolve_value(key, value, where, cls))
        for key, value in zip(rows, values, strict=True)
    ]
    return ",".join(parts)


def _parse_noisy(
    raw: Any,
    axes: Mapping[str, list[Any]],
    where: str,
    cell_keys: Sequence[str] = (),
    cls: type = Config,
    variant_names: Sequence[str] = (),
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
    return NoisySeeds(threshold, seeds, str(raw.get("metric", "f1")), tuple(also), pair)


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
        flat = _flatten(overrides or {})
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
        raise ConfigError(f"{where}.base: {err}") from None
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
    noisy = experiment.seeds_if_noisy
    if noisy is not None and noisy.pair_baseline and baseline is None:
        raise ConfigError(
            f"{where}.seeds_if_noisy.pair_baseline: needs table.baseline (the row to pair with)"
        )
    for run in runs:  # every key was checked alone; check each full combination
        try:
            cfg = experiment.config_for(run)
        except ConfigError as err:
            raise ConfigError(f"{where}: run {run.name}: {err}") from None
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
    """Read and validate an experiment YAML file."""
    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return experiment_from_dict(data or {}, source=str(path))


def plan(experiment: Experiment, finished: Mapping[str, Mapping[str, Any]]) -> list[Run]:
    """The runs to have: the grid's runs, then extra seeds for noisy cells.

    ``finished`` maps run names to their result dicts (with ``metrics``). A cell gets its
    extra seeds once all of its grid seeds have results and their sample std (ddof=1) of the
    chosen metric exceeds the threshold, or if ``seeds_if_noisy.also`` names it; the extra
    seeds never undo that decision.
    """
    runs = experiment.runs()
    noisy = experiment.seeds_if_noisy
    if noisy is None:
        return runs
    cells: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        cells.setdefault(run.cell(experiment.cell_keys), []).append(run)
    chosen: list[tuple[str, ...]] = []
    for cell, members in cells.items():
        if not all(r.name in finished for r in members):
            continue
        values = [metric_value(finished[r.name]["metrics"], noisy.metric) for r in members]
        std = sample_std(values)
        if cell in noisy.also or (std is not None and std > noisy.std_above):
            chosen.append(cell)
    if noisy.pair_baseline and experiment.table.baseline is not None:
        chosen += _baseline_cells(experiment, cells, chosen)
    extra: list[Run] = []
    for cell in dict.fromkeys(chosen):  # file order of decisions, each cell once
        extra.extend(experiment.extra_runs(cell))
    return runs + extra


def _baseline_cells(
    experiment: Experiment,
    cells: Mapping[tuple[str, ...], Sequence[Run]],
    chosen: Sequence[tuple[str, ...]],
) -> list[tuple[str, ...]]:
    """For each chosen cell outside the baseline row, the baseline row's cell in the same
    column (equal labels on every cell key that is not a row key); ``cells`` maps each cell
    to its runs."""
    rows = set(experiment.table.rows)
    other = [i for i, k in enumerate(experiment.cell_keys) if k not in rows]
    base_cells = {
        tuple(cell[i] for i in other): cell
        for cell, members in cells.items()
        if ",".join(members[0].cell(experiment.table.rows)) == experiment.table.baseline
    }
    out = []
    for cell in chosen:
        partner = base_cells.get(tuple(cell[i] for i in other))
        if partner is not None and partner != cell:
            out.append(partner)
    return out
