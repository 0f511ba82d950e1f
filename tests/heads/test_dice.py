"""DICE loss (Eq. 7): hand-computed values, seeded sampling, gradients, zero vectors."""

from __future__ import annotations

import math

import pytest
import torch

from structqa.heads.dice import (
    cosine_distance,
    dice_loss,
    relative_distance,
    sample_number_pairs,
)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (2.0, 6.0, 1.0),  # 2*4 / (2+6)
        (6.0, 2.0, 1.0),  # symmetric
        (3.0, 3.0, 0.0),
        (0.0, 0.0, 0.0),  # 0/0 is defined as 0
        (0.0, 5.0, 2.0),  # 2*5 / 5: zero is maximally far from anything else
        (-1.0, 1.0, 2.0),  # 2*2 / (1+1)
        (10.0, 11.0, 2 / 21),  # 2*1 / 21
    ],
)
def test_relative_distance(a: float, b: float, expected: float) -> None:
    got = relative_distance(torch.tensor([a]), torch.tensor([b]))
    assert got.item() == pytest.approx(expected)


def test_cosine_distance_by_hand() -> None:
    u = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    v = torch.tensor([[1.0, 1.0], [-2.0, 0.0], [0.0, 5.0], [6.0, 8.0]])
    # 1 - 1/sqrt(2); 1 - (-1) = 2; orthogonal: 1; parallel: 0
    expected = torch.tensor([1 - 1 / math.sqrt(2), 2.0, 1.0, 0.0])
    torch.testing.assert_close(cosine_distance(u, v), expected)


def test_cosine_distance_of_zero_vectors_is_one_with_finite_gradient() -> None:
    u = torch.zeros(2, 3, requires_grad=True)
    v = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]], requires_grad=True)
    d = cosine_distance(u, v)
    torch.testing.assert_close(d, torch.tensor([1.0, 1.0]))  # cos taken as 0
    d.sum().backward()
    assert bool(torch.isfinite(u.grad).all()) and bool(torch.isfinite(v.grad).all())


def two_examples() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row 0: numbers 2 and 6 at tokens 0, 1 with states (1, 0), (1, 1).
    Row 1: numbers 3 and 3 at tokens 2, 0 with states (-1, 0) at 0, (1, 0) at 2.
    Row 2: a single number (no pair)."""
    states = torch.tensor(
        [
            [[1.0, 0.0], [1.0, 1.0], [9.0, 9.0]],
            [[-1.0, 0.0], [9.0, 9.0], [1.0, 0.0]],
            [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
        ]
    )  # (B=3, N=3, D=2); 9s are never read
    positions = torch.tensor([[0, 1], [2, 0], [1, -1]])
    values = torch.tensor([[2.0, 6.0], [3.0, 3.0], [7.0, 0.0]])
    return states, positions, values


def test_dice_loss_by_hand() -> None:
    states, positions, values = two_examples()
    # row 0: target 2*|2-6|/(2+6) = 1; d_cos = 1 - 1/sqrt(2); (1 - d_cos)^2 = 1/2
    # row 1: target 0; cos((1,0), (-1,0)) = -1 so d_cos = 2; (0 - 2)^2 = 4
    # every pair of a row is that row's only pair (either order, same value): with 3 pairs
    # per example the mean is (3 * 1/2 + 3 * 4) / 6 = 2.25; row 2 adds nothing
    loss = dice_loss(states, positions, values, pairs_per_example=3, generator=gen())
    assert loss.item() == pytest.approx(2.25)
    only_first = dice_loss(states[:1], positions[:1], values[:1], 5, gen())
    assert only_first.item() == pytest.approx(0.5)


def test_dice_loss_zero_values_and_zero_vectors() -> None:
    states = torch.zeros(1, 2, 4)
    # numbers 1 and 2 on zero vectors: target 2*1/3 = 2/3; cos 0 -> d_cos 1; (2/3 - 1)^2 = 1/9
    loss = dice_loss(states, torch.tensor([[0, 1]]), torch.tensor([[1.0, 2.0]]), 2, gen())
    assert loss.item() == pytest.approx(1 / 9)
    # numbers 0 and 0: 0/0 -> target 0; orthogonal states: d_cos 1; (0 - 1)^2 = 1
    states = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    loss = dice_loss(states, torch.tensor([[0, 1]]), torch.tensor([[0.0, 0.0]]), 2, gen())
    assert loss.item() == pytest.approx(1.0)


def test_dice_loss_gradient_flows_to_the_number_states_only() -> None:
    states, positions, values = two_examples()
    states[1, 0] = torch.tensor([0.0, 1.0])  # not antiparallel: cos is not at its minimum
    states.requires_grad_(True)
    dice_loss(states, positions, values, 3, gen()).backward()
    grad = states.grad
    assert grad is not None and bool(torch.isfinite(grad).all())
    read = torch.zeros(3, 3, dtype=torch.bool)
    read[0, 0] = read[0, 1] = read[1, 0] = read[1, 2] = True
    assert bool(grad[read].abs().sum(-1).gt(0).all())
    assert bool((grad[~read] == 0).all())


def test_dice_loss_gradient_matches_finite_differences() -> None:
    torch.manual_seed(0)
    states = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[0, 3], [1, 2]])
    values = torch.tensor([[4.0, 10.0], [-2.0, 5.0]], dtype=torch.float64)

    def f(s: torch.Tensor) -> torch.Tensor:  # two numbers per row: sampling cannot matter
        return dice_loss(s, positions, values, 2, gen()).double()

    assert torch.autograd.gradcheck(f, (states,))


def test_zero_vectors_give_finite_gradients() -> None:
    states = torch.zeros(1, 3, 8, requires_grad=True)
    loss = dice_loss(states, torch.tensor([[0, 1, 2]]), torch.tensor([[1.0, 5.0, 0.0]]), 4, gen())
    loss.backward()
    assert bool(torch.isfinite(loss)) and bool(torch.isfinite(states.grad).all())


def test_no_pairs_is_a_differentiable_zero() -> None:
    states = torch.randn(2, 4, 3, requires_grad=True)
    positions = torch.tensor([[2, -1, -1], [-1, -1, -1]])  # at most one number per example
    loss = dice_loss(states, positions, torch.ones(2, 3), 4, gen())
    assert loss.item() == 0.0
    loss.backward()
    assert states.grad is not None and bool((states.grad == 0).all())


def test_half_precision_states_give_a_float32_loss() -> None:
    states, positions, values = two_examples()
    loss = dice_loss(states.bfloat16(), positions, values, 3, gen())
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(2.25, rel=1e-2)


# -- sampling ---------------------------------------------------------------------------------


def test_sampling_is_reproducible_with_a_seed() -> None:
    positions = torch.tensor([[5, 1, 7, 3, 9], [2, 4, -1, -1, -1]])
    a = sample_number_pairs(positions, 6, gen(123))
    b = sample_number_pairs(positions, 6, gen(123))
    c = sample_number_pairs(positions, 6, gen(124))
    for x, y in ((a.row, b.row), (a.first, b.first), (a.second, b.second)):
        assert torch.equal(x, y)
    assert not (torch.equal(a.first, c.first) and torch.equal(a.second, c.second))
    torch.manual_seed(0)  # the global generator plays no part
    states = torch.randn(2, 10, 4)
    values = torch.arange(10.0).view(2, 5)
    first = dice_loss(states, positions, values, 6, gen(7))
    torch.manual_seed(1)
    assert torch.equal(first, dice_loss(states, positions, values, 6, gen(7)))


def test_sampled_pairs_are_distinct_valid_numbers_of_one_example() -> None:
    # padding may sit anywhere in a row
    positions = torch.tensor([[-1, 4, -1, 7, 9], [3, -1, -1, -1, -1], [-1, -1, 0, -1, 8]])
    pairs = sample_number_pairs(positions, 50, gen())
    assert pairs.row.tolist() == [0] * 50 + [2] * 50  # row 1 has one number: no pair
    assert bool((pairs.first != pairs.second).all())
    assert bool((positions[pairs.row, pairs.first] >= 0).all())
    assert bool((positions[pairs.row, pairs.second] >= 0).all())
    row2 = pairs.row == 2
    assert set(zip(pairs.first[row2].tolist(), pairs.second[row2].tolist(), strict=True)) == {
        (2, 4),
        (4, 2),
    }


def test_sampling_covers_ordered_pairs_evenly() -> None:
    positions = torch.tensor([[0, 1, 2]])
    pairs = sample_number_pairs(positions, 6000, gen())
    counts: dict[tuple[int, int], int] = {}
    for p in zip(pairs.first.tolist(), pairs.second.tolist(), strict=True):
        counts[p] = counts.get(p, 0) + 1
    assert set(counts) == {(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)}
    assert all(800 < c < 1200 for c in counts.values())  # 1000 expected each
