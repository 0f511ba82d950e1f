"""Masking schemes for masked-LM pre-training (paper Table 7 and Sec. 3.2).

A scheme chooses *units* (groups of tokens masked together) level by level until 15 % of the
maskable tokens are selected, then replaces each selected token BERT's way: 80 % ``[MASK]``,
10 % a random token, 10 % unchanged (decided per token). Labels are the original ids on the
selected tokens and -100 elsewhere.

=============  ===========================================  ====================================
scheme         levels, in order                             Table 7 row
=============  ===========================================  ====================================
token          single tokens                                Standard MLM (BERT)
whole_word     words                                        (whole-word masking)
word_pos       words (+ a POS-tag input embedding)          w/POS
entity         named-entity spans, then single tokens       Entity
noun_phrase    noun chunks, then single tokens              Noun phrase
anna           noun chunks, then words, then single tokens  ANNA as first read (see below)
anna_mixed     noun chunks, the words outside them and      ANNA (Sec. 3.2, Fig. 3)
               single tokens, drawn together; then tokens
=============  ===========================================  ====================================

``anna`` takes its levels in turn, and in practice the noun chunks alone fill the budget (a
one-word chunk, "it", fits the last places): it masks what ``noun_phrase`` masks, never a verb
or a preposition, and the Table 7 rows "combined" and "noun-phrase" measured here are the same
experiment (docs/results/anna). The paper masks noun phrases, whole words and single tokens in
one sentence (Sec. 3.2: "we randomly mask tokens not included in the above two cases", Fig. 3):
``anna_mixed`` draws the three kinds of unit in one random order, so each is masked about as
often as it is in the text. The recorded runs used ``anna``; ``anna_mixed`` is not measured yet.

Within a level the units are visited in a random order; a unit is taken when none of its
tokens is taken yet and it fits in what is left of the budget (SpanBERT's rule: a span that
would overshoot is skipped, not cut). The budget is ``max(1, round(0.15 * n))`` for ``n``
maskable tokens (BERT's ``create_pretraining_data``). Schemes ending with single tokens meet
it exactly; word-level schemes can fall short by a token or two when only long words are left.
Words, entities and noun chunks come from spaCy (:mod:`structqa.text.annotate`); a token
belongs to the span holding its first character, so a span's tokens are exactly its word
pieces and span units are unions of word units.

``word_pos`` masks exactly as ``whole_word``; what makes the Table 7 row is its input: the paper
concatenates POS tags to the words, here a POS-tag embedding added to the input embeddings
(``EncoderConfig.pos_vocab_size``, ids from :func:`structqa.text.annotate.pos_tag_ids`; the
pre-training data gives them to every encoder that has the table). The tags stay visible on
masked tokens: they are an input feature, not a prediction target.

Special tokens ([CLS], [SEP], [PAD], ...) and tokens with an empty character range are never
selected nor used as random replacements. Randomness is a numpy Generator seeded from
``(seed, SHA-1 of the example id)``: the same example masks the same way in every run and
worker, and differently under another seed (e.g. ``seed = base_seed + epoch``).
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from structqa.text.annotate import Annotation, group_tokens, token_span_ids

IGNORE_INDEX = -100

#: Scheme name -> unit levels, in the order they are drawn from.
SCHEMES: dict[str, tuple[str, ...]] = {
    "token": ("token",),
    "whole_word": ("word",),
    "word_pos": ("word",),
    "entity": ("entity", "token"),
    "noun_phrase": ("noun_chunk", "token"),
    "anna": ("noun_chunk", "word", "token"),
    "anna_mixed": ("mixed", "token"),
}


def get_scheme(name: str) -> tuple[str, ...]:
    try:
        return SCHEMES[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(SCHEMES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown masking scheme {name!r}{hint} (known: {', '.join(SCHEMES)})"
        ) from None


@dataclass(frozen=True)
class MaskingConfig:
    scheme: str = "anna"
    probability: float = 0.15  # share of the maskable tokens selected for prediction
    mask_fraction: float = 0.8  # of the selected: replaced by [MASK]
    random_fraction: float = 0.1  # of the selected: replaced by a random token
    seed: int = 0

    def __post_init__(self) -> None:
        get_scheme(self.scheme)
        if not 0.0 < self.probability <= 1.0:
            raise ValueError(f"probability must be in (0, 1], got {self.probability}")
        if min(self.mask_fraction, self.random_fraction) < 0 or (
            self.mask_fraction + self.random_fraction > 1.0
        ):
            raise ValueError("mask_fraction and random_fraction must be >= 0 and sum to <= 1")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


@dataclass(frozen=True)
class SelectedUnit:
    """A group of tokens selected together, and the level it was drawn from."""

    level: str  # "noun_chunk", "entity", "word" or "token"
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class MaskedTokens:
    """One masked sequence; arrays are (T,) int64 aligned with the input tokens."""

    input_ids: np.ndarray
    labels: np.ndarray  # original id where selected, IGNORE_INDEX elsewhere
    units: tuple[SelectedUnit, ...]

    @property
    def selected(self) -> np.ndarray:
        return self.labels != IGNORE_INDEX


def example_rng(seed: int, example_id: str) -> np.random.Generator:
    """A Generator that depends only on ``seed`` and ``example_id`` (not on Python's hash
    randomization, the process, or the order examples are visited in)."""
    digest = hashlib.sha1(example_id.encode("utf-8")).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


class Masker:
    """Mask tokenized texts with one scheme.

    mask_token_id / vocab_size / special_ids describe the tokenizer (``Masker.for_tokenizer``
    reads them from a Hugging Face tokenizer).
    """

    def __init__(
        self,
        config: MaskingConfig,
        mask_token_id: int,
        vocab_size: int,
        special_ids: Iterable[int],
    ) -> None:
        self.config = config
        self.levels = get_scheme(config.scheme)
        self.mask_token_id = int(mask_token_id)
        self.special_ids = np.asarray(sorted({int(i) for i in special_ids}), dtype=np.int64)
        self.replacements = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), self.special_ids)
        if not len(self.replacements):
            raise ValueError("no ordinary token in the vocabulary to draw random replacements")

    @classmethod
    def for_tokenizer(cls, tokenizer, config: MaskingConfig) -> Masker:
        if tokenizer.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token")
        return cls(config, tokenizer.mask_token_id, len(tokenizer), tokenizer.all_special_ids)

    def __call__(
        self,
        example_id: str,
        input_ids: Sequence[int] | np.ndarray,
        offsets: Sequence[Sequence[int]] | np.ndarray,
        annotation: Annotation | None = None,
    ) -> MaskedTokens:
        """Mask one sequence: ``input_ids`` (T,) and the (T, 2) char ``offsets`` of its tokens in
        the annotated text (``return_offsets_mapping=True``; special tokens have ``(0, 0)``).

        ``annotation`` (of the same text) is required by every scheme but ``token``.
        """
        ids = np.asarray(input_ids, dtype=np.int64)
        offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        if len(offs) != len(ids):
            raise ValueError(f"{len(ids)} tokens but {len(offs)} offsets")
        if annotation is None and self.levels != ("token",):
            raise ValueError(f"scheme {self.config.scheme!r} needs the text's Annotation")
        maskable = ~np.isin(ids, self.special_ids) & (offs[:, 1] > offs[:, 0])
        n = int(maskable.sum())
        budget = max(1, round(n * self.config.probability)) if n else 0
        rng = example_rng(self.config.seed, example_id)

        word_ids = None
        if annotation is not None and {"word", "mixed"} & set(self.levels):
            word_ids = token_span_ids(annotation.words, offs, maskable)
        taken = np.zeros(len(ids), dtype=bool)
        units: list[SelectedUnit] = []
        for level in self.levels:
            left = budget - int(taken.sum())
            if left <= 0:
                break
            if level == "token":
                free = np.flatnonzero(maskable & ~taken)
                for t in rng.permutation(free)[:left]:
                    taken[t] = True
                    units.append(SelectedUnit("token", (int(t),)))
                continue
            for group in self._units(level, annotation, offs, maskable, word_ids, rng):
                if len(group) <= left and not taken[group].any():
                    taken[group] = True
                    left -= len(group)
                    units.append(SelectedUnit(level, tuple(int(t) for t in group)))
                    if left == 0:
                        break

        out, labels = self._replace(ids, taken, rng)
        return MaskedTokens(input_ids=out, labels=labels, units=tuple(units))

    def _units(
        self,
        level: str,
        annotation: Annotation | None,
        offs: np.ndarray,
        maskable: np.ndarray,
        word_ids: np.ndarray | None,
        rng: np.random.Generator,
    ) -> list[np.ndarray]:
        """The level's units in a random order."""
        assert annotation is not None
        if level == "mixed":  # noun chunks, the words outside them, loose tokens: one order
            assert word_ids is not None
            chunk_ids = token_span_ids(annotation.noun_chunks, offs, maskable)
            chunks = group_tokens(chunk_ids)
            outside = word_ids.copy()
            outside[chunk_ids >= 0] = -1  # (a word is inside a chunk or wholly outside it)
            loose = maskable & (word_ids < 0) & (chunk_ids < 0)
            groups = chunks + group_tokens(outside) + [np.array([t]) for t in np.flatnonzero(loose)]
            return [groups[i] for i in rng.permutation(len(groups))]
        if level == "word":
            assert word_ids is not None
            # tokens outside every word (none with spaCy, which covers all non-space text)
            # count as one-token words
            loose = [np.array([t]) for t in np.flatnonzero(maskable & (word_ids < 0))]
            groups = group_tokens(word_ids) + loose
        else:
            spans = annotation.noun_chunks if level == "noun_chunk" else annotation.entities
            groups = group_tokens(token_span_ids(spans, offs, maskable))
        return [groups[i] for i in rng.permutation(len(groups))]

    def _replace(
        self, ids: np.ndarray, taken: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        out = ids.copy()
        labels = np.full_like(ids, IGNORE_INDEX)
        chosen = np.flatnonzero(taken)
        labels[chosen] = ids[chosen]
        r = rng.random(len(chosen))
        cfg = self.config
        to_mask = chosen[r < cfg.mask_fraction]
        to_random = chosen[(r >= cfg.mask_fraction) & (r < cfg.mask_fraction + cfg.random_fraction)]
        out[to_mask] = self.mask_token_id
        out[to_random] = rng.choice(self.replacements, size=len(to_random))
        return out, labels


__all__ = [
    "IGNORE_INDEX",
    "SCHEMES",
    "MaskedTokens",
    "Masker",
    "MaskingConfig",
    "SelectedUnit",
    "example_rng",
    "get_scheme",
]
