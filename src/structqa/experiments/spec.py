"""What an experiment is, once its YAML is read: :class:`Experiment` and its :class:`Run` s.

An experiment is a base config, grid axes (their product) and named variants, with a
:class:`TableSpec` saying how results are tabulated; :meth:`Experiment.runs` expands it into
named runs in a deterministic order and :meth:`Experiment.config_for` gives a run's validated
config. Reading the YAML into these is :mod:`structqa.experiments.grid`'s work; this module only
holds the records and the dotted-key functions both sides use.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from structqa.config import Config, ConfigError, config_from_dict, mapping_fields
from structqa.config import validate as validate_extractive
from structqa.experiments.results import (
    DROP_METRIC_NAMES,
    DROP_METRICS,
    EXTRACTIVE_METRIC_NAMES,
    result_metric,
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

PRETRAIN_PREFIX = "pretrain:"  # model.encoder=pretrain:NAME -> that arm's final/ checkpoint

_UNSAFE_NAME_CHARS = ("/", "\\", "\x00")


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


def merge_over(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``over`` laid on it: mappings merged key by key, anything else
    (lists, values) replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge_over(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model": {"head": "dyrex"}}`` -> ``{"model.head": "dyrex"}``; a mapping-valued
    config field (``train.param_lr``) stays one value."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and dotted not in MAPPING_KEYS:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def lookup(cfg: Any, dotted: str) -> Any:
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


# the command each kind of config is for (commands/settings.py's CONFIG_CLASSES), named by the
# errors that say a file or a key belongs to another command
COMMANDS: dict[type, str] = {
    Config: "structqa train",
    DropConfig: "structqa drop-train",
    PretrainConfig: "structqa pretrain",
}


def _lacks(cls: type, dotted: str) -> str | None:
    """The first part of ``dotted`` that the config class ``cls`` has no field for (``masking``
    of ``masking.scheme``, ``model.nc_layer``), or None where it has them all."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return None  # a value (a mapping-valued setting's keys are data)
        if part not in {f.name for f in dataclasses.fields(cls)}:
            return ".".join(parts[: i + 1])
        cls = typing.get_type_hints(cls)[part]
    return None


def misplaced_key(dotted: str, cls: type) -> str | None:
    """What the dotted key of a grid whose runs are ``cls`` configs is, where ``cls`` lacks it
    but another kind of config has it (``model.nc_layer`` in an extractive grid, ``masking.*``
    anywhere); None where ``cls`` has it or no config does (a typo: the closest key says more).
    """
    missing = _lacks(cls, dotted)
    if missing is None:
        return None
    owners = [c for c in COMMANDS if c is not cls and _lacks(c, missing) is None]
    if not owners:
        return None
    this = next((name for name, kind in KINDS.items() if kind.config_cls is cls), "?")
    key = missing if "." in missing else f"{missing}.*"
    if owners == [PretrainConfig]:
        return (
            f"{key} belongs in a pre-training arm (`pretrain.arms.NAME`, a `structqa pretrain` "
            f"config), not in the runs of this `kind: {this}` grid; a run fine-tunes an arm's "
            "encoder with model.encoder: pretrain:NAME"
        )
    places = [
        f"`kind: {name}` grids ({COMMANDS[kind.config_cls]})"
        for name, kind in KINDS.items()
        if kind.config_cls in owners
    ]
    if PretrainConfig in owners:
        places.append("pre-training arms (`pretrain.arms`)")
    return (
        f"{key} is a setting of {' and of '.join(places)}, not of this `kind: {this}` grid "
        f"({COMMANDS[cls]})"
    )


def config_commands(data: Mapping[str, Any]) -> list[str]:
    """The commands whose config file ``data`` (a YAML file's mapping) could be: those whose
    sections hold all its top-level keys, and of them the ones it loads as, if any."""
    fits = [
        cls
        for cls in COMMANDS
        if data and all(isinstance(k, str) and _lacks(cls, k) is None for k in data)
    ]
    loads = []
    for cls in fits:
        try:
            config_from_dict(copy.deepcopy(dict(data)), cls=cls)
        except ConfigError:
            continue
        loads.append(cls)
    return [COMMANDS[cls] for cls in loads or fits]


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
    # row label -> its key in summary.json (rows not named keep their label), e.g. the
    # "head/encoder" names of a grid whose variants are named "head.encoder"
    summary_names: Mapping[str, str] = field(default_factory=dict)
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
        cfg = config_from_dict(merge_over(self.base, nested(self.arms[arm])), cls=PretrainConfig)
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
            config_from_dict(merge_over(self.base, nested(run.overrides)), cls=kind.config_cls)
        )

    def origin(self, run: Run, error: str) -> str:
        """Where the settings that ``error`` (about ``run``'s config) names were written: the
        run's variant (``.variants[I]``), a grid axis (``.grid``), ``.base``, or "" (none)."""

        def named(keys: Any) -> bool:
            return any(re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", error) for k in keys)

        for i, (name, overrides) in enumerate(self.variants):
            if name == run.values.get(VARIANT) and named(overrides):
                return f".variants[{i}]"
        if named(self.axes):
            return ".grid"
        return ".base" if named(flatten(self.base)) else ""

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
        base_seed = lookup(base_cfg, SEED_KEY)
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
        values = [
            v for r in members if (v := result_metric(finished[r.name], noisy.metric)) is not None
        ]
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
