"""Linguistic annotation (spaCy): sentences, entities, noun chunks, words, POS; cached per text."""

from structqa.text.annotate import (
    DEFAULT_MODEL,
    NUM_POS_IDS,
    POS_IDS,
    UPOS_TAGS,
    Annotation,
    Annotator,
    annotation_from_doc,
    entity_token_mask,
    group_tokens,
    pos_tag_ids,
    text_key,
    token_span_ids,
)

__all__ = [
    "DEFAULT_MODEL",
    "NUM_POS_IDS",
    "POS_IDS",
    "UPOS_TAGS",
    "Annotation",
    "Annotator",
    "annotation_from_doc",
    "entity_token_mask",
    "group_tokens",
    "pos_tag_ids",
    "text_key",
    "token_span_ids",
]
