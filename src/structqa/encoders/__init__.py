"""The BERT-family encoder and its extensions (paper Tables 8 and 9).

- :mod:`~structqa.encoders.bert`: the encoder itself (embeddings, post-LN sub-layers ``sa``,
  ``naa``, ``xa``, ``ffn`` stacked by a block spec, HF BERT checkpoints and weight names);
- :mod:`~structqa.encoders.variants`: Table 8 attention variants (relative positions, entity
  bias) as a subclass of its self-attention sub-layer;
- :mod:`~structqa.encoders.build`: the one entry point for making any encoder (plain, stacked,
  variant attention): fresh, from a recorded structure, or from a directory, and saving it;
- :mod:`~structqa.encoders.stacking`: Table 9 stackings made from a trained encoder, keeping its
  function.

Each module imports only those above it in this list. Code outside the package imports these
names from here.
"""

from structqa.encoders.bert import BertEncoder, EncoderConfig, EncoderOutput
from structqa.encoders.build import (
    build_encoder,
    encoder_config_dict,
    encoder_from_config_dict,
    load_encoder,
    save_encoder,
)
from structqa.encoders.stacking import (
    ANNA_BLOCK,
    STACKINGS,
    convert_stacking,
    parse_stacking,
    plan_stacking,
)
from structqa.encoders.variants import (
    AttentionOptions,
    VariantAttentionSublayer,
    attention_options,
    entity_keys,
    entity_keys_if,
)

__all__ = [
    "ANNA_BLOCK",
    "STACKINGS",
    "AttentionOptions",
    "BertEncoder",
    "EncoderConfig",
    "EncoderOutput",
    "VariantAttentionSublayer",
    "attention_options",
    "build_encoder",
    "convert_stacking",
    "encoder_config_dict",
    "encoder_from_config_dict",
    "entity_keys",
    "entity_keys_if",
    "load_encoder",
    "parse_stacking",
    "plan_stacking",
    "save_encoder",
]
