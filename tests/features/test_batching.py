"""Dynamic padding and batch orders."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from structqa.features.batching import collate, iterate, length_grouped_batches, sorted_batches
from structqa.features.squad import Feature


def feature(index: int, n_question: int, n_context: int, start: int = 0, end: int = 0) -> Feature:
    """[CLS] q.. [SEP] c.. [SEP] with ids 100 + position, context offsets 10 * t."""
    n = n_question + n_context + 3
    ids = 100 + np.arange(n, dtype=np.int64)
    types = np.zeros(n, dtype=np.int64)
    types[n_question + 2 :] = 1
    offsets = np.full((n, 2), -1, dtype=np.int64)
    ctx = np.arange(n_question + 2, n - 1)
    offsets[ctx, 0] = 10 * np.arange(len(ctx))
    offsets[ctx, 1] = 10 * np.arange(len(ctx)) + 5
    return Feature(index, ids, types, offsets, start, end)


@pytest.fixture
def features() -> list[Feature]:
    return [
        feature(0, 2, 3, start=5, end=6),  # length 8
        feature(1, 3, 7),  # length 13
        feature(2, 1, 1, start=4, end=4),  # length 5
    ]


def test_collate_pads_to_the_batch_max(features: list[Feature]) -> None:
    batch = collate(features, [0, 2], pad_id=7)
    assert batch.input_ids.shape == (2, 8)  # longest of the two, not of all features
    assert batch.input_ids[1].tolist() == [100, 101, 102, 103, 104, 7, 7, 7]
    assert batch.attention_mask.tolist() == [[1] * 8, [1] * 5 + [0] * 3]
    assert batch.token_type_ids[1].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
    assert batch.input_ids.dtype == torch.int64
    assert len(batch) == 2


def test_collate_pads_up_to_a_multiple_when_asked(features: list[Feature]) -> None:
    batch = collate(features, [0, 2], pad_to_multiple=6)
    assert batch.input_ids.shape == (2, 12)  # the longest (8) rounded up to a multiple of 6
    assert batch.attention_mask.sum(1).tolist() == [8, 5]
    assert not batch.answer_mask[:, 8:].any()
    assert collate(features, [1], pad_to_multiple=13).input_ids.shape == (1, 13)


def test_collate_answer_mask_is_context_and_cls(features: list[Feature]) -> None:
    batch = collate(features, [1, 0, 2])
    assert batch.input_ids.shape == (3, 13)
    # feature 1: [CLS] q q q [SEP] c*7 [SEP]; feature 0: [CLS] q q [SEP] c c c [SEP]
    assert batch.answer_mask.dtype == torch.bool
    assert batch.answer_mask.int().tolist() == [
        [1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0],
        [1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0],
        [1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ]


def test_collate_carries_targets_and_indices(features: list[Feature]) -> None:
    batch = collate(features, [2, 0, 1])
    assert batch.start_positions.tolist() == [4, 5, 0]
    assert batch.end_positions.tolist() == [4, 6, 0]
    assert batch.feature_index.tolist() == [2, 0, 1]


def tagged(f: Feature) -> Feature:
    """``f`` with token tags: POS id 1 + position, entities on every third token."""
    n = len(f)
    return replace(f, pos_tag_ids=1 + np.arange(n), entity_mask=np.arange(n) % 3 == 0)


def test_collate_pads_token_tags_with_zeros(features: list[Feature]) -> None:
    plain = collate(features, [0, 2])
    assert plain.pos_tag_ids is None and plain.entity_mask is None
    batch = collate([tagged(f) for f in features], [0, 2])
    assert batch.pos_tag_ids is not None and batch.entity_mask is not None
    assert batch.pos_tag_ids.tolist() == [list(range(1, 9)), [1, 2, 3, 4, 5, 0, 0, 0]]
    assert batch.entity_mask.dtype == torch.bool
    assert batch.entity_mask.int().tolist() == [[1, 0, 0, 1, 0, 0, 1, 0], [1, 0, 0, 1, 0, 0, 0, 0]]
    with pytest.raises(ValueError, match="differ in their token tags"):
        collate([tagged(features[0]), features[1]], [0, 1])


def test_batch_to_keeps_every_field(features: list[Feature]) -> None:
    for feats in (features, [tagged(f) for f in features]):
        batch = collate(feats, [0, 1])
        moved = batch.to("cpu")
        for name, value in batch.__dict__.items():
            if value is None:
                assert getattr(moved, name) is None, name
            else:
                assert torch.equal(getattr(moved, name), value), name


def test_iterate_yields_one_batch_per_index_list(features: list[Feature]) -> None:
    batches = list(iterate(features, [[1], [0, 2]]))
    assert [b.feature_index.tolist() for b in batches] == [[1], [0, 2]]
    assert [b.input_ids.shape[1] for b in batches] == [13, 8]


# ---- batch orders -----------------------------------------------------------------------


def lengths_for(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(10, 385, size=n).tolist()


def padding_cost(lengths: list[int], batches: list[list[int]]) -> int:
    return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in batches)


def test_length_grouped_batches_is_a_permutation() -> None:
    lengths = lengths_for(1003)
    batches = length_grouped_batches(lengths, batch_size=8, seed=1, group_factor=10)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(1003))
    assert all(1 <= len(b) <= 8 for b in batches)
    # one short batch per mega-batch of 80 at most: 12 full mega-batches + a tail of 43
    assert sum(len(b) < 8 for b in batches) <= 13
    assert len(batches) == 12 * 10 + 6


def test_length_grouped_batches_deterministic_per_seed() -> None:
    lengths = lengths_for(500)
    a = length_grouped_batches(lengths, 16, seed=3)
    b = length_grouped_batches(lengths, 16, seed=3)
    c = length_grouped_batches(lengths, 16, seed=4)
    assert a == b
    assert a != c
    assert sorted(map(tuple, a)) != sorted(map(tuple, c))  # different groups, not just order


def test_length_grouped_batches_reduce_padding() -> None:
    lengths = lengths_for(2000, seed=5)
    grouped = length_grouped_batches(lengths, batch_size=16, seed=0)
    order = np.random.default_rng(0).permutation(2000).tolist()
    random_batches = [order[i : i + 16] for i in range(0, 2000, 16)]
    grouped_pad, random_pad = padding_cost(lengths, grouped), padding_cost(lengths, random_batches)
    assert random_pad > 100_000  # uniform lengths in [10, 384] waste a lot when shuffled
    assert grouped_pad < 0.1 * random_pad
    # and the grouped order is still shuffled: batch maxima are not sorted
    maxima = [max(lengths[i] for i in b) for b in grouped]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)


def test_sorted_batches_longest_first() -> None:
    lengths = [5, 9, 1, 9, 3, 7, 2]
    batches = sorted_batches(lengths, batch_size=3)
    assert batches == [[1, 3, 5], [0, 4, 6], [2]]  # stable among the two 9s
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)


def test_sorted_batches_cover_every_index() -> None:
    lengths = lengths_for(101, seed=6)
    batches = sorted_batches(lengths, batch_size=10)
    assert sorted(i for b in batches for i in b) == list(range(101))
    assert [len(b) for b in batches] == [10] * 10 + [1]
    assert max(lengths[i] for i in batches[0]) == max(lengths)
