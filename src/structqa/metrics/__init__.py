"""Evaluation metrics over plain dicts (no models, no readers)."""

from structqa.metrics.squad import (
    best_thresholds,
    exact_match,
    f1_v1,
    f1_v2,
    get_tokens,
    gold_from_squad_json,
    normalize_answer,
    raw_scores_v2,
    squad_v1,
    squad_v2,
)

__all__ = [
    "best_thresholds",
    "exact_match",
    "f1_v1",
    "f1_v2",
    "get_tokens",
    "gold_from_squad_json",
    "normalize_answer",
    "raw_scores_v2",
    "squad_v1",
    "squad_v2",
]
