"""NC-Mask channels (NC-BERT, Sec. 3.3.1) as mask functions over one tokenized sequence.

The sequence is ``[CLS] question [SEP] passage [SEP]``. The caller supplies per-token tables
(B, N) built from its annotation, so every channel stays a pure function of them:

- ``is_number``: tokens of numbers (with digit tokenization, every digit/sign/separator token
  of a number is a number token, and each one is a query row of its own),
- ``is_entity`` / ``sentence_id``: named-entity tokens (or noun-chunk tokens: just another
  table) and the sentence each token belongs to,
- ``is_word``: tokens that may type a number (typically non-number, non-special tokens),
- ``is_question``: the question's tokens, for the decoder-number channel.

Encoder channels restrict number-token query rows only (``on_queries``); every other row
attends as before. A number row may attend to what *any* enabled channel allows
(``or_masks``). A number with nothing allowed (no entity in its sentence, no word in reach)
gets an all-False row; :class:`~structqa.attention.module.MultiHeadAttention` outputs zeros
there, so the residual path carries the token. Per the paper a number does not attend to
itself, nor to the other tokens of its own number; add a channel (``or``) for that if wanted.

Dimension letters: B batch, H heads, N tokens, Q queries, K keys, W window offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from structqa.attention.masks import MaskMod, full, on_heads, on_queries, or_masks


def entity_number(is_number: Tensor, is_entity: Tensor, sentence_id: Tensor) -> MaskMod:
    """Entity-number channel (Eq. 5): a number token attends only to entity tokens of its own
    sentence. Tables are (B, N); sentence ids compare by equality (give special tokens an id
    no entity has, or mark them non-entity). Number tokens are no entity keys, though spaCy
    tags numbers as entities (CARDINAL, DATE, QUANTITY): a number does not attend to itself
    nor to the other numbers of its sentence through this channel ("2010" in "in March 2010"
    is not a key, "March" is)."""
    is_entity = is_entity.bool() & ~is_number.bool()

    def entities_of_sentence(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return is_entity[b, kv] & (sentence_id[b, q] == sentence_id[b, kv])

    return on_queries(entities_of_sentence, is_number)


def _span_edges(number_index: Tensor) -> tuple[Tensor, Tensor]:
    """First and last position of the run of equal ``number_index`` (>= 0) each token is in;
    a token outside any number is its own run. (B, N) -> two (B, N) long tensors."""
    n = number_index.shape[-1]
    pos = torch.arange(n, device=number_index.device).expand_as(number_index)
    inside = number_index >= 0
    same_as_prev = torch.zeros_like(inside)
    same_as_prev[:, 1:] = inside[:, 1:] & (number_index[:, 1:] == number_index[:, :-1])
    same_as_next = torch.zeros_like(inside)
    same_as_next[:, :-1] = same_as_prev[:, 1:]
    first = torch.where(same_as_prev, 0, pos).cummax(-1).values
    last_flipped = torch.where(same_as_next, n - 1, pos).flip(-1).cummin(-1).values
    return first, last_flipped.flip(-1)


def _type_number_table(
    is_number: Tensor,
    is_word: Tensor,
    m: int,
    k: int,
    number_index: Tensor | None = None,
    segment: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Which keys each token's type-number row allows, as (left, right, first, last).

    ``left``/``right`` are (B, N, W) bool, W = max(k, 1): ``left[b, i, d - 1]`` allows the
    key ``d`` positions before ``first[b, i]``, ``right[b, i, d - 1]`` the key ``d`` positions
    after ``last[b, i]``; ``first``/``last`` (B, N) are the token's own position, or the edges
    of its number when ``number_index`` groups number tokens into numbers. With ``segment``
    (B, N), a word counts only in the segment of the token's own number.
    """
    if m < 0 or k < 0:
        raise ValueError(f"type-number channel needs m >= 0 and k >= 0, got m={m}, k={k}")
    words = is_word.bool() & ~is_number.bool()
    bsz, n = words.shape
    device = words.device
    if number_index is None:
        first = last = torch.arange(n, device=device).expand(bsz, n)
    else:
        first, last = _span_edges(number_index.to(device))
    # distances 1..k; one slot even for k = 0 (then empty) so the tables are never 0-wide
    d = torch.arange(1, max(k, 1) + 1, device=device)  # (W,)
    rows = torch.arange(bsz, device=device)[:, None, None]

    own = None if segment is None else segment.to(device).gather(1, first)[..., None]

    def candidates(positions: Tensor) -> Tensor:  # (B, N, W) positions -> is a word there
        inside = (positions >= 0) & (positions < n) & (d <= k)
        at = positions.clamp(0, n - 1)
        if own is not None:
            inside = inside & (segment.to(device)[rows, at] == own)
        return words[rows, at] & inside

    left_ok = candidates(first[..., None] - d)  # (B, N, W)
    right_ok = candidates(last[..., None] + d)
    # nearest first; at equal distance the left word comes first: order left1, right1, left2, ...
    interleaved = torch.stack((left_ok, right_ok), dim=-1).flatten(-2)  # (B, N, 2W)
    keep = interleaved & (interleaved.long().cumsum(-1) <= m)
    keep = keep.view(bsz, n, len(d), 2)
    return keep[..., 0], keep[..., 1], first, last


def type_number(
    is_number: Tensor,
    is_word: Tensor,
    m: int,
    k: int,
    number_index: Tensor | None = None,
    segment: Tensor | None = None,
) -> MaskMod:
    """Type-number channel: a number token attends only to the ``m`` nearest word tokens
    within ``k`` positions. Nearest by token distance; at equal distance the word on the
    left wins (the paper does not say; this rule makes the choice deterministic). Number
    tokens are never words, whatever ``is_word`` says. With ``segment`` (B, N: e.g. whether
    a token is the passage's) the words come from the number's own segment only: a passage
    number's type is read from its passage, not from the question across the [SEP] (the
    paper's window exists to keep a number from "irrelevant tokens"); without it the window
    runs over the whole sequence.

    Distance is measured from the token itself, so the digits of "1 ##4 ##5" each see a
    slightly different neighbourhood. With ``number_index`` (B, N; -1 outside numbers, as in
    :class:`~structqa.features.numbers.DigitTokens`), a run of tokens of one number counts
    as one unit: distance is from the number's edges and all its tokens see the same words,
    the paper's "window of size k for every number".
    """
    left, right, first, last = _type_number_table(is_number, is_word, m, k, number_index, segment)

    def nearest_words(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        lo, hi = first[b, q], last[b, q]
        width = left.shape[-1]
        before = (lo - kv).clamp(1, width) - 1  # window slot; meaningful where lo - kv in 1..k
        after = (kv - hi).clamp(1, width) - 1
        in_left = (kv < lo) & (lo - kv <= k) & left[b, q, before]
        in_right = (kv > hi) & (kv - hi <= k) & right[b, q, after]
        return in_left | in_right

    return on_queries(nearest_words, is_number)


def decoder_number(is_number: Tensor, is_question: Tensor) -> MaskMod:
    """Decoder-number channel (Eq. 6), a mask over (decoder queries x encoder keys): every
    decoder query attends only to encoder tokens that are numbers or question tokens.
    Tables are the encoder side's (B, K); ``and`` it with the encoder's key padding."""
    allowed = is_number.bool() | is_question.bool()

    def numbers_and_question(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return allowed[b, kv]

    return numbers_and_question


def nc_layer_masks(channels: Sequence[MaskMod], heads: Sequence[int], num_heads: int) -> MaskMod:
    """The mask of one NC-Mask layer: the channels united (``or``) on the listed heads, the
    other heads unrestricted ("NC-Mask on k of H heads", Tables 4-5). No channel, or no head,
    is a vanilla layer."""
    if not channels or not heads:
        return full
    return on_heads(or_masks(*channels), heads, num_heads)


@dataclass(frozen=True)
class NCMaskConfig:
    """Which encoder channels are on, and the type-number window. The paper gives no values
    for m and k (only m/2 <= k); these defaults are a starting point, not the paper's."""

    entity_channel: bool = True
    type_channel: bool = True
    type_words: int = 4  # m
    type_window: int = 6  # k


def encoder_channels(
    cfg: NCMaskConfig,
    is_number: Tensor,
    is_entity: Tensor,
    sentence_id: Tensor,
    is_word: Tensor,
    number_index: Tensor | None = None,
    segment: Tensor | None = None,
) -> list[MaskMod]:
    """The enabled encoder channels, for :func:`nc_layer_masks`."""
    out: list[MaskMod] = []
    if cfg.entity_channel:
        out.append(entity_number(is_number, is_entity, sentence_id))
    if cfg.type_channel:
        window = (cfg.type_words, cfg.type_window)
        out.append(type_number(is_number, is_word, *window, number_index, segment))
    return out
