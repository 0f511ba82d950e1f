"""DyReF query source: 2 D new parameters, token states vs the plain encoder, query masks."""

from __future__ import annotations

import pytest
import torch
from head_helpers import tiny_model

from structqa.heads import build_head


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("head", ["dyref", "dyref+joint"])
def test_adds_exactly_the_two_query_vectors(tiny_checkpoint, head: str) -> None:
    model = tiny_model(tiny_checkpoint, head)
    d = model.encoder.hidden_size
    added = n_params(model) - n_params(model.encoder)
    joint = d * d if head.endswith("+joint") else 0  # the joint scorer's W
    assert added == 2 * d + joint
    assert [n for n, _ in model.head.named_parameters()][0] == "queries.q0"


def encode(model, batch):
    inputs = model.head.encoder_inputs(batch)
    return model.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids, **inputs)


@pytest.mark.parametrize("mask", ["bidirectional", "causal", "independent", "full"])
def test_token_states_match_the_plain_encoder_unless_tokens_see_queries(
    tiny_checkpoint, mini_data, mask: str
) -> None:
    model = tiny_model(tiny_checkpoint, "dyref", query_mask=mask)
    batch = mini_data.batch()
    with torch.no_grad():
        plain = model.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        out = encode(model, batch)
    b, n = batch.input_ids.shape
    assert out.last_hidden_state.shape == (b, n + 2, model.encoder.hidden_size)
    tokens = model.head.token_states(out.last_hidden_state)
    real = batch.attention_mask.bool()
    gap = (tokens - plain.last_hidden_state)[real].abs().max().item()
    if mask == "full":
        assert gap > 1e-3
    else:
        assert gap < 1e-5


@pytest.mark.parametrize(
    ("mask", "start_sees_end"),
    [("bidirectional", True), ("causal", False), ("independent", False), ("full", True)],
)
def test_start_query_sees_the_end_query_only_where_the_mask_allows(
    tiny_checkpoint, mini_data, mask: str, start_sees_end: bool
) -> None:
    model = tiny_model(tiny_checkpoint, "dyref", query_mask=mask)
    batch = mini_data.batch()
    with torch.no_grad():
        before = encode(model, batch).last_hidden_state[:, :2]
        model.head.queries.q0[1] += 1.0  # move only the end query's initial vector
        after = encode(model, batch).last_hidden_state[:, :2]
    assert (not torch.allclose(after[:, 0], before[:, 0], atol=1e-6)) == start_sees_end
    assert not torch.allclose(after[:, 1], before[:, 1], atol=1e-6)


def test_encoder_inputs_carry_the_queries_and_the_mask(tiny_checkpoint, mini_data) -> None:
    model = tiny_model(tiny_checkpoint, "dyref")
    batch = mini_data.batch()
    inputs = model.head.encoder_inputs(batch)
    assert set(inputs) == {"prefix", "extra_mask"}
    assert inputs["prefix"].shape == (len(batch), 2, model.encoder.hidden_size)
    assert torch.equal(inputs["prefix"][3], model.head.queries.q0)


def test_unknown_mask_names_the_closest() -> None:
    with pytest.raises(ValueError, match="did you mean 'independent'"):
        build_head("dyref", 32, num_heads=4, query_mask="independant")
