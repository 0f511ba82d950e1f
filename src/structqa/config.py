"""Experiment configuration: nested dataclasses, YAML files and ``--section.key=value`` overrides.

Unknown keys are errors that name the closest valid key. The resolved config is saved with
every checkpoint and every result file.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from structqa.text.annotate import DEFAULT_MODEL


@dataclass
class ModelConfig:
    encoder: str = "default"  # "default" (all-MiniLM-L6-v2 from PyPI) or a local HF BERT dir
    head: str = "independent"
    block: list[str] | None = None  # encoder sub-layer stacking, e.g. [sa, naa, ffn]
    # span-head options (see structqa.heads): attention between the start/end queries
    # (DyREx: bidirectional | causal | independent; DyReF also full), DyREx decoder layers,
    # and how the joint scorers score spans (band: up to decode.max_answer_length tokens,
    # linear memory; full: every span, quadratic memory)
    query_mask: str = "bidirectional"
    dyrex_layers: int = 3
    joint_mode: str = "band"
    # std of the normal init of the learned queries Q0; null: each head's own (static
    # queries and DyREx 0.02, BERT's initializer range; DyReF 1.0, the scale of the layer-normed
    # embeddings it sits beside). A static q of norm 0.4 gives logits q.h of a few units;
    # DyREx's and DyReF's queries reach norm ~20 (docs/results/lowdata-recipe-query-scale/)
    query_init_std: float | None = None
    # how "no answer" is scored (structqa.heads.answerability): span (BERT: the [CLS] span in
    # the start/end softmaxes) | cls (a binary answerability classifier on [CLS]) | queries
    # (on [CLS] and the start/end queries); the classifier's loss weight, and whether its two
    # classes weigh the same in every batch
    null_head: str = "span"
    null_loss_weight: float = 1.0
    null_balanced: bool = True


@dataclass
class DataConfig:
    dir: str | None = None  # data root; else $STRUCTQA_DATA or ../shared/data
    train: str = "splits/squad1-train.mrqa.jsonl.gz"
    eval: str = "splits/squad1-heldout.mrqa.jsonl.gz"
    train_size: str = "512"  # a number of questions or "all"
    eval_size: int | None = None  # evaluate on the first N questions only (quick checks)
    max_seq_len: int = 384
    doc_stride: int = 128
    max_query_len: int = 64
    # spaCy tags given with every question and context token, as the encoder reads them:
    # pos (a POS-tag input embedding), entities (entity-aware attention). null: the ones the
    # encoder needs, resolved when the model is built and saved with the checkpoint's config
    token_tags: list[str] | None = None
    spacy_model: str = DEFAULT_MODEL  # the annotator of the token tags
    annotation_cache: str | None = None  # JSONL cache of its parses (per text, reused)


@dataclass
class TrainConfig:
    output_dir: str = "runs/default"
    seed: int = 0
    lr: float = 1e-4
    head_lr: float | None = None  # learning rate of head parameters (default: lr)
    # globs of head parameter names that train at lr even when head_lr is set, e.g.
    # ["head.scorer.W"]: Joint's bilinear form, which a 1e-3 rate inflates until its span prior
    # swamps the question (docs/results/lowdata-recipe-joint/README.md)
    head_lr_exclude: list[str] = field(default_factory=list)
    # {glob: lr}: parameters (encoder or head) whose name matches a glob train at that rate,
    # the first matching glob in file order winning over lr, head_lr and head_lr_exclude; e.g.
    # {"head.scorer.W": 1.0e-5}, or 0.0 to freeze (AdamW's decay also scales with the rate).
    # On the command line: train.param_lr=head.scorer.W:1e-5,encoder.embeddings.*:0
    param_lr: dict[str, float] = field(default_factory=dict)
    weight_decay: float = 0.01
    batch_size: int = 12
    # CPU inference is fastest in small batches (cache): 16 gave 48-54 windows/s, 64 gave 36-41
    # (bf16, all-MiniLM-L6-v2, 2 cores); raise it on a GPU
    eval_batch_size: int = 16
    grad_accum: int = 1
    epochs: float = 10.0
    max_steps: int | None = None  # overrides epochs when set
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    bf16: str = "auto"  # auto (use it where the hardware runs it natively) | on | off
    eval_every_epoch: bool = True
    save_every_steps: int | None = None  # extra resumable checkpoints inside an epoch
    log_every_steps: int = 10
    dropout: float | None = None  # override the encoder's hidden dropout
    # Attention-probability dropout forces PyTorch's unfused attention on CPU and halves
    # training throughput there (measured: 6.2 -> 12.0 features/s); fine-tuning default off.
    attention_dropout: float | None = 0.0


@dataclass
class DecodeSettings:
    n_best: int = 20
    max_answer_length: int = 30
    version_2: bool | None = None  # None: decide from the data (any unanswerable question)
    # widen answers that start or end inside a word (WordPiece) to whole words
    whole_words: bool = False


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeSettings = field(default_factory=DecodeSettings)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    pass


def _closest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.4)
    return f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(options)}"


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: cannot parse {value!r}")
    if origin is dict:
        if isinstance(value, str):  # "key:value,key:value" from a command-line override
            pairs = [item.rsplit(":", 1) for item in value.split(",") if item.strip()]
            if any(len(pair) != 2 for pair in pairs):
                raise ConfigError(f"{where}: expected key:value,key:value, got {value!r}")
            value = {k.strip(): v.strip() for k, v in pairs}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = args if args else (str, Any)
        return {
            _coerce(k, key_type, where): _coerce(v, value_type, f"{where}.{k}")
            for k, v in value.items()
        }
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.strip("[]").split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, args[0], where) for v in value] if args else value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "no", "0", "off"):
            return False
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
        try:
            out = tp(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}") from None
        if tp is int and isinstance(value, float) and value != out:
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return out
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _apply(obj: Any, values: dict[str, Any], where: str) -> None:
    hints = typing.get_type_hints(type(obj))
    names = [f.name for f in dataclasses.fields(obj)]
    for key, value in values.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise ConfigError(f"unknown config key {path!r}{_closest(key, names)}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: expected a section (mapping), got {value!r}")
            _apply(current, value, path)
        else:
            setattr(obj, key, _coerce(value, hints[key], path))


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, cls: type = Config
) -> Any:
    """Defaults <- YAML file <- ``section.key=value`` overrides (leading dashes optional)."""
    cfg = cls()
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        _apply(cfg, data, "")
    for item in overrides or []:
        item = item.lstrip("-")
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        dotted, raw = item.split("=", 1)
        # the raw text goes to the field's own type conversion: parsing it as YAML first
        # would turn a string field's "no" into False or "0755" into 493
        nested: dict[str, Any] = {}
        cur = nested
        parts = dotted.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = raw
        _apply(cfg, nested, "")
    return cfg


def validate(cfg: Config) -> Config:
    """Check what the type coercion cannot (ranges, names) before any model or data is loaded:
    a bad value fails in a second, not after the data has been read and featurized."""
    import torch

    from structqa.data.sampling import parse_train_size
    from structqa.runtime import use_bf16

    d, t, dec = cfg.data, cfg.train, cfg.decode
    try:
        use_bf16(t.bf16, torch.device("cpu"))  # only checks the setting
    except ValueError as err:
        raise ConfigError(f"train.{err}") from None
    try:
        parse_train_size(d.train_size)
    except ValueError as err:
        raise ConfigError(f"data.train_size: {err}") from None
    at_least_one = {
        "train.batch_size": t.batch_size,
        "train.eval_batch_size": t.eval_batch_size,
        "train.grad_accum": t.grad_accum,
        "train.log_every_steps": t.log_every_steps,
        "train.save_every_steps": t.save_every_steps,
        "train.max_steps": t.max_steps,
        "data.eval_size": d.eval_size,
        "data.doc_stride": d.doc_stride,
        "data.max_query_len": d.max_query_len,
        "decode.n_best": dec.n_best,
        "decode.max_answer_length": dec.max_answer_length,
    }
    for name, value in at_least_one.items():
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    if t.max_steps is None and not t.epochs > 0:
        raise ConfigError(f"train.epochs must be > 0 (or set train.max_steps), got {t.epochs}")
    if not 0.0 <= t.warmup_ratio <= 1.0:
        raise ConfigError(f"train.warmup_ratio must be in [0, 1], got {t.warmup_ratio}")
    from structqa.features.squad import check_windows

    try:
        check_windows(d.max_seq_len, d.doc_stride, d.max_query_len)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return cfg


def config_changes(
    recorded: dict[str, Any], current: dict[str, Any], ignore: frozenset[str] = frozenset()
) -> list[tuple[str, Any, Any]]:
    """``(section.key, recorded value, current value)`` for every setting that differs between
    two configs given as ``{section: {key: value}}`` dicts (values compared as JSON, so a
    tuple equals a list). Keys that only one side has, such as a setting added by a newer
    version, are not compared; ``ignore`` names keys that may differ."""
    import json

    a, b = json.loads(json.dumps(recorded)), json.loads(json.dumps(current))
    out = []
    for section in sorted(a.keys() & b.keys()):
        sa, sb = a[section], b[section]
        if not (isinstance(sa, dict) and isinstance(sb, dict)):
            if sa != sb and section not in ignore:
                out.append((section, sa, sb))
            continue
        for key in sorted(sa.keys() & sb.keys()):
            dotted = f"{section}.{key}"
            if dotted not in ignore and sa[key] != sb[key]:
                out.append((dotted, sa[key], sb[key]))
    return out


def config_from_dict(d: dict[str, Any], cls: type = Config) -> Any:
    cfg = cls()
    _apply(cfg, d, "")
    return cfg


def mapping_fields(cls: type, prefix: str = "") -> set[str]:
    """Dotted names of the mapping-valued fields of a config class (e.g. ``train.param_lr``):
    their values are data, not sections, so flattening a config must stop there."""
    out: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out |= mapping_fields(tp, f"{prefix}{f.name}.")
        elif typing.get_origin(tp) is dict:
            out.add(prefix + f.name)
    return out


def dump_config(cfg: Any) -> str:
    return yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False)
