"""Configuration of GenBERT / NC-BERT training on DROP (``structqa drop-train CONFIG.yaml``).

Nested dataclasses like :class:`structqa.config.Config`, loaded with the shared
``load_config(path, overrides, cls=DropConfig)`` (an unknown key is an error naming the
closest valid key); :func:`validate` then checks values that depend on each other. The
resolved config is saved in every checkpoint (``structqa_config.json``), which is how
``structqa drop-predict`` rebuilds the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from structqa.attention.nc_masks import NCMaskConfig
from structqa.config import ConfigError, Optimisation, from_attributes, load_config, setting
from structqa.features.drop_features import DropFeatureConfig
from structqa.io import read_json
from structqa.models.build import resolve_encoder_path
from structqa.models.genbert import GenBERTConfig
from structqa.runtime import check_bf16
from structqa.text.annotate import DEFAULT_MODEL


@dataclass
class DropModelConfig:
    encoder: str = setting("default", "'default' (all-MiniLM-L6-v2) or a local HF BERT directory")
    # a drop-train checkpoint directory (e.g. RUN/best) to start from instead of `encoder`:
    # its encoder, cross-attention, ffn_enc/ffn_dec and heads, and its tokenizer; modules the
    # checkpoint lacks (the NC layer of NC-BERT fine-tuned from a synthetic-data GenBERT) are
    # freshly initialized (see structqa.ncbert.loop.warm_start)
    init: str | None = setting(
        None, "a drop-train checkpoint (e.g. RUN/best) to start from instead of encoder"
    )
    xa_init: Literal["random", "zero"] = setting(
        "random", "decoder cross-attention init: random | zero"
    )
    nc_layer: bool = setting(False, "add an encoder layer with the NC-Mask (NC-BERT Sec. 3.3.1)")
    nc_heads: list[int] = setting(help="heads of that layer that get the NC-Mask", factory=list)
    # or the NC-Mask on heads of the pretrained layers (Table 4): all_layers | last_all |
    # last_single | last_odd | last_even (structqa.models.genbert.replaced_heads)
    nc_replace: str | None = setting(
        None,
        "or the NC-Mask on pretrained heads: all_layers | last_all | last_single | last_odd | "
        "last_even",
    )
    entity_channel: bool = setting(True, "NC-Mask entity-number channel (needs spaCy entities)")
    type_channel: bool = setting(True, "NC-Mask type-number channel")
    type_words: int = setting(4, "type-number channel: words a number may attend to (m)")
    type_window: int = setting(6, "type-number channel: how far to look for them (k)")
    decoder_number_mask: bool = setting(
        False, "decoder cross-attention sees numbers and the question only"
    )
    dice_weight: float = setting(0.0, "weight of the DICE loss (Eq. 7); 0: off")
    dice_pairs: int = setting(4, "number pairs per example for DICE")
    lsdf: bool = setting(False, "numbers in decoder targets least significant digit first")
    # the longest target data.max_decoder_len keeps, less its [CLS] and [SEP]
    max_decode_len: int = setting(14, "longest generated answer, in tokens")
    max_span_len: int = setting(30, "longest extracted span answer, in tokens")
    dropout: float | None = setting(None, "hidden dropout; null: the checkpoint's")

    @property
    def needs_annotations(self) -> bool:
        masked = (self.nc_layer and bool(self.nc_heads)) or self.nc_replace is not None
        return masked and self.entity_channel

    def genbert(self, seed: int = 0) -> GenBERTConfig:
        """The model's options: every GenBERTConfig field is this section's field of the same
        name, the NC-Mask's channels grouped, DICE's pair sampling drawn by ``seed``."""
        return from_attributes(
            GenBERTConfig, self, nc_mask=from_attributes(NCMaskConfig, self), dice_seed=seed
        )


@dataclass
class DropDataConfig:
    dir: str | None = setting(
        None, "data root for relative paths; null: $STRUCTQA_DATA, else ../shared/data"
    )
    # DROP JSON files, read in order and concatenated; a path that exists as given (e.g. a
    # `structqa synth` file) is used as is, any other is looked up under the data root
    train: list[str] = setting(
        help="DROP JSON files, read in order and concatenated",
        factory=lambda: ["drop/drop-train-sample.json", "drop/drop-mini.json"],
    )
    eval: str = setting(
        "drop/drop-dev-sample.json", "DROP file that chooses best/ (global F1 at epoch ends)"
    )
    test: str | None = setting(
        "drop/drop-contrast-sets.json", "DROP file answered once with best/ at the end; null: none"
    )
    max_seq_len: int = setting(512, "encoder tokens per example")
    max_question_len: int = setting(64, "question tokens kept")
    max_decoder_len: int = setting(16, "decoder target tokens, [CLS] and [SEP] included")
    # spaCy annotation (entities, sentences) for the entity-number channel: used only when
    # model.nc_layer and model.entity_channel are on (without it that channel allows nothing)
    spacy_model: str = setting(DEFAULT_MODEL, "spaCy pipeline for the entity-number channel")
    annotation_cache: str | None = setting(None, "JSONL cache of annotations, reused across runs")

    def features(self, lsdf: bool) -> DropFeatureConfig:
        return DropFeatureConfig(
            max_seq_len=self.max_seq_len,
            max_question_len=self.max_question_len,
            max_decoder_len=self.max_decoder_len,
            lsdf=lsdf,
        )


@dataclass
class DropTrainConfig(Optimisation):
    output_dir: str = setting("runs/ncbert", "run directory: best/, last/, metrics.jsonl")
    seed: int = setting(0, "seed of the initialisation, DICE pairs and batch order")
    lr: float = setting(5e-5, "peak learning rate (AdamW, linear warm-up then decay)")
    head_lr: float | None = setting(None, "learning rate of the non-encoder parameters; null: lr")
    # {glob: lr}: parameters whose name matches a glob train at that rate, over lr and head_lr
    # (first match wins; 0 freezes), as train.param_lr of `structqa train`
    param_lr: dict[str, float] = setting(
        help="{glob: lr} per-parameter learning rates, first match wins, 0 freezes", factory=dict
    )
    batch_size: int = setting(8, "examples per step (per process)")
    eval_batch_size: int = setting(32, "examples per forward pass when scoring")
    epochs: float = setting(10.0, "passes over the training data")
    max_steps: int | None = setting(None, "optimizer steps; overrides epochs when set")
    warmup_ratio: float = setting(0.1, "share of the steps with a linearly rising learning rate")
    save_every_steps: int | None = setting(
        None, "also save the resumable last/ checkpoint every N steps inside an epoch"
    )
    # also score the eval file every N steps inside an epoch (besides every epoch end): model
    # selection when the step budget is shorter than an epoch or two
    eval_every_steps: int | None = setting(
        None, "also score the eval file every N steps inside an epoch"
    )


@dataclass
class DropConfig:
    model: DropModelConfig = setting(
        help="the encoder, the generative head and the NC-BERT options", factory=DropModelConfig
    )
    data: DropDataConfig = setting(
        help="training, selection and test DROP files", factory=DropDataConfig
    )
    train: DropTrainConfig = setting(
        help="optimisation, checkpoints, precision", factory=DropTrainConfig
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def decode_cap_note(cfg: DropConfig) -> str | None:
    """What a run is told where decoding stops short of the answers it trains on, or None."""
    m, d = cfg.model, cfg.data
    if m.max_decode_len >= d.max_decoder_len - 2:
        return None
    return (
        f"model.max_decode_len {m.max_decode_len} is shorter than the answers training sees "
        f"(data.max_decoder_len {d.max_decoder_len}: up to {d.max_decoder_len - 2} tokens): "
        "longer answers are cut when generated"
    )


def validate(cfg: DropConfig) -> DropConfig:
    """Check what type coercion cannot: ranges, names, combinations."""
    m, d, t = cfg.model, cfg.data, cfg.train
    try:
        m.genbert(t.seed)
        check_bf16(t.bf16)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if m.nc_heads and not m.nc_layer:
        raise ConfigError("model.nc_heads is set but model.nc_layer is false")
    # nc_layer with no nc_heads is the extra layer N+1 unmasked: k = 0 of the k-heads sweep
    if m.nc_layer and m.nc_heads and not (m.entity_channel or m.type_channel):
        raise ConfigError(
            "model.nc_heads needs at least one channel (model.entity_channel or model.type_channel)"
        )
    if m.nc_replace is not None and not (m.entity_channel or m.type_channel):
        raise ConfigError(
            "model.nc_replace needs at least one channel (model.entity_channel or "
            "model.type_channel)"
        )
    if m.init is not None and not m.init.strip():
        raise ConfigError("model.init must be a drop-train checkpoint directory or null")
    if len(set(m.nc_heads)) != len(m.nc_heads) or any(h < 0 for h in m.nc_heads):
        raise ConfigError(f"model.nc_heads must be distinct and >= 0, got {m.nc_heads}")
    heads = encoder_heads(cfg) if m.nc_heads else None
    if heads is not None and max(m.nc_heads) >= heads[0]:
        n, source = heads
        raise ConfigError(
            f"model.nc_heads {m.nc_heads}: head {max(m.nc_heads)} does not exist: the encoder "
            f"({source}) has {n} attention heads, numbered 0 to {n - 1}; list heads below {n}"
        )
    if m.type_words < 1 or m.type_window < 1:
        raise ConfigError(
            f"model.type_words (m) and model.type_window (k) must be >= 1, got "
            f"m={m.type_words}, k={m.type_window}"
        )
    if m.type_words > 2 * m.type_window:  # the paper's m/2 <= k: m words fit in k each side
        raise ConfigError(
            f"model.type_words (m={m.type_words}) must be at most twice model.type_window "
            f"(k={m.type_window}): a window of k tokens each side holds at most 2k words"
        )
    if m.max_decode_len < 1 or m.max_span_len < 1:
        raise ConfigError(
            f"model.max_decode_len and model.max_span_len must be >= 1, got "
            f"{m.max_decode_len} and {m.max_span_len}"
        )
    if m.dice_weight < 0:
        raise ConfigError(f"model.dice_weight must be >= 0, got {m.dice_weight}")
    if not d.train:
        raise ConfigError("data.train must list at least one DROP file")
    if d.max_seq_len < 8 or d.max_decoder_len < 3:
        raise ConfigError("data.max_seq_len must be >= 8 and data.max_decoder_len >= 3")
    for name in ("batch_size", "eval_batch_size", "grad_accum", "log_every_steps"):
        if getattr(t, name) < 1:
            raise ConfigError(f"train.{name} must be >= 1, got {getattr(t, name)}")
    if t.grad_accum > 64:  # DICE's noise seeds leave room for 64 micro-batches a step
        raise ConfigError(
            f"train.grad_accum must be at most 64, got {t.grad_accum}: raise train.batch_size"
        )
    for name in ("save_every_steps", "eval_every_steps"):
        if getattr(t, name) is not None and getattr(t, name) < 1:
            raise ConfigError(f"train.{name} must be >= 1 or null, got {getattr(t, name)}")
    if t.max_steps is not None and t.max_steps < 1:
        raise ConfigError(f"train.max_steps must be >= 1 or null, got {t.max_steps}")
    if t.max_steps is None and t.epochs <= 0:
        raise ConfigError(f"train.epochs must be > 0, got {t.epochs}")
    if not 0.0 <= t.warmup_ratio <= 1.0:
        raise ConfigError(f"train.warmup_ratio must be in [0, 1], got {t.warmup_ratio}")
    return cfg


def encoder_heads(cfg: DropConfig) -> tuple[int, str] | None:
    """The attention heads per layer of the encoder a run starts from and where that is
    written (``model.init``'s encoder_config.json, else ``model.encoder``'s config.json), or
    None while that file is not there (a checkpoint an earlier run or a grid's pre-training
    arm is still to write: :func:`structqa.ncbert.loop.run` checks again before training)."""
    m = cfg.model
    try:
        if m.init is not None:
            file = Path(m.init).expanduser() / "encoder_config.json"
            return int(read_json(file)["num_heads"]), f"model.init, {file}"
        file = resolve_encoder_path(m.encoder) / "config.json"
        return int(read_json(file)["num_attention_heads"]), f"model.encoder {m.encoder!r}, {file}"
    except (OSError, KeyError, TypeError, ValueError):
        return None


def load_drop_config(
    path: str | Path | None = None, overrides: list[str] | None = None
) -> DropConfig:
    """Defaults <- YAML <- ``section.key=value`` overrides, validated."""
    return validate(load_config(path, overrides, cls=DropConfig))


__all__ = [
    "DropConfig",
    "DropDataConfig",
    "DropModelConfig",
    "DropTrainConfig",
    "load_drop_config",
    "validate",
]
