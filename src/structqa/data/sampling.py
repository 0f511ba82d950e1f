"""Deterministic training subsets and validation splits.

Choices are made by ranking items on a keyed BLAKE2 hash of ``(seed, key)``, so they depend
only on the seed and the data: not on Python's hash randomization, the Python version's
``random`` algorithms, or the process.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Literal

from structqa.data.overlap import passage_key
from structqa.data.records import Example

TrainSize = int | Literal["all"]


def _rank(seed: int, key: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def parse_train_size(text: str) -> TrainSize:
    """Parse a ``--train-size`` value: a positive integer or ``"all"``."""
    cleaned = text.strip().lower()
    if cleaned == "all":
        return "all"
    try:
        size = int(cleaned)
    except ValueError:
        raise ValueError(f"train size must be a positive integer or 'all', got {text!r}") from None
    if size <= 0:
        raise ValueError(f"train size must be a positive integer or 'all', got {text!r}")
    return size


def train_subset(examples: Sequence[Example], size: TrainSize, seed: int) -> tuple[Example, ...]:
    """Pick ``size`` questions (or all) chosen by ``seed``, returned in their original order.

    Questions are sampled individually, not by paragraph. The same ``(size, seed)`` and pool
    give the same subset in every run and process.
    """
    if size == "all":
        return tuple(examples)
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"train size must be a positive integer or 'all', got {size!r}")
    if size > len(examples):
        raise ValueError(
            f"train size {size} is larger than the pool of {len(examples)} questions; "
            "use a smaller size or 'all'"
        )
    # The index breaks ties (and separates repeated ids if pools were concatenated).
    order = sorted(range(len(examples)), key=lambda i: (_rank(seed, examples[i].id), i))
    chosen = sorted(order[:size])
    return tuple(examples[i] for i in chosen)


def validation_split(
    examples: Sequence[Example], fraction: float, seed: int
) -> tuple[tuple[Example, ...], tuple[Example, ...]]:
    """Split into ``(train, val)`` by passage (:func:`passage_key`), so no paragraph has
    questions in both.

    ``val`` gets whole paragraphs, chosen by ``seed``, until it holds at least ``fraction``
    of the questions. Use it to choose recipes without touching held-out data.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation fraction must be between 0 and 1 (exclusive), got {fraction}")
    # a passage is its text up to case, spacing and punctuation (``passage_key``): the same
    # paragraph repeated with a trailing space on each row of a CSV is one passage; drawn by
    # the text it first appears as (the draw of a file without such variants is unchanged)
    by_passage: dict[str, list[int]] = {}
    for i, example in enumerate(examples):
        by_passage.setdefault(passage_key(example.context), []).append(i)
    if len(by_passage) < 2:
        raise ValueError(
            f"cannot split {len(examples)} questions over {len(by_passage)} context(s) by "
            "context: need at least two distinct contexts"
        )
    target = max(1, round(fraction * len(examples)))
    first = {key: examples[indices[0]].context for key, indices in by_passage.items()}
    passages = sorted(by_passage, key=lambda k: (_rank(seed, first[k]), by_passage[k][0]))
    val_indices: set[int] = set()
    for key in passages[:-1]:  # the last passage always stays in train
        if len(val_indices) >= target:
            break
        val_indices.update(by_passage[key])
    train = tuple(e for i, e in enumerate(examples) if i not in val_indices)
    val = tuple(e for i, e in enumerate(examples) if i in val_indices)
    return train, val


def passage_folds(examples: Sequence[Example], folds: int, seed: int) -> dict[str, int]:
    """The fold (0..folds-1) of each passage of ``examples`` (by ``passage_key``): passages in
    first-seen order, shuffled by ``seed``, dealt round-robin (``structqa split``'s folds)."""
    passages = list(dict.fromkeys(passage_key(ex.context) for ex in examples))
    random.Random(seed).shuffle(passages)
    return {key: i % folds for i, key in enumerate(passages)}
