"""Start/end query attention patterns (paper, Fig. 2), compared with literal 0/1 matrices.

DyReF rows and columns are [q_s, q_e, t1, t2, t3]; DyREx rows and columns are [q_s, q_e].
"""

from __future__ import annotations

import pytest
import torch

from structqa.attention.masks import and_masks, key_padding, materialize
from structqa.attention.query_masks import (
    DYREF_MASKS,
    PAIR_MASKS,
    dyref_mask,
    dyrex_mask,
    with_prefix_queries,
)


def grid(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


DYREF_EXPECTED = {
    "full": [
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
    ],
    "bidirectional": [
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
    ],
    "causal": [
        [1, 0, 1, 1, 1],  # the start query does not see the end query
        [1, 1, 1, 1, 1],  # the end query sees the start query
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
    ],
    "independent": [
        [1, 0, 1, 1, 1],
        [0, 1, 1, 1, 1],
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
        [0, 0, 1, 1, 1],
    ],
}

DYREX_EXPECTED = {
    "bidirectional": [[1, 1], [1, 1]],
    "causal": [[1, 0], [1, 1]],
    "independent": [[1, 0], [0, 1]],
}


@pytest.mark.parametrize("name", sorted(DYREF_EXPECTED))
def test_dyref_patterns(name: str) -> None:
    got = materialize(dyref_mask(name), 1, 1, 5, 5, "cpu")
    assert got.dtype == torch.bool
    assert torch.equal(got.reshape(5, 5), grid(DYREF_EXPECTED[name]))


@pytest.mark.parametrize("name", sorted(DYREX_EXPECTED))
def test_dyrex_pair_patterns(name: str) -> None:
    got = materialize(dyrex_mask(name), 1, 1, 2, 2, "cpu")
    assert torch.equal(got.reshape(2, 2), grid(DYREX_EXPECTED[name]))


def test_registries_list_exactly_the_paper_variants() -> None:
    assert set(DYREF_MASKS) == set(DYREF_EXPECTED)
    assert set(PAIR_MASKS) == set(DYREX_EXPECTED)


def test_tokens_seeing_queries_turns_bidirectional_into_full() -> None:
    lifted = with_prefix_queries(PAIR_MASKS["bidirectional"], tokens_see_queries=True)
    assert bool(materialize(lifted, 1, 1, 5, 5, "cpu").all())


def test_padding_is_and_ed_per_row() -> None:
    # row 0 has a padded last token; the encoder marks the two queries as always valid
    valid = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    got = materialize(and_masks(key_padding(valid), dyref_mask("causal")), 2, 1, 5, 5, "cpu")
    expected = grid(DYREF_EXPECTED["causal"])
    assert got.shape == (2, 1, 5, 5)
    assert torch.equal(got[1, 0], expected)
    expected[:, 4] = False
    assert torch.equal(got[0, 0], expected)


def test_unknown_names_suggest_the_closest() -> None:
    with pytest.raises(ValueError, match="did you mean 'causal'"):
        dyref_mask("casual")
    with pytest.raises(ValueError, match="unknown DyREx query mask 'full'"):
        dyrex_mask("full")  # there are no tokens in DyREx's query self-attention
