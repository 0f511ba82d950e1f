"""Configuration of continued masked-LM pre-training (``structqa pretrain CONFIG.yaml``).

Nested dataclasses like :class:`structqa.config.Config`, loaded with the same
``load_config(path, overrides, cls=PretrainConfig)`` (unknown keys are errors naming the closest
valid key); :func:`validate` then checks the values that depend on each other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from structqa.config import ConfigError, load_config
from structqa.encoders import AttentionOptions, parse_stacking
from structqa.pretrain.masking import MaskingConfig, get_scheme
from structqa.runtime import use_bf16
from structqa.text.annotate import DEFAULT_MODEL

#: ``model.encoder`` value that builds a randomly initialized encoder from the sizes below.
SCRATCH = "scratch"


@dataclass
class PretrainModelConfig:
    # "default" (the bundled all-MiniLM-L6-v2), a local HF BERT directory (with or without an
    # MLM head), or "scratch" (random init with the sizes below and `tokenizer`'s vocabulary)
    encoder: str = "default"
    # block spec, e.g. [sa, naa, ffn]; a checkpoint of another block is converted with
    # convert_stacking (added sub-layers start as the identity). None keeps the checkpoint's.
    block: list[str] | None = None
    added_init: str = "copy"  # convert_stacking: added sub-layers copy | random
    # Table 8 attention variants (their parameters start at zero: function preserved); a
    # checkpoint's own variants are kept when none is set here
    relative_keys: bool = False
    relative_values: bool = False
    max_distance: int = 16
    entity_bias: bool = False
    dropout: float | None = None  # override hidden dropout (None: the checkpoint's)
    attention_dropout: float | None = None  # override attention-probability dropout
    # ANNA's noun-phrase-preserving tokenizer (Table 5): add up to np_vocab noun-phrase words
    # that WordPiece splits (seen >= np_min_count times in the training chunks) to the
    # vocabulary, whole; new embeddings start at the mean of their pieces. 0: off.
    np_vocab: int = 0
    np_min_count: int = 2
    # scratch only
    tokenizer: str = "default"  # a checkpoint directory whose tokenizer is used
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    intermediate: int | None = None  # default 4 * hidden

    def attention(self) -> AttentionOptions:
        return AttentionOptions(
            relative_keys=self.relative_keys,
            relative_values=self.relative_values,
            max_distance=self.max_distance,
            entity_bias=self.entity_bias,
        )


@dataclass
class PretrainDataConfig:
    # a `structqa corpus` directory (corpus-*.jsonl + annotations-*.jsonl), a JSONL file of
    # {"id"?, "text"} lines or a text file (one chunk per non-empty line)
    corpus: str = "runs/anna/corpus"
    dir: str | None = None  # data root for a relative corpus path that does not exist as is
    heldout_fraction: float = 0.05  # of the chunks, chosen by a hash of the chunk id
    max_seq_len: int = 256  # longer chunks are cut into several windows
    spacy_model: str = DEFAULT_MODEL  # annotates chunks that come without annotations
    annotation_cache: str | None = None  # JSONL cache for on-the-fly annotations


@dataclass
class PretrainMaskingConfig:
    # token | whole_word | word_pos | entity | noun_phrase | anna (masking.SCHEMES); word_pos
    # masks whole words and gives the encoder a POS-tag input embedding (zero-initialized)
    scheme: str = "anna"
    probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1

    def masking(self, seed: int) -> MaskingConfig:
        return MaskingConfig(
            scheme=self.scheme,
            probability=self.probability,
            mask_fraction=self.mask_fraction,
            random_fraction=self.random_fraction,
            seed=seed,
        )


@dataclass
class PretrainTrainConfig:
    output_dir: str = "runs/pretrain"
    seed: int = 0
    lr: float = 5e-5
    # {glob: lr}: parameters whose name matches a glob train at that rate (first match wins;
    # 0 freezes), e.g. {"encoder.layers.*.sublayers.1.*": 1.0e-4}: the NAA sub-layer that a
    # [sa, naa, ffn] block adds to a pre-trained [sa, ffn] encoder
    param_lr: dict[str, float] = field(default_factory=dict)
    # the parameters matching a `freeze` glob stay fixed for the first `freeze_steps` optimizer
    # steps (0: never), e.g. so that a fresh MLM head settles before its gradients reach a
    # pre-trained encoder; the tied decoder weight is the word embedding, so "encoder.*"
    # holds it too
    freeze_steps: int = 0
    freeze: list[str] = field(default_factory=lambda: ["encoder.*"])
    weight_decay: float = 0.01
    batch_size: int = 32
    eval_batch_size: int = 64
    grad_accum: int = 1
    max_steps: int = 10_000
    warmup_ratio: float = 0.06
    max_grad_norm: float = 1.0
    bf16: str = "auto"  # auto | on | off
    eval_every_steps: int | None = 1000  # held-out MLM loss/accuracy (also at step 0 and end)
    save_every_steps: int | None = 1000  # resumable `last/` checkpoints
    log_every_steps: int = 10


@dataclass
class PretrainConfig:
    model: PretrainModelConfig = field(default_factory=PretrainModelConfig)
    data: PretrainDataConfig = field(default_factory=PretrainDataConfig)
    masking: PretrainMaskingConfig = field(default_factory=PretrainMaskingConfig)
    train: PretrainTrainConfig = field(default_factory=PretrainTrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def validate(cfg: PretrainConfig) -> PretrainConfig:
    """Check values the type coercion cannot: ranges, names, combinations."""
    try:
        get_scheme(cfg.masking.scheme)
        cfg.masking.masking(cfg.train.seed)  # probability and fractions
        if cfg.model.block is not None:
            cfg.model.block = list(parse_stacking(cfg.model.block))
        cfg.model.attention()
        use_bf16(cfg.train.bf16, torch.device("cpu"))  # only checks the setting
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if cfg.model.np_vocab < 0 or cfg.model.np_min_count < 1:
        raise ConfigError(
            f"model.np_vocab must be >= 0 and model.np_min_count >= 1, got "
            f"{cfg.model.np_vocab} and {cfg.model.np_min_count}"
        )
    if cfg.model.added_init not in ("copy", "random"):
        raise ConfigError(f"model.added_init must be copy or random, got {cfg.model.added_init!r}")
    if not 0.0 <= cfg.data.heldout_fraction < 1.0:
        raise ConfigError(
            f"data.heldout_fraction must be in [0, 1), got {cfg.data.heldout_fraction}"
        )
    if cfg.data.max_seq_len < 8:
        raise ConfigError(f"data.max_seq_len must be >= 8, got {cfg.data.max_seq_len}")
    tc = cfg.train
    for name in ("batch_size", "eval_batch_size", "grad_accum", "log_every_steps"):
        if getattr(tc, name) < 1:
            raise ConfigError(f"train.{name} must be >= 1, got {getattr(tc, name)}")
    for name in ("eval_every_steps", "save_every_steps"):
        if getattr(tc, name) is not None and getattr(tc, name) < 1:
            raise ConfigError(f"train.{name} must be >= 1 or null, got {getattr(tc, name)}")
    if tc.max_steps < 0:
        raise ConfigError(f"train.max_steps must be >= 0, got {tc.max_steps}")
    if tc.freeze_steps < 0:
        raise ConfigError(f"train.freeze_steps must be >= 0, got {tc.freeze_steps}")
    if tc.freeze_steps and not tc.freeze:
        raise ConfigError("train.freeze_steps is set but train.freeze names no parameters")
    if not 0.0 <= tc.warmup_ratio <= 1.0:
        raise ConfigError(f"train.warmup_ratio must be in [0, 1], got {tc.warmup_ratio}")
    if cfg.model.encoder == SCRATCH:
        m = cfg.model
        if min(m.hidden, m.layers, m.heads) < 1 or m.hidden % m.heads:
            raise ConfigError(
                f"scratch model: hidden ({m.hidden}) must be a positive multiple of heads "
                f"({m.heads}) and layers >= 1"
            )
    return cfg


def load_pretrain_config(
    path: str | Path | None = None, overrides: list[str] | None = None
) -> PretrainConfig:
    """Defaults <- YAML <- ``section.key=value`` overrides, validated."""
    return validate(load_config(path, overrides, cls=PretrainConfig))


__all__ = [
    "SCRATCH",
    "PretrainConfig",
    "PretrainDataConfig",
    "PretrainMaskingConfig",
    "PretrainModelConfig",
    "PretrainTrainConfig",
    "load_pretrain_config",
    "validate",
]
