"""Masked-LM pre-training: masking schemes (paper Table 7) and the tied MLM head."""

from structqa.pretrain.masking import (
    IGNORE_INDEX,
    SCHEMES,
    MaskedTokens,
    Masker,
    MaskingConfig,
    SelectedUnit,
)
from structqa.pretrain.mlm_head import MaskedLM, MLMHead, MLMOutput, ensure_mlm_head

__all__ = [
    "IGNORE_INDEX",
    "SCHEMES",
    "MLMHead",
    "MLMOutput",
    "MaskedLM",
    "MaskedTokens",
    "Masker",
    "MaskingConfig",
    "SelectedUnit",
    "ensure_mlm_head",
]
