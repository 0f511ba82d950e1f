"""The CPU inference kernels against the stock operators: attention by rows against a float64
reference and SDPA, oneDNN linear (GELU fused) against nn.Linear, and a whole encoder with the
fast path on and off; and that the fast path is never taken where autograd is recording."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from structqa.attention.kernels import attend_by_rows, fast_path, linear, stock_kernels
from structqa.attention.masks import materialize, padding, to_additive_bias
from structqa.encoders.bert import BertEncoder, EncoderConfig


def reference_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None) -> Tensor:
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return scores.softmax(-1) @ v.double()


@pytest.mark.parametrize("mask_kind", ["none", "padding_b11k", "random_bhqk"])
@pytest.mark.parametrize("queries", [7, 3])  # self-attention shape, and fewer queries than keys
def test_attend_by_rows_matches_float64_reference(mask_kind: str, queries: int) -> None:
    g = torch.Generator().manual_seed(0)
    b, h, k_len, e = 3, 4, 7, 8
    q = torch.randn(b, h, queries, e, generator=g)
    k, v = torch.randn(b, h, k_len, e, generator=g), torch.randn(b, h, k_len, e, generator=g)
    allowed = {
        "none": None,
        "padding_b11k": materialize(padding(torch.tensor([7, 4, 1]), k_len), b, h, 1, k_len, "cpu"),
        "random_bhqk": torch.rand(b, h, queries, k_len, generator=g) < 0.6,
    }[mask_kind]
    if allowed is not None:
        allowed[..., 0] = True  # every query row may attend somewhere
    bias = None if allowed is None else to_additive_bias(allowed, q.dtype)
    out = attend_by_rows(q, k, v, bias)
    assert out.shape == (b, h, queries, e) and out.dtype == torch.float32
    torch.testing.assert_close(
        out.double(), reference_attention(q, k, v, allowed), rtol=1e-5, atol=1e-6
    )
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(out, sdpa, rtol=1e-5, atol=1e-5)


def test_attend_by_rows_under_autocast_takes_fp32_operands() -> None:
    """A decoder's fp32 queries against bf16 encoder memory, inside a bf16 autocast region
    (how GenBERT decodes with native bf16): the product runs in bf16, as autocast would run
    it, instead of failing on the fp32 output."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 1, 8, generator=g)  # one decoding step
    k = torch.randn(2, 4, 9, 8, generator=g).bfloat16()
    v = torch.randn(2, 4, 9, 8, generator=g).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attend_by_rows(q, k, v, None)
    assert out.dtype == torch.bfloat16
    want = reference_attention(q, k.float(), v.float(), None)
    torch.testing.assert_close(out.double(), want, rtol=3e-2, atol=3e-2)


def test_attend_by_rows_in_bf16_stays_within_bf16_rounding_of_the_reference() -> None:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 12, 40, 32, generator=g).bfloat16() for _ in range(3))
    out = attend_by_rows(q, k, v, None)
    assert out.dtype == torch.bfloat16
    err = (out.double() - reference_attention(q, k, v, None)).abs().max().item()
    assert err < 0.03, err  # inputs and output are bf16 (8 bits of mantissa)


@pytest.mark.parametrize("gelu", [False, True])
def test_linear_matches_nn_linear_in_fp32(gelu: bool) -> None:
    torch.manual_seed(2)
    layer = nn.Linear(16, 24)
    x = torch.randn(2, 5, 16)
    want = F.gelu(layer(x)) if gelu else layer(x)
    with torch.inference_mode():
        got = linear(x, layer, gelu=gelu)
    assert got.shape == (2, 5, 24)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_linear_in_bf16_is_close_to_fp32() -> None:
    torch.manual_seed(3)
    layer = nn.Linear(64, 96)
    x = torch.randn(4, 10, 64)
    want = F.gelu(layer(x))
    with torch.inference_mode():
        got = linear(x.bfloat16(), layer.bfloat16(), gelu=True)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.detach(), rtol=0.05, atol=0.05)


def test_fast_path_is_off_under_autograd_and_inside_stock_kernels() -> None:
    x = torch.zeros(2, 3)
    assert not fast_path(x)  # grad mode is on in a test by default
    with torch.no_grad():
        assert fast_path(x)
        with stock_kernels():
            assert not fast_path(x)
        assert fast_path(x)


def test_training_forward_still_has_gradients() -> None:
    torch.manual_seed(4)
    layer = nn.Linear(8, 8)
    out = linear(torch.randn(3, 8), layer, gelu=True)
    out.sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_encoder_output_is_the_same_with_the_fast_path_and_the_stock_operators(
    dtype: torch.dtype,
) -> None:
    torch.manual_seed(5)
    cfg = EncoderConfig(
        vocab_size=50,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    enc = BertEncoder(cfg).eval().to(dtype)
    ids = torch.randint(1, 50, (3, 12))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0
    mask[2, 3:] = 0
    with torch.inference_mode():
        fast = enc(ids, mask).last_hidden_state
        with stock_kernels():
            stock = enc(ids, mask).last_hidden_state
    tol = 1e-5 if dtype == torch.float32 else 0.1
    real = mask.bool()  # (the fast path packs the real tokens: padded positions are zeros)
    torch.testing.assert_close(fast[real].float(), stock[real].float(), rtol=tol, atol=tol)
    assert not torch.equal(fast[real], torch.zeros_like(fast[real]))
