"""MultiHeadAttention against a hand-written float64 reference, and its no-NaN guard."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from structqa.attention.masks import causal, materialize, padding
from structqa.attention.module import MultiHeadAttention

B, Q, K, D, H = 2, 5, 6, 12, 3


def make_attention(kv_hidden: int | None = None, seed: int = 0) -> MultiHeadAttention:
    torch.manual_seed(seed)
    attn = MultiHeadAttention(D, H, kv_hidden=kv_hidden)
    with torch.no_grad():  # non-zero biases so a dropped bias term would show
        for p in attn.parameters():
            p.normal_(0.0, 0.3)
    return attn.eval()


def reference(
    attn: MultiHeadAttention, x: Tensor, memory: Tensor, mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(E) + mask) V in float64, rows with no allowed key -> zero context."""

    def lin(layer: torch.nn.Linear, t: Tensor) -> Tensor:
        return t.double() @ layer.weight.double().T + layer.bias.double()

    def heads(t: Tensor) -> Tensor:
        b, n, _ = t.shape
        return t.view(b, n, H, D // H).permute(0, 2, 1, 3)  # (B, H, N, E)

    q, k, v = (
        heads(lin(attn.query, x)),
        heads(lin(attn.key, memory)),
        heads(lin(attn.value, memory)),
    )
    scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)  # (B, H, Q, K)
    if mask is not None:
        allowed = mask.expand_as(scores)
        scores = scores.masked_fill(~allowed, -math.inf)
        probs = torch.nan_to_num(scores.softmax(-1), nan=0.0)  # all -inf rows -> 0
    else:
        probs = scores.softmax(-1)
    context = (probs @ v).permute(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], D)
    return lin(attn.output, context), probs


def random_mask(shape: tuple[int, ...], seed: int) -> Tensor:
    """A random boolean mask where every query row allows at least one key."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) < 0.5
    mask[..., 0] |= ~mask.any(-1)
    return mask


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize(
    "mask_kind", ["none", "random_bhqk", "padding_b11k", "causal_11qk"], ids=str
)
def test_self_attention_matches_float64_reference(need_weights: bool, mask_kind: str) -> None:
    attn = make_attention().double()
    torch.manual_seed(1)
    x = torch.randn(B, K, D, dtype=torch.float64)
    mask = {
        "none": None,
        "random_bhqk": random_mask((B, H, K, K), seed=2),
        "padding_b11k": materialize(padding(torch.tensor([4, 6]), K), B, H, K, K, "cpu"),
        "causal_11qk": materialize(causal, B, H, K, K, "cpu"),
    }[mask_kind]
    out, probs = attn(x, mask, need_weights=need_weights)
    want, want_probs = reference(attn, x, x, mask)
    assert out.shape == (B, K, D)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    if need_weights:
        assert probs is not None and probs.shape == (B, H, K, K)
        torch.testing.assert_close(probs, want_probs, rtol=1e-10, atol=1e-10)
    else:
        assert probs is None


@pytest.mark.parametrize("need_weights", [False, True])
def test_cross_attention_matches_float64_reference(need_weights: bool) -> None:
    attn = make_attention(kv_hidden=7).double()
    torch.manual_seed(3)
    x = torch.randn(B, Q, D, dtype=torch.float64)
    memory = torch.randn(B, K, 7, dtype=torch.float64)
    mask = random_mask((B, 1, Q, K), seed=4)
    out, probs = attn(x, mask, memory=memory, need_weights=need_weights)
    want, want_probs = reference(attn, x, memory, mask)
    assert out.shape == (B, Q, D)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    if need_weights:
        torch.testing.assert_close(probs, want_probs.expand(B, H, Q, K), rtol=1e-10, atol=1e-10)


def test_float32_output_is_close_to_float64_reference() -> None:
    attn = make_attention()
    torch.manual_seed(5)
    x = torch.randn(B, K, D)
    mask = random_mask((B, H, K, K), seed=6)
    out, _ = attn(x, mask)
    want, _ = reference(attn, x, x, mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_probabilities_sum_to_one_on_allowed_keys_and_vanish_on_masked() -> None:
    attn = make_attention()
    torch.manual_seed(7)
    x = torch.randn(B, K, D)
    mask = random_mask((B, H, K, K), seed=8)
    _, probs = attn(x, mask, need_weights=True)
    assert probs is not None
    assert bool((probs[~mask] == 0).all())
    assert bool((probs[mask] > 0).all())
    torch.testing.assert_close(probs.sum(-1), torch.ones(B, H, K))


def test_dimension_check_names_both_numbers() -> None:
    with pytest.raises(ValueError, match="10 is not divisible by 3"):
        MultiHeadAttention(10, 3)


# ---- query rows with no allowed key ----------------------------------------------------------


def mask_with_empty_rows() -> Tensor:
    """(B, 1, Q, K): batch row 0 query 1 and batch row 1 query 3 may attend to nothing."""
    mask = random_mask((B, 1, K, K), seed=9)
    mask[0, 0, 1] = False
    mask[1, 0, 3] = False
    return mask


EMPTY = [(0, 1), (1, 3)]


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_query_row_without_allowed_key_gives_zero_context(
    need_weights: bool, autocast: bool
) -> None:
    attn = make_attention()
    torch.manual_seed(10)
    x = torch.randn(B, K, D)
    mask = mask_with_empty_rows()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out, probs = attn(x, mask, need_weights=need_weights)
    assert bool(torch.isfinite(out).all())
    bias = attn.output.bias.detach().to(out.dtype)  # zero context -> only the output bias
    for b, q in EMPTY:
        assert torch.equal(out[b, q], bias)
    if need_weights:
        assert probs is not None and bool(torch.isfinite(probs).all())
        for b, q in EMPTY:
            assert bool((probs[b, :, q] == 0).all())
    # the other rows still match the reference
    want, _ = reference(attn, x, x, mask)
    keep = torch.ones(B, K, dtype=torch.bool)
    for b, q in EMPTY:
        keep[b, q] = False
    tol = 5e-2 if autocast else 1e-5
    torch.testing.assert_close(out[keep].double(), want[keep], rtol=tol, atol=tol)


@pytest.mark.parametrize("need_weights", [False, True])
def test_empty_rows_have_finite_gradients(need_weights: bool) -> None:
    attn = make_attention()
    x = torch.randn(B, K, D, requires_grad=True)
    out, _ = attn(x, mask_with_empty_rows(), need_weights=need_weights)
    out.sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    assert all(bool(torch.isfinite(p.grad).all()) for p in attn.parameters())


def test_padding_shaped_mask_with_no_valid_key_gives_zero_context_in_sdpa_path() -> None:
    attn = make_attention()
    torch.manual_seed(11)
    x = torch.randn(B, K, D)
    mask = materialize(padding(torch.tensor([4, 0]), K), B, H, K, K, "cpu")  # (B, 1, 1, K)
    assert mask.shape == (B, 1, 1, K)
    out, _ = attn(x, mask)
    expected = attn.output.bias.detach().expand(K, D)
    torch.testing.assert_close(out[1], expected)


def test_padding_shaped_mask_with_no_valid_key_gives_zero_context_with_weights() -> None:
    attn = make_attention()
    torch.manual_seed(11)
    x = torch.randn(B, K, D)
    mask = materialize(padding(torch.tensor([4, 0]), K), B, H, K, K, "cpu")
    out, probs = attn(x, mask, need_weights=True)
    assert probs is not None and bool((probs[1] == 0).all())
    torch.testing.assert_close(out[1], attn.output.bias.detach().expand(K, D))


# ---- folded cross-attention (DyREx: few queries, many keys) ------------------------------------


def folded_twin(kv_hidden: int | None = None) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    """The same weights with and without ``fold_memory``."""
    plain = make_attention(kv_hidden=kv_hidden)
    folded = make_attention(kv_hidden=kv_hidden)
    folded.load_state_dict(plain.state_dict())
    folded.fold_memory = True
    return plain, folded


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("mask_kind", ["none", "random_b1qk", "padding_b11k", "empty_rows"])
def test_folded_cross_attention_matches_float64_reference(
    need_weights: bool, mask_kind: str
) -> None:
    _, folded = folded_twin(kv_hidden=7)
    folded = folded.double()
    torch.manual_seed(12)
    x = torch.randn(B, Q, D, dtype=torch.float64)
    memory = torch.randn(B, K, 7, dtype=torch.float64)
    mask = {
        "none": None,
        "random_b1qk": random_mask((B, 1, Q, K), seed=13),
        "padding_b11k": materialize(padding(torch.tensor([3, 6]), K), B, H, Q, K, "cpu"),
        "empty_rows": mask_with_empty_rows()[:, :, :Q],
    }[mask_kind]
    out, probs = folded(x, mask, memory=memory, need_weights=need_weights)
    want, want_probs = reference(folded, x, memory, mask)
    assert out.shape == (B, Q, D)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    if need_weights:
        assert probs is not None
        torch.testing.assert_close(probs, want_probs.expand(B, H, Q, K), rtol=1e-10, atol=1e-10)
    else:
        assert probs is None


def test_folded_cross_attention_has_the_same_gradients() -> None:
    plain, folded = folded_twin()
    torch.manual_seed(14)
    x = torch.randn(B, 2, D)
    memory = torch.randn(B, K, D)
    mask = materialize(padding(torch.tensor([4, 6]), K), B, H, 2, K, "cpu")
    grads = []
    for attn in (plain, folded):
        xx, mm = x.clone().requires_grad_(), memory.clone().requires_grad_()
        out, _ = attn(xx, mask, memory=mm)
        (out * torch.linspace(-1, 1, D)).sum().backward()
        # every parameter gets a gradient (DDP needs them all in the graph); the key bias's
        # is zero up to rounding on both paths
        assert all(p.grad is not None for p in attn.parameters())
        grads.append([xx.grad, mm.grad, *(p.grad for p in attn.parameters())])
    for g_plain, g_folded in zip(*grads, strict=True):
        torch.testing.assert_close(g_folded, g_plain, rtol=1e-4, atol=1e-5)


def test_folded_cross_attention_with_dropout_keeps_the_value_bias_scaled() -> None:
    """Training-mode dropout: the bias term follows the kept probability mass, as in V's rows."""
    plain, folded = folded_twin()
    plain.dropout = folded.dropout = 0.5
    plain.train()
    folded.train()
    torch.manual_seed(15)
    x, memory = torch.randn(B, 2, D), torch.randn(B, K, D)
    torch.manual_seed(16)
    out_f, _ = folded(x, None, memory=memory)
    # the same dropout draw applied by hand to the plain path's probabilities
    torch.manual_seed(16)
    keep = torch.nn.functional.dropout(torch.ones(B, H, 2, K), 0.5, True)
    q = plain.query(x).view(B, 2, H, D // H).transpose(1, 2)
    k = plain.key(memory).view(B, K, H, D // H).transpose(1, 2)
    v = plain.value(memory).view(B, K, H, D // H).transpose(1, 2)
    probs = (q @ k.transpose(-1, -2) / math.sqrt(D // H)).softmax(-1)
    ctx = ((probs * keep) @ v).transpose(1, 2).reshape(B, 2, D)
    torch.testing.assert_close(out_f, plain.output(ctx), rtol=1e-5, atol=1e-5)
