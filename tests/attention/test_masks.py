"""Mask functions, materialized on small sizes and compared with literal 0/1 matrices."""

from __future__ import annotations

import pytest
import torch

from structqa.attention.masks import (
    allowed_keys,
    and_masks,
    causal,
    full,
    key_padding,
    materialize,
    no_self,
    on_heads,
    on_queries,
    or_masks,
    padding,
    same_segment,
    to_additive_bias,
    window,
)


def grid(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


def test_causal_is_lower_triangular_with_diagonal() -> None:
    got = materialize(causal, 1, 1, 4, 4, "cpu")
    expected = grid(
        [
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [1, 1, 1, 1],
        ]
    )
    assert got.dtype == torch.bool
    assert got.shape == (1, 1, 4, 4)
    assert torch.equal(got[0, 0], expected)


def test_causal_rectangular_compares_raw_indices() -> None:
    got = materialize(causal, 1, 1, 2, 4, "cpu")
    assert torch.equal(got[0, 0], grid([[1, 0, 0, 0], [1, 1, 0, 0]]))


def test_no_self_removes_only_the_diagonal() -> None:
    got = materialize(no_self, 1, 1, 4, 4, "cpu")
    expected = grid(
        [
            [0, 1, 1, 1],
            [1, 0, 1, 1],
            [1, 1, 0, 1],
            [1, 1, 1, 0],
        ]
    )
    assert got.shape == (1, 1, 4, 4)
    assert torch.equal(got[0, 0], expected)


def test_window_one_is_tridiagonal() -> None:
    got = materialize(window(1), 1, 1, 5, 5, "cpu")
    expected = grid(
        [
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [0, 1, 1, 1, 0],
            [0, 0, 1, 1, 1],
            [0, 0, 0, 1, 1],
        ]
    )
    assert torch.equal(got[0, 0], expected)


def test_window_zero_is_the_identity() -> None:
    got = materialize(window(0), 1, 1, 3, 3, "cpu")
    assert torch.equal(got[0, 0], grid([[1, 0, 0], [0, 1, 0], [0, 0, 1]]))


def test_key_padding_depends_on_batch_and_key_only() -> None:
    valid = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 1]])
    got = materialize(key_padding(valid), 2, 3, 5, 4, "cpu")
    assert got.shape == (2, 1, 1, 4)
    assert torch.equal(got[:, 0, 0], grid([[1, 1, 0, 0], [1, 0, 1, 1]]))


def test_padding_keeps_unused_dims_at_size_one() -> None:
    got = materialize(padding(torch.tensor([2, 4, 0]), 4), 3, 12, 7, 4, "cpu")
    assert got.shape == (3, 1, 1, 4)
    expected = grid(
        [
            [1, 1, 0, 0],
            [1, 1, 1, 1],
            [0, 0, 0, 0],
        ]
    )
    assert torch.equal(got[:, 0, 0], expected)


def test_same_segment_is_block_diagonal_per_batch_row() -> None:
    segments = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]])
    got = materialize(same_segment(segments), 2, 4, 5, 5, "cpu")
    assert got.shape == (2, 1, 5, 5)
    first = grid(
        [
            [1, 1, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 0, 1, 1, 1],
            [0, 0, 1, 1, 1],
            [0, 0, 1, 1, 1],
        ]
    )
    second = grid(
        [
            [1, 0, 0, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 1, 1, 0, 0],
            [0, 0, 0, 1, 1],
            [0, 0, 0, 1, 1],
        ]
    )
    assert torch.equal(got[0, 0], first)
    assert torch.equal(got[1, 0], second)


def test_allowed_keys_three_dims_is_shared_by_heads() -> None:
    table = grid(
        [
            [[1, 0, 1], [0, 1, 0]],
            [[0, 0, 1], [1, 1, 1]],
        ]
    )  # (B=2, Q=2, K=3)
    got = materialize(allowed_keys(table), 2, 4, 2, 3, "cpu")
    assert got.shape == (2, 1, 2, 3)
    assert torch.equal(got[:, 0], table)


def test_allowed_keys_four_dims_is_per_head() -> None:
    table = grid(
        [
            [
                [[1, 0], [0, 1]],
                [[0, 1], [1, 1]],
                [[1, 1], [0, 0]],
            ]
        ]
    )  # (B=1, H=3, Q=2, K=2)
    got = materialize(allowed_keys(table), 1, 3, 2, 2, "cpu")
    assert got.shape == (1, 3, 2, 2)
    assert torch.equal(got, table)


def test_allowed_keys_accepts_integer_tables() -> None:
    table = torch.tensor([[[2, 0], [0, -1]]])  # nonzero means allowed
    got = materialize(allowed_keys(table), 1, 1, 2, 2, "cpu")
    assert torch.equal(got[0, 0], grid([[1, 0], [0, 1]]))


def test_on_heads_restricts_only_the_listed_heads() -> None:
    got = materialize(on_heads(causal, heads=[1, 3], num_heads=4), 1, 4, 3, 3, "cpu")
    assert got.shape == (1, 4, 3, 3)
    lower = grid([[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    everything = grid([[1, 1, 1], [1, 1, 1], [1, 1, 1]])
    assert torch.equal(got[0, 0], everything)
    assert torch.equal(got[0, 1], lower)
    assert torch.equal(got[0, 2], everything)
    assert torch.equal(got[0, 3], lower)


def test_on_queries_restricts_only_the_selected_rows() -> None:
    rows = torch.tensor([[1, 0, 1, 0]])
    got = materialize(on_queries(no_self, rows), 1, 1, 4, 4, "cpu")
    expected = grid(
        [
            [0, 1, 1, 1],
            [1, 1, 1, 1],
            [1, 1, 0, 1],
            [1, 1, 1, 1],
        ]
    )
    assert torch.equal(got[0, 0], expected)


def test_on_queries_rows_differ_per_batch_row() -> None:
    rows = torch.tensor([[1, 1, 1], [0, 0, 1]])
    got = materialize(on_queries(causal, rows), 2, 1, 3, 3, "cpu")
    assert torch.equal(got[0, 0], grid([[1, 0, 0], [1, 1, 0], [1, 1, 1]]))
    assert torch.equal(got[1, 0], grid([[1, 1, 1], [1, 1, 1], [1, 1, 1]]))


def test_and_masks_intersects() -> None:
    got = materialize(and_masks(causal, window(1), no_self), 1, 1, 4, 4, "cpu")
    expected = grid(
        [
            [0, 0, 0, 0],
            [1, 0, 0, 0],
            [0, 1, 0, 0],
            [0, 0, 1, 0],
        ]
    )
    assert torch.equal(got[0, 0], expected)


def test_or_masks_unites() -> None:
    def last_key(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor):
        return kv == 3

    got = materialize(or_masks(and_masks(causal, window(1)), last_key), 1, 1, 4, 4, "cpu")
    expected = grid(
        [
            [1, 0, 0, 1],
            [1, 1, 0, 1],
            [0, 1, 1, 1],
            [0, 0, 1, 1],
        ]
    )
    assert torch.equal(got[0, 0], expected)


def test_combining_padding_with_a_head_mask_broadcasts_to_full_shape() -> None:
    mod = and_masks(padding(torch.tensor([3, 2]), 3), on_heads(no_self, [0], 2))
    got = materialize(mod, 2, 2, 3, 3, "cpu")
    assert got.shape == (2, 2, 3, 3)
    assert torch.equal(got[0, 0], grid([[0, 1, 1], [1, 0, 1], [1, 1, 0]]))
    assert torch.equal(got[0, 1], grid([[1, 1, 1], [1, 1, 1], [1, 1, 1]]))
    assert torch.equal(got[1, 0], grid([[0, 1, 0], [1, 0, 0], [1, 1, 0]]))
    assert torch.equal(got[1, 1], grid([[1, 1, 0], [1, 1, 0], [1, 1, 0]]))


def test_full_allows_everything() -> None:
    got = materialize(full, 2, 3, 2, 5, "cpu")
    assert got.dtype == torch.bool
    assert got.shape == (1, 1, 2, 5)
    assert bool(got.all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_to_additive_bias_maps_true_to_zero_and_false_to_finite_min(dtype: torch.dtype) -> None:
    mask = grid([[1, 0, 1], [0, 0, 1]])
    bias = to_additive_bias(mask, dtype)
    low = torch.finfo(dtype).min
    expected = torch.tensor([[0.0, low, 0.0], [low, low, 0.0]], dtype=dtype)
    assert bias.dtype == dtype
    assert bias.shape == mask.shape
    assert torch.equal(bias, expected)
    assert bool(torch.isfinite(bias).all())


def test_to_additive_bias_keeps_broadcast_shape() -> None:
    mask = materialize(padding(torch.tensor([1, 2]), 3), 2, 4, 3, 3, "cpu")
    bias = to_additive_bias(mask, torch.float32)
    assert bias.shape == (2, 1, 1, 3)
    low = torch.finfo(torch.float32).min
    assert bias[:, 0, 0].tolist() == [[0.0, low, low], [0.0, 0.0, low]]
