"""NC-Mask channels on a hand-made question + passage, drawn as literal 0/1 matrices.

The sequence (N = 13), with columns grouped ``[CLS] | question | [SEP] | sentence 1 |
sentence 2 | [SEP]`` in the drawings::

    0 [CLS] | 1 how  2 many  3 ? | 4 [SEP] | 5 Smith  6 scored  7 3  8 goals  9 .
    | 10 Jones  11 2 | 12 [SEP]

Numbers: 7 ("3"), 11 ("2"). Entities: 5 (Smith), 10 (Jones). Words (may type a number): how,
many, Smith, scored, goals, Jones; punctuation and special tokens are not words.
"""

from __future__ import annotations

import pytest
import torch

from structqa.attention.masks import full, materialize
from structqa.attention.module import MultiHeadAttention
from structqa.attention.nc_masks import (
    NCMaskConfig,
    decoder_number,
    encoder_channels,
    entity_number,
    nc_layer_masks,
    type_number,
)

N = 13
IS_NUMBER = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0]], dtype=torch.bool)
IS_ENTITY = torch.tensor([[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0]], dtype=torch.bool)
IS_WORD = torch.tensor([[0, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0]], dtype=torch.bool)
IS_QUESTION = torch.tensor([[0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
SENTENCE = torch.tensor([[-1, 0, 0, 0, -1, 1, 1, 1, 1, 1, 2, 2, -1]])

ALL = "1 111 1 11111 11 1"


def drawn(*rows: str) -> torch.Tensor:
    """A literal 0/1 matrix; spaces only group columns for the eye."""
    return torch.tensor([[c == "1" for c in r.replace(" ", "")] for r in rows])


def encoder_mask(mod, batch: int = 1, heads: int = 1) -> torch.Tensor:
    return materialize(mod, batch, heads, N, N, "cpu")


ENTITY = drawn(
    ALL,  # [CLS]
    ALL,  # how
    ALL,  # many
    ALL,  # ?
    ALL,  # [SEP]
    ALL,  # Smith
    ALL,  # scored
    "0 000 0 10000 00 0",  # 3 -> Smith, the entity of its sentence (not Jones, not itself)
    ALL,  # goals
    ALL,  # .
    ALL,  # Jones
    "0 000 0 00000 10 0",  # 2 -> Jones
    ALL,  # [SEP]
)


def test_entity_number_allows_entities_of_the_own_sentence_only() -> None:
    got = encoder_mask(entity_number(IS_NUMBER, IS_ENTITY, SENTENCE))
    assert got.shape == (1, 1, N, N)  # the same for every head
    assert torch.equal(got[0, 0], ENTITY)


def test_numbers_tagged_as_entities_are_no_entity_keys() -> None:
    """spaCy tags numbers as entities (CARDINAL, DATE): a number still attends to the word
    entities of its sentence only, never to itself or a number beside it."""
    tagged = IS_ENTITY | IS_NUMBER
    assert torch.equal(encoder_mask(entity_number(IS_NUMBER, tagged, SENTENCE))[0, 0], ENTITY)


def test_noun_chunks_are_just_another_entity_table() -> None:
    chunks = torch.tensor([[0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0]], dtype=torch.bool)  # +goals
    got = encoder_mask(entity_number(IS_NUMBER, chunks, SENTENCE))
    assert torch.equal(got[0, 0, 7], drawn("0 000 0 10010 00 0")[0])  # 3 -> Smith, goals
    assert torch.equal(got[0, 0, 11], ENTITY[11])


def test_type_number_takes_the_m_nearest_words_within_k() -> None:
    got = encoder_mask(type_number(IS_NUMBER, IS_WORD, m=2, k=3))
    expected = ENTITY.clone()
    # 3 (pos 7): words at distance 1 are scored (6) and goals (8) -> both; Smith (5) is third
    expected[7] = drawn("0 000 0 01010 00 0")[0]
    # 2 (pos 11): Jones (10, distance 1) and goals (8, distance 3); [SEP] and '.' are no words
    expected[11] = drawn("0 000 0 00010 10 0")[0]
    assert torch.equal(got[0, 0], expected)


def test_type_number_ties_go_to_the_left_word() -> None:
    got = encoder_mask(type_number(IS_NUMBER, IS_WORD, m=1, k=3))
    assert torch.equal(got[0, 0, 7], drawn("0 000 0 01000 00 0")[0])  # scored, not goals
    assert torch.equal(got[0, 0, 11], drawn("0 000 0 00000 10 0")[0])
    got = encoder_mask(type_number(IS_NUMBER, IS_WORD, m=3, k=3))
    # 3: scored, goals (distance 1), then Smith (left, distance 2) before Jones (right, 3)
    assert torch.equal(got[0, 0, 7], drawn("0 000 0 11010 00 0")[0])


def test_type_number_window_limits_the_reach() -> None:
    got = encoder_mask(type_number(IS_NUMBER, IS_WORD, m=5, k=1))
    assert torch.equal(got[0, 0, 7], drawn("0 000 0 01010 00 0")[0])
    assert torch.equal(got[0, 0, 11], drawn("0 000 0 00000 10 0")[0])
    # every other row is untouched
    rows = [i for i in range(N) if i not in (7, 11)]
    assert bool(got[0, 0, rows].all())


def test_type_number_stays_in_its_numbers_segment() -> None:
    """A passage number's window may reach across the [SEP] into the question; with the
    segments given, its words come from the passage alone."""
    crossing = encoder_mask(type_number(IS_NUMBER, IS_WORD, m=6, k=6))
    assert torch.equal(crossing[0, 0, 7], drawn("0 110 0 11010 10 0")[0])  # how, many too
    passage = ~IS_QUESTION
    kept = encoder_mask(type_number(IS_NUMBER, IS_WORD, m=6, k=6, segment=passage))
    assert torch.equal(kept[0, 0, 7], drawn("0 000 0 11010 10 0")[0])
    # a question number (at "?", 3) types itself by question words only, not Smith or scored
    is_number = IS_NUMBER.clone()
    is_number[0, 3] = True
    got = encoder_mask(type_number(is_number, IS_WORD, m=4, k=4, segment=passage))
    assert torch.equal(got[0, 0, 3], drawn("0 110 0 00000 00 0")[0])
    without = encoder_mask(type_number(is_number, IS_WORD, m=4, k=4))
    assert torch.equal(without[0, 0, 3], drawn("0 110 0 11000 00 0")[0])


@pytest.mark.parametrize(("m", "k"), [(0, 3), (2, 0)])
def test_type_number_with_nothing_in_reach_allows_nothing(m: int, k: int) -> None:
    got = encoder_mask(type_number(IS_NUMBER, IS_WORD, m=m, k=k))
    assert not got[0, 0, 7].any() and not got[0, 0, 11].any()
    assert bool(got[0, 0, 0].all())


def test_type_number_rejects_negative_sizes() -> None:
    with pytest.raises(ValueError, match="m >= 0 and k >= 0"):
        type_number(IS_NUMBER, IS_WORD, m=-1, k=2)


def test_type_number_number_tokens_are_never_words() -> None:
    everything = torch.ones(1, N, dtype=torch.bool)  # even numbers marked as words
    got = encoder_mask(type_number(IS_NUMBER, everything, m=13, k=13))
    assert torch.equal(got[0, 0, 7], drawn("1 111 1 11011 10 1")[0])  # all but 3 and 2


def test_type_number_over_a_multi_token_number() -> None:
    #        0 a   1 b   2 "1"  3 "##4"  4 c   5 d
    is_number = torch.tensor([[0, 0, 1, 1, 0, 0]], dtype=torch.bool)
    is_word = torch.tensor([[1, 1, 0, 0, 1, 1]], dtype=torch.bool)
    number_index = torch.tensor([[-1, -1, 0, 0, -1, -1]])
    per_token = materialize(type_number(is_number, is_word, m=2, k=1), 1, 1, 6, 6, "cpu")
    assert torch.equal(
        per_token[0, 0],
        drawn(
            "111111",
            "111111",
            "010000",  # "1": b only (its right neighbour is a digit)
            "000010",  # "##4": c only
            "111111",
            "111111",
        ),
    )
    per_number = type_number(is_number, is_word, m=2, k=1, number_index=number_index)
    got = materialize(per_number, 1, 1, 6, 6, "cpu")
    assert torch.equal(
        got[0, 0],
        drawn(
            "111111",
            "111111",
            "010010",  # the number "14" as one unit: b on its left, c on its right
            "010010",
            "111111",
            "111111",
        ),
    )


def test_type_number_adjacent_numbers_are_separate_units() -> None:
    # 0 w  1 "5"  2 "7"  3 w: two one-token numbers side by side (number_index 0 and 1)
    is_number = torch.tensor([[0, 1, 1, 0]], dtype=torch.bool)
    is_word = torch.tensor([[1, 0, 0, 1]], dtype=torch.bool)
    number_index = torch.tensor([[-1, 0, 1, -1]])
    got = materialize(type_number(is_number, is_word, 1, 2, number_index), 1, 1, 4, 4, "cpu")
    assert torch.equal(got[0, 0], drawn("1111", "1000", "0001", "1111"))


def test_tables_are_per_batch_row() -> None:
    is_word = torch.cat([IS_WORD, IS_WORD & (torch.arange(N) != 6)])  # row 1 loses "scored"
    mod = type_number(IS_NUMBER.expand(2, N), is_word, m=1, k=3)
    got = encoder_mask(mod, batch=2)
    assert got.shape == (2, 1, N, N)
    assert torch.equal(got[0, 0, 7], drawn("0 000 0 01000 00 0")[0])
    assert torch.equal(got[1, 0, 7], drawn("0 000 0 00010 00 0")[0])  # goals, the next nearest


def test_entity_or_type_unites_the_channels() -> None:
    mod = nc_layer_masks(
        [entity_number(IS_NUMBER, IS_ENTITY, SENTENCE), type_number(IS_NUMBER, IS_WORD, 1, 3)],
        heads=[0],
        num_heads=1,
    )
    expected = ENTITY.clone()
    expected[7] = drawn("0 000 0 11000 00 0")[0]  # Smith (entity) + scored (type)
    expected[11] = drawn("0 000 0 00000 10 0")[0]  # Jones is both
    assert torch.equal(encoder_mask(mod)[0, 0], expected)


def test_nc_layer_masks_on_k_of_h_heads() -> None:
    mod = nc_layer_masks([entity_number(IS_NUMBER, IS_ENTITY, SENTENCE)], [1, 3], num_heads=4)
    got = encoder_mask(mod, heads=4)
    assert got.shape == (1, 4, N, N)
    everything = torch.ones(N, N, dtype=torch.bool)
    for h, expected in enumerate([everything, ENTITY, everything, ENTITY]):
        assert torch.equal(got[0, h], expected), h


def test_nc_layer_masks_without_channels_or_heads_is_vanilla() -> None:
    channel = entity_number(IS_NUMBER, IS_ENTITY, SENTENCE)
    assert nc_layer_masks([], [0, 1], 2) is full
    assert nc_layer_masks([channel], [], 2) is full


def test_encoder_channels_switch_separately() -> None:
    tables = (IS_NUMBER, IS_ENTITY, SENTENCE, IS_WORD)
    cfg = NCMaskConfig(type_words=1, type_window=3)
    assert len(encoder_channels(cfg, *tables)) == 2
    assert encoder_channels(NCMaskConfig(entity_channel=False, type_channel=False), *tables) == []
    (entity_only,) = encoder_channels(NCMaskConfig(type_channel=False), *tables)
    assert torch.equal(encoder_mask(entity_only)[0, 0], ENTITY)
    (type_only,) = encoder_channels(NCMaskConfig(False, True, 1, 3), *tables)
    assert torch.equal(encoder_mask(type_only)[0, 0, 7], drawn("0 000 0 01000 00 0")[0])


def test_decoder_number_allows_numbers_and_question_tokens() -> None:
    got = materialize(decoder_number(IS_NUMBER, IS_QUESTION), 1, 2, 3, N, "cpu")
    assert got.shape == (1, 1, 1, N)  # the same for every decoder query and head
    row = "0 111 0 00100 01 0"  # how many ? | 3 | 2
    assert torch.equal(got[0, 0].expand(3, N), drawn(row, row, row))


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_number_with_no_allowed_key_gets_zeros_not_nan(need_weights: bool) -> None:
    torch.manual_seed(0)
    no_entities = torch.zeros_like(IS_ENTITY)
    mask = encoder_mask(entity_number(IS_NUMBER, no_entities, SENTENCE), heads=2)
    assert not mask[0, 0, 7].any() and not mask[0, 0, 11].any()
    attn = MultiHeadAttention(hidden=8, heads=2).eval()
    x = torch.randn(1, N, 8, requires_grad=True)
    out, probs = attn(x, mask, need_weights=need_weights)
    assert bool(torch.isfinite(out).all())
    # the blocked rows attend to nothing: only the output projection's bias is left
    for row in (7, 11):
        torch.testing.assert_close(out[0, row], attn.output.bias)
    # every other row attends as without a mask
    unmasked, _ = attn(x, None, need_weights=need_weights)
    others = [i for i in range(N) if i not in (7, 11)]
    torch.testing.assert_close(out[0, others], unmasked[0, others])
    if probs is not None:
        assert bool(torch.isfinite(probs).all())
        assert float(probs.detach()[0, :, 7].abs().sum()) == 0.0
    out.sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
