"""Configuration of continued masked-LM pre-training (``structqa pretrain CONFIG.yaml``).

Nested dataclasses like :class:`structqa.config.Config`, loaded with the same
``load_config(path, overrides, cls=PretrainConfig)`` (unknown keys are errors naming the closest
valid key); :func:`validate` then checks the values that depend on each other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from structqa.config import ConfigError, Optimisation, load_config, setting
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
    encoder: str = setting(
        "default",
        "'default' (all-MiniLM-L6-v2), a local HF BERT directory, or 'scratch' (random init)",
    )
    # block spec, e.g. [sa, naa, ffn]; a checkpoint of another block is converted with
    # convert_stacking (added sub-layers start as the identity). None keeps the checkpoint's.
    block: list[str] | None = setting(
        None, "encoder sub-layer stacking, e.g. [sa, naa, ffn]; null: the checkpoint's"
    )
    added_init: str = setting(
        "copy", "sub-layers added by a new block: copy (of a neighbour) | random"
    )
    # Table 8 attention variants (their parameters start at zero: function preserved); a
    # checkpoint's own variants are kept when none is set here
    relative_keys: bool = setting(False, "relative-position keys in self-attention (ANNA Table 8)")
    relative_values: bool = setting(
        False, "relative-position values in self-attention (ANNA Table 8)"
    )
    max_distance: int = setting(16, "relative positions are clipped to +-max_distance")
    entity_bias: bool = setting(
        False, "entity-aware attention bias (ANNA Table 8; needs spaCy entities)"
    )
    dropout: float | None = setting(None, "hidden dropout; null: the checkpoint's")
    attention_dropout: float | None = setting(
        None, "attention-probability dropout; null: the checkpoint's"
    )
    # ANNA's noun-phrase-preserving tokenizer (Table 5): add up to np_vocab noun-phrase words
    # that WordPiece splits (seen >= np_min_count times in the training chunks) to the
    # vocabulary, whole; new embeddings start at the mean of their pieces. 0: off.
    np_vocab: int = setting(
        0, "add up to N whole noun-phrase words to the vocabulary (ANNA Table 5); 0: off"
    )
    np_min_count: int = setting(
        2, "a noun-phrase word must occur this often in the corpus to be added"
    )
    # scratch only
    tokenizer: str = setting(
        "default", "scratch: the checkpoint directory whose tokenizer is used ('default': MiniLM's)"
    )
    hidden: int = setting(256, "scratch: hidden size")
    layers: int = setting(4, "scratch: encoder layers")
    heads: int = setting(4, "scratch: attention heads")
    intermediate: int | None = setting(None, "scratch: feed-forward size; null: 4 x hidden")

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
    corpus: str = setting(
        "runs/anna/corpus",
        "a `structqa corpus` directory, a JSONL file of {text} lines, or a text file",
    )
    dir: str | None = setting(
        None, "data root for a relative corpus path that does not exist as given"
    )
    heldout_fraction: float = setting(
        0.05, "share of the chunks held out for the MLM loss/accuracy (by chunk id)"
    )
    max_seq_len: int = setting(256, "tokens per window; longer chunks are cut into several windows")
    spacy_model: str = setting(
        DEFAULT_MODEL, "spaCy pipeline that annotates chunks without annotations"
    )
    annotation_cache: str | None = setting(None, "JSONL cache of on-the-fly annotations")


# masking.SCHEMES' names (tests/pretrain hold them equal)
MaskingScheme = Literal[
    "token", "whole_word", "word_pos", "entity", "noun_phrase", "anna", "anna_mixed"
]


@dataclass
class PretrainMaskingConfig:
    # token | whole_word | word_pos | entity | noun_phrase | anna | anna_mixed
    # (masking.SCHEMES); word_pos masks whole words and gives the encoder a POS-tag input
    # embedding (zero-initialized); anna, the recorded runs' scheme, masks as noun_phrase in
    # practice, anna_mixed is the paper's mixture (not measured yet)
    scheme: MaskingScheme = setting(
        "anna", "token | whole_word | word_pos | entity | noun_phrase | anna | anna_mixed"
    )
    probability: float = setting(0.15, "share of the tokens chosen for prediction")
    mask_fraction: float = setting(0.8, "of the chosen tokens, the share replaced by [MASK]")
    random_fraction: float = setting(
        0.1, "of the chosen tokens, the share replaced by a random token"
    )

    def masking(self, seed: int) -> MaskingConfig:
        return MaskingConfig(
            scheme=self.scheme,
            probability=self.probability,
            mask_fraction=self.mask_fraction,
            random_fraction=self.random_fraction,
            seed=seed,
        )


@dataclass
class PretrainTrainConfig(Optimisation):
    output_dir: str = setting("runs/pretrain", "run directory: last/, final/, metrics.jsonl")
    seed: int = setting(0, "seed of the initialisation, masking and batch order")
    lr: float = setting(5e-5, "peak learning rate (AdamW, linear warm-up then decay)")
    # {glob: lr}: parameters whose name matches a glob train at that rate (first match wins;
    # 0 freezes), e.g. {"encoder.layers.*.sublayers.1.*": 1.0e-4}: the NAA sub-layer that a
    # [sa, naa, ffn] block adds to a pre-trained [sa, ffn] encoder
    param_lr: dict[str, float] = setting(
        help="{glob: lr} per-parameter learning rates, first match wins, 0 freezes", factory=dict
    )
    # the parameters matching a `freeze` glob stay fixed for the first `freeze_steps` optimizer
    # steps (0: never), e.g. so that a fresh MLM head settles before its gradients reach a
    # pre-trained encoder; the tied decoder weight is the word embedding, so "encoder.*"
    # holds it too
    freeze_steps: int = setting(
        0, "hold the parameters matching `freeze` fixed for the first N steps (0: never)"
    )
    freeze: list[str] = setting(
        help="globs of the parameters held fixed during freeze_steps", factory=lambda: ["encoder.*"]
    )
    batch_size: int = setting(32, "windows per step (per process)")
    eval_batch_size: int = setting(64, "windows per forward pass on the held-out chunks")
    max_steps: int = setting(10_000, "optimizer steps")
    warmup_ratio: float = setting(0.06, "share of the steps with a linearly rising learning rate")
    eval_every_steps: int | None = setting(
        1000, "held-out MLM loss/accuracy every N steps (also at step 0 and the end)"
    )
    save_every_steps: int | None = setting(
        1000, "save the resumable last/ checkpoint every N steps"
    )


@dataclass
class PretrainConfig:
    model: PretrainModelConfig = setting(
        help="the encoder to pre-train: checkpoint, stacking, attention variants, vocabulary",
        factory=PretrainModelConfig,
    )
    data: PretrainDataConfig = setting(
        help="the corpus and its windows", factory=PretrainDataConfig
    )
    masking: PretrainMaskingConfig = setting(
        help="which tokens the masked-LM objective hides", factory=PretrainMaskingConfig
    )
    train: PretrainTrainConfig = setting(
        help="optimisation, checkpoints, precision", factory=PretrainTrainConfig
    )

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
