"""How many DROP questions and number tokens the 2026-11-30 corrections touch: the span
realizations with number answers no longer found inside larger numbers, and the type-number
rows whose words now stay in the number's segment. Run from the repository root."""

from __future__ import annotations

import re

import numpy as np

from structqa.attention.masks import materialize
from structqa.attention.nc_masks import type_number
from structqa.data.drop import read_drop
from structqa.features import drop_features
from structqa.features.drop_features import DropFeatureConfig, collate_drop
from structqa.models.build import load_tokenizer
from structqa.paths import default_encoder_path

FILES = ("drop/drop-train-prefix.json", "drop/drop-contrast-sets.json")


def spans_before(text: str, needle: str, offsets: np.ndarray) -> tuple[list, int]:
    """The span search as it was: only letters and digits bound a match."""
    needle = needle.strip()
    if not needle or not len(offsets):
        return [], 0
    pattern = re.compile(r"(?<![0-9A-Za-z])" + re.escape(needle) + r"(?![0-9A-Za-z])", re.I)
    return drop_features.token_spans(pattern, text, offsets)


def main() -> None:
    tokenizer = load_tokenizer(default_encoder_path())
    cfg = DropFeatureConfig(max_seq_len=512)
    for name in FILES:
        examples = read_drop("../shared/data/" + name).examples
        now, _ = drop_features.featurize_drop_examples(examples, tokenizer, cfg)
        current = drop_features._find_spans
        drop_features._find_spans = spans_before
        try:
            before, _ = drop_features.featurize_drop_examples(examples, tokenizer, cfg)
        finally:
            drop_features._find_spans = current
        changed = sum(
            len(a.passage_spans) != len(b.passage_spans)
            or len(a.question_spans) != len(b.question_spans)
            for a, b in zip(now, before, strict=True)
        )
        rows = moved = questions = 0
        for i in range(0, len(now), 64):
            batch = collate_drop(now[i : i + 64])
            b, n = batch.input_ids.shape
            args = (batch.is_number, batch.is_word, 4, 6, batch.number_index)
            crossing = materialize(type_number(*args), b, 1, n, n, "cpu")[:, 0]
            kept = materialize(type_number(*args, batch.is_passage), b, 1, n, n, "cpu")[:, 0]
            differs = (crossing != kept).any(-1) & batch.is_number
            rows += int(batch.is_number.sum())
            moved += int(differs.sum())
            questions += int(differs.any(-1).sum())
        print(
            f"{name}: {len(examples)} questions; span realizations changed for {changed}; "
            f"type-number rows changed: {moved} of {rows} number tokens, in {questions} questions"
        )


if __name__ == "__main__":
    main()
