"""The one entry point for making an encoder: fresh, from a recorded structure, or from a
directory, whatever its blocks (plain BERT, a Table 9 stacking) and attention (plain, Table 8
variants).

- :func:`build_encoder`: a freshly initialized :class:`~structqa.encoders.bert.BertEncoder` of
  an :class:`~structqa.encoders.bert.EncoderConfig` (its ``block`` is the stacking), with the
  self-attention sub-layers carrying :class:`~structqa.encoders.variants.AttentionOptions`;
- :func:`load_encoder` / :func:`save_encoder`: an HF-format directory (``config.json`` with
  ``structqa_block`` and the attention options, ``model.safetensors``) that HF
  ``BertModel`` and ``BertEncoder.from_pretrained`` also read when the encoder is plain;
- :func:`encoder_config_dict` / :func:`encoder_from_config_dict`: the structure recorded in
  training checkpoints (``encoder_config.json``).

A pretrained encoder changes its stacking by :func:`structqa.encoders.stacking.convert_stacking`,
which keeps its function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from torch import Tensor

from structqa.encoders.bert import (
    SELF_ATTENTION_KINDS,
    BertEncoder,
    EncoderConfig,
    encoder_hf_state,
    load_state_dict,
)
from structqa.encoders.variants import AttentionOptions, VariantAttentionSublayer, attention_options
from structqa.io import read_json, write_json
from structqa.manifest import verify_manifest

_ATTENTION_KEY = "structqa_attention"  # config.json entry for the attention options


def build_encoder(cfg: EncoderConfig, attention: AttentionOptions | None = None) -> BertEncoder:
    """A freshly initialized encoder whose self-attention sub-layers carry ``attention``."""
    encoder = BertEncoder(cfg)
    if attention is None or attention.plain:
        return encoder
    for layer in encoder.layers:
        for j, kind in enumerate(layer.spec):
            if kind in SELF_ATTENTION_KINDS:
                sub = VariantAttentionSublayer(cfg, attention, neighbor_aware=kind == "naa")
                sub.apply(encoder._init_weights)
                sub.reset_variant_parameters()
                layer.sublayers[j] = sub
    return encoder


def save_encoder(
    encoder: BertEncoder,
    path: str | Path,
    extra: dict[str, Tensor] | None = None,
    prefix: str = "",
    architecture: str = "BertModel",
) -> Path:
    """Write ``config.json`` (with ``structqa_block`` and any attention options) and
    ``model.safetensors`` (``encoder_hf_state`` with ``prefix``, plus ``extra`` weights) to
    ``path``; ``prefix="bert."`` and ``extra`` heads make e.g. a ``BertForMaskedLM`` layout."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = encoder.config.to_hf()
    config["architectures"] = [architecture]
    options = attention_options(encoder)
    if not options.plain:
        config[_ATTENTION_KEY] = asdict(options)
    write_json(path / "config.json", config)
    state = encoder_hf_state(encoder, prefix)
    state.update(extra or {})
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def load_encoder(path: str | Path, block: Sequence[str] | None = None) -> BertEncoder:
    """Load what :func:`save_encoder` wrote (or any HF BERT directory), variants included.

    Plain encoders also load with ``BertEncoder.from_pretrained``; encoders with attention
    variants need this function, since their options live in ``config.json``. ``block``
    overrides the block spec as ``BertEncoder.from_pretrained`` does (weights placed by
    ``hf_to_structqa_key``, no function-preserving conversion: see :func:`convert_stacking`).
    """
    path = Path(path)
    verify_manifest(path)  # structqa's own saves carry one; an HF download has none
    hf = read_json(path / "config.json")
    options = AttentionOptions(**hf.get(_ATTENTION_KEY, {}))
    cfg = EncoderConfig.from_hf(hf)
    if block is not None:
        cfg = replace(cfg, block=tuple(block))  # re-runs the validation
    encoder = build_encoder(cfg, options)
    encoder.load_hf_state_dict(load_state_dict(path))
    return encoder


def encoder_config_dict(encoder: BertEncoder) -> dict:
    """Everything that rebuilds ``encoder``'s structure (``encoder_config.json`` of training
    checkpoints): its :class:`EncoderConfig` fields and, under ``"attention"``, its variant
    options. Read back by :func:`encoder_from_config_dict`."""
    return {**encoder.config.to_dict(), "attention": asdict(attention_options(encoder))}


def encoder_from_config_dict(d: dict) -> BertEncoder:
    """A freshly initialized encoder of the structure :func:`encoder_config_dict` recorded
    (a dict without ``"attention"``, as older checkpoints wrote it, gives plain attention)."""
    return build_encoder(EncoderConfig.from_dict(d), AttentionOptions(**d.get("attention", {})))
