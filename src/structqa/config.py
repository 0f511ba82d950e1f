"""Experiment configuration: nested dataclasses, YAML files and ``--section.key=value`` overrides.

Unknown keys are errors that name the closest valid key. The resolved config is saved with
every checkpoint and every result file.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from structqa.text.annotate import DEFAULT_MODEL

_T = TypeVar("_T")

# The choices of the settings that name one of a few things, checked when a config is read (a
# typo fails with the closest name before anything loads); tests/test_config.py holds them equal
# to the registries that build them (heads.HEADS, attention.query_masks, heads.joint, ...).
HeadName = Literal["independent", "joint", "dyrex", "dyref", "dyrex+joint", "dyref+joint"]
QueryMask = Literal["bidirectional", "causal", "independent", "full"]
JointMode = Literal["band", "full"]
NullHead = Literal["span", "cls", "queries"]


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A config field with its one-line help, the text ``structqa config`` prints and
    ``structqa config --yaml`` writes as a comment (``metadata["help"]``)."""
    if not help:
        raise ValueError("every setting needs a one-line help text")
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class ModelConfig:
    encoder: str = setting(
        "default", "encoder: 'default' (all-MiniLM-L6-v2 from PyPI) or a local HF BERT directory"
    )
    head: HeadName = setting(
        "independent",
        "span head: independent | joint | dyrex | dyref | dyrex+joint | dyref+joint",
    )
    block: list[str] | None = setting(
        None,
        "encoder sub-layer stacking, e.g. [sa, naa, ffn]; added sub-layers start as the "
        "identity; null: the checkpoint's",
    )
    # span-head options (see structqa.heads): attention between the start/end queries
    # (DyREx: bidirectional | causal | independent; DyReF also full), DyREx decoder layers,
    # and how the joint scorers score spans (band: up to decode.max_answer_length tokens,
    # linear memory; full: every span, quadratic memory)
    query_mask: QueryMask = setting(
        "bidirectional",
        "how the start/end queries see each other: bidirectional | causal | independent | "
        "full (DyReF only)",
    )
    dyrex_layers: int = setting(3, "DyREx: transformer decoder layers that update the queries")
    joint_mode: JointMode = setting(
        "band",
        "joint heads: band (spans up to decode.max_answer_length, linear memory) | full",
    )
    # std of the normal init of the learned queries Q0; null: each head's own (static
    # queries and DyREx 0.02, BERT's initializer range; DyReF 1.0, the scale of the layer-normed
    # embeddings it sits beside). A static q of norm 0.4 gives logits q.h of a few units;
    # DyREx's and DyReF's queries reach norm ~20 (docs/results/lowdata-recipe-query-scale/)
    query_init_std: float | None = setting(
        None, "std of the learned queries' normal init; null: the head's own (0.02, DyReF 1.0)"
    )
    null_head: NullHead = setting(
        "span",
        "how 'no answer' is scored: span (the [CLS] span in the start/end softmaxes, as BERT) "
        "| cls (a binary answerability classifier on [CLS]) | queries ([CLS] and the queries)",
    )
    null_loss_weight: float = setting(1.0, "weight of the answerability classifier's loss")
    null_balanced: bool = setting(
        True, "weigh the classifier's two classes (answerable or not) equally in every batch"
    )
    # the second stage of a two-stage schedule: spans first (data.answerable_only), then
    # answerability from that model, e.g. with train.param_lr=encoder.*:0,head.span.*:0
    init_from: str | None = setting(
        None,
        "a structqa checkpoint whose weights start this model (parameters it lacks, e.g. a new "
        "answerability classifier, keep their fresh init), or 'reader': the general reader "
        "`structqa reader build` made ($STRUCTQA_READER names another); null: the encoder "
        "and a fresh head",
    )


@dataclass
class DataConfig:
    dir: str | None = setting(
        None, "data root for relative paths; null: $STRUCTQA_DATA, else ../shared/data"
    )
    train: str = setting(
        "splits/squad1-train.mrqa.jsonl.gz",
        "training file: SQuAD JSON, MRQA .jsonl[.gz], Hugging Face SQuAD records or .csv/.tsv",
    )
    # where best/ is chosen: never the test file (data.eval) unless validation is none
    validation: str | None = setting(
        "0.1",
        "where best/ is chosen: a FRACTION of data.train split off by context, a FILE, or "
        "none (choose on data.eval, scored every epoch)",
    )
    validation_seed: int = setting(
        0, "seed of the contexts a validation FRACTION takes from data.train"
    )
    eval: str | None = setting(
        None,
        "test file: scored once with best/ after training (best/eval/); null: no test "
        "(run `structqa evaluate CHECKPOINT --eval FILE` later)",
    )
    # e.g. a SQuAD 1.1 pool cut from the v1.1 dev set shares passages with SQuAD 2.0's dev
    exclude: list[str] = setting(
        help="files whose passages are never trained on: data.train's questions on their "
        "contexts are dropped before validation and train_size (a test file, say)",
        factory=list,
    )
    train_size: str = setting(
        "512", "training questions drawn by train.seed from data.train (after validation), or all"
    )
    eval_size: int | None = setting(
        None, "score only the first N questions of the validation/test file (quick checks)"
    )
    answerable_only: bool = setting(
        False,
        "train on the answerable questions of the drawn training subset only (the first stage "
        "of a two-stage no-answer schedule); validation keeps every question",
    )
    dedupe_ids: bool = setting(
        False,
        "rename repeated question ids (ID, ID#2, ID#3, ...) instead of stopping with an error",
    )
    negative_window_rate: float = setting(
        1.0,
        "share of an answerable training question's windows without its answer that are "
        "kept (long documents: 0.1 keeps about one in ten; drawn by train.seed); the window "
        "with the answer and unanswerable questions' windows are always kept",
    )
    max_seq_len: int = setting(384, "tokens per window (question + context + special tokens)")
    doc_stride: int = setting(128, "context tokens shared by consecutive windows of a long context")
    max_query_len: int = setting(64, "question tokens kept (longer questions are cut)")
    # spaCy tags given with every question and context token, as the encoder reads them:
    # pos (a POS-tag input embedding), entities (entity-aware attention). null: the ones the
    # encoder needs, resolved when the model is built and saved with the checkpoint's config
    token_tags: list[str] | None = setting(
        None, "spaCy tags fed to the encoder: [pos, entities]; null: those the encoder needs"
    )
    spacy_model: str = setting(DEFAULT_MODEL, "spaCy pipeline that computes the token tags")
    annotation_cache: str | None = setting(
        None, "JSONL cache of the spaCy parses (per text, reused across runs)"
    )


@dataclass
class Optimisation:
    """The training settings every task reads the same way (span QA, masked-LM pre-training,
    DROP): each task's train section is one, and the Trainer takes them from it
    (:meth:`structqa.training.trainer.Settings.from_config`)."""

    weight_decay: float = setting(0.01, "AdamW weight decay")
    grad_accum: int = setting(1, "micro-batches accumulated per optimizer step")
    max_grad_norm: float = setting(1.0, "gradient-norm clipping (0: off)")
    bf16: str = setting(
        "auto",
        "bf16 autocast: auto (where the hardware runs it natively and, on a CPU, measurably "
        "faster than fp32) | on | off",
    )
    log_every_steps: int = setting(10, "steps between lines of metrics.jsonl")


@dataclass
class TrainConfig(Optimisation):
    output_dir: str = setting("runs/default", "run directory: best/, last/, metrics.jsonl")
    seed: int = setting(0, "seed of the initialisation, batch order and training subset")
    init_seed: int | None = setting(
        None,
        "seed of the new layers' initialisation alone (train.seed then seeds the batch order, "
        "dropout and subset); runs whose weights are to be averaged share it. null: train.seed",
    )
    lr: float = setting(1e-4, "peak learning rate (AdamW, linear warm-up then decay)")
    head_lr: float | None = setting(
        None,
        "learning rate of the head's parameters; null: lr (1e-3: chosen on Independent, used "
        "for DyREx and DyReF)",
    )
    # e.g. ["head.scorer.W"]: Joint's bilinear form, which a 1e-3 rate inflates until its span
    # prior swamps the question (docs/results/lowdata-recipe-joint/README.md)
    head_lr_exclude: list[str] = setting(
        help="globs of head parameters that keep lr when head_lr is set, e.g. [head.scorer.W]",
        factory=list,
    )
    # the first matching glob in file order wins over lr, head_lr and head_lr_exclude; e.g.
    # {"head.scorer.W": 1.0e-5}, or 0.0 to freeze (AdamW's decay also scales with the rate).
    # On the command line: train.param_lr=head.scorer.W:1e-5,encoder.embeddings.*:0
    param_lr: dict[str, float] = setting(
        help="{glob: lr} per-parameter learning rates, first match wins, 0 freezes "
        "(command line: GLOB:LR,GLOB:LR)",
        factory=dict,
    )
    batch_size: int = setting(12, "training windows per step (per process)")
    # CPU inference is fastest in small batches (cache): 16 gave 48-54 windows/s, 64 gave 36-41
    # (bf16, all-MiniLM-L6-v2, 2 cores); raise it on a GPU
    eval_batch_size: int = setting(16, "windows per forward pass when scoring (raise on a GPU)")
    epochs: float = setting(10.0, "passes over the training questions (fractions allowed)")
    max_steps: int | None = setting(None, "optimizer steps; overrides epochs when set")
    warmup_ratio: float = setting(0.1, "share of the steps with a linearly rising learning rate")
    eval_every_epoch: bool = setting(
        True, "score the validation set after every epoch (false: after the last one only)"
    )
    save_every_steps: int | None = setting(
        None, "also save the resumable last/ checkpoint every N steps inside an epoch"
    )
    dropout: float | None = setting(None, "hidden dropout; null: the encoder's own")
    # Attention-probability dropout forces PyTorch's unfused attention on CPU and halves
    # training throughput there (measured: 6.2 -> 12.0 features/s); fine-tuning default off.
    attention_dropout: float | None = setting(
        0.0, "attention-probability dropout (0 keeps the fast fused attention on CPU)"
    )


#: answerability verifier kinds (structqa.calibration.verifier); decode.verifier also takes
#: auto (similarity where the validation questions include unanswerable ones, else none),
#: true (lexical), false and none
VERIFIER_KINDS = ("lexical", "similarity")
VERIFIER_AUTO = "auto"


@dataclass
class DecodeSettings:
    n_best: int = setting(20, "candidate answers kept per question")
    max_answer_length: int = setting(30, "longest answer, in tokens")
    version_2: bool | None = setting(
        None, "allow no-answer (SQuAD 2.0); null: decide from the data (any unanswerable question)"
    )
    whole_words: bool = setting(
        False, "widen answers that start or end inside a word (WordPiece) to whole words"
    )
    verifier: bool | str = setting(
        VERIFIER_AUTO,
        "SQuAD 2.0: fit an answerability verifier on the validation questions, with the "
        "calibration: lexical (or true: the null odds with lexical features of the question "
        "and passage), similarity (those and sentence similarity by the default encoder; one "
        "more encoder pass per question), false, or auto: similarity where the validation "
        "questions include unanswerable ones, none where all are answerable",
    )
    unanswerable_share: float | None = setting(
        None,
        "SQuAD 2.0: the share of unanswerable questions the no-answer threshold and the "
        "answer probabilities are fitted for, the validation questions weighted to it; null: "
        "their own share. The F1-best threshold moves with it: set the share the questions to "
        "be answered are expected to have",
    )


@dataclass
class Config:
    model: ModelConfig = setting(help="the encoder and the span head", factory=ModelConfig)
    data: DataConfig = setting(
        help="training, validation and test files; windows", factory=DataConfig
    )
    train: TrainConfig = setting(help="optimisation, checkpoints, precision", factory=TrainConfig)
    decode: DecodeSettings = setting(help="from scores to answers", factory=DecodeSettings)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    pass


# top-level keys that only an experiment grid (structqa.experiments.grid) has, no config
GRID_KEYS = frozenset({"base", "grid", "variants", "extends"})


def _closest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.4)
    return f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(options)}"


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        if value in args:
            return value
        names = [str(a) for a in args]
        close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.4)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{where}: {value!r} is not one of {' | '.join(names)}{hint}")
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
        if GRID_KEYS & set(data):
            sections = {f.name for f in dataclasses.fields(cls)}
            keys = ", ".join(k for k in data if k not in sections)
            raise ConfigError(
                f"{path} is an experiment grid (it has {keys}), not the config of one run: "
                f"run `structqa experiment {path}`"
            )
        _apply(cfg, data, "")
    return apply_overrides(cfg, overrides or [])


def apply_overrides(cfg: Any, overrides: Sequence[str]) -> Any:
    """``cfg`` with ``section.key=value`` overrides applied in order (leading dashes optional),
    each checked and converted to its field's type as a YAML file's value would be; returns
    ``cfg``. An unknown key is a ConfigError naming the closest valid one."""
    for item in overrides:
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


def validation_fraction(value: str | None) -> float | None:
    """``data.validation`` as a fraction of the training file, or None when it names a file
    (or is none). A number outside (0, 1) is a ConfigError."""
    if value is None:
        return None
    try:
        fraction = float(value)
    except ValueError:
        return None  # a file name
    if not 0.0 < fraction < 1.0:
        raise ConfigError(
            f"data.validation: a number is a fraction of data.train and must be between 0 "
            f"and 1, got {value}; or give a FILE, or none"
        )
    return fraction


def validate(cfg: Config) -> Config:
    """Check what the type coercion cannot (ranges, names) before any model or data is loaded:
    a bad value fails in a second, not after the data has been read and featurized."""

    from structqa.data.sampling import parse_train_size
    from structqa.runtime import check_bf16

    d, t, dec = cfg.data, cfg.train, cfg.decode
    try:
        check_bf16(t.bf16)
    except ValueError as err:
        raise ConfigError(f"train.{err}") from None
    try:
        parse_train_size(d.train_size)
    except ValueError as err:
        raise ConfigError(f"data.train_size: {err}") from None
    if not 0.0 < d.negative_window_rate <= 1.0:
        raise ConfigError(
            f"data.negative_window_rate must be in (0, 1], got {d.negative_window_rate}"
        )
    at_least_one = {
        "train.batch_size": t.batch_size,
        "train.eval_batch_size": t.eval_batch_size,
        "train.grad_accum": t.grad_accum,
        "train.log_every_steps": t.log_every_steps,
        "train.save_every_steps": t.save_every_steps,
        "train.max_steps": t.max_steps,
        "model.dyrex_layers": cfg.model.dyrex_layers,
        "data.eval_size": d.eval_size,
        "data.doc_stride": d.doc_stride,
        "data.max_query_len": d.max_query_len,
        "decode.n_best": dec.n_best,
        "decode.max_answer_length": dec.max_answer_length,
    }
    for name, value in at_least_one.items():
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}")
    validation_fraction(d.validation)  # a number must be a fraction in (0, 1)
    if dec.verifier not in (True, False, "none", VERIFIER_AUTO, *VERIFIER_KINDS):
        raise ConfigError(
            f"decode.verifier must be {VERIFIER_AUTO}, true, false, {', '.join(VERIFIER_KINDS)} "
            f"or none, got {dec.verifier!r}"
        )
    if dec.unanswerable_share is not None and not 0.0 < dec.unanswerable_share < 1.0:
        raise ConfigError(
            f"decode.unanswerable_share must be in (0, 1) or null, got {dec.unanswerable_share}"
        )
    if d.validation is None and not d.eval:
        raise ConfigError(
            "data.validation is none, which chooses best/ on data.eval, but data.eval is not "
            "set: give data.eval=FILE, or data.validation=FRACTION or FILE"
        )
    if t.max_steps is None and not t.epochs > 0:
        raise ConfigError(f"train.epochs must be > 0 (or set train.max_steps), got {t.epochs}")
    if not 0.0 <= t.warmup_ratio <= 1.0:
        raise ConfigError(f"train.warmup_ratio must be in [0, 1], got {t.warmup_ratio}")
    from structqa.features.squad import check_windows

    try:
        check_windows(d.max_seq_len, d.doc_stride, d.max_query_len)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if cfg.model.block is not None:
        check_block(cfg.model.block)
    masks = query_masks(cfg.model.head)
    if masks and cfg.model.query_mask not in masks:
        takers = [h for h in typing.get_args(HeadName) if cfg.model.query_mask in query_masks(h)]
        raise ConfigError(
            f"model.query_mask {cfg.model.query_mask!r}: model.head {cfg.model.head!r} takes "
            f"{' | '.join(masks)}; {cfg.model.query_mask!r} is for {', '.join(takers)}"
        )
    return cfg


def query_masks(head: str) -> tuple[str, ...]:
    """The ``model.query_mask`` names ``head`` builds, from the tables its query source looks
    them up in; () for the heads whose queries do not attend to each other (they ignore it)."""
    from structqa.attention.query_masks import DYREF_MASKS, PAIR_MASKS

    return tuple({"dyrex": PAIR_MASKS, "dyref": DYREF_MASKS}.get(head.split("+")[0], ()))


def check_block(block: Sequence[str]) -> None:
    """Refuse a ``model.block`` stacking the encoder cannot build, as ``structqa pretrain``
    does, naming the unknown sub-layer: a typo fails when the config is read, not when the
    model is built."""
    from structqa.encoders import STACKINGS, parse_stacking

    try:
        parse_stacking(block)
    except ValueError:
        kinds = list(dict.fromkeys(k for stacking in STACKINGS.values() for k in stacking))
        bad = [k for k in block if k not in kinds]
        what = f"unknown sub-layer(s) {bad}" if bad else "no sub-layers"
        raise ConfigError(
            f"model.block {list(block)}: {what}; a stacking is a list of {', '.join(kinds)} "
            "(e.g. [sa, naa, ffn]), or null for the encoder's own"
        ) from None


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


def from_attributes(cls: type[_T], source: Any, **given: Any) -> _T:
    """A ``cls`` dataclass with each field taken from ``source``'s attribute of the same name
    (an argparse namespace whose options are named after the fields, or another config),
    but for ``given``; a field ``source`` lacks keeps its default."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    values = {n: getattr(source, n) for n in names if hasattr(source, n)}
    return cls(**{**values, **given})


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
