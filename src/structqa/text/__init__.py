"""Linguistic annotation (spaCy): sentences, entities, noun chunks and words, cached per text."""

from structqa.text.annotate import (
    DEFAULT_MODEL,
    Annotation,
    Annotator,
    annotation_from_doc,
    entity_token_mask,
    group_tokens,
    text_key,
    token_span_ids,
)

__all__ = [
    "DEFAULT_MODEL",
    "Annotation",
    "Annotator",
    "annotation_from_doc",
    "entity_token_mask",
    "group_tokens",
    "text_key",
    "token_span_ids",
]
