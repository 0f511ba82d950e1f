"""The packed inference path of the encoder: the real tokens of a batch in one (T, D) matrix,
each window attending over its own tokens (structqa.encoders.bert.BertEncoder.forward)."""

from __future__ import annotations

import pytest
import torch

from structqa.attention.kernels import attend_packed, stock_kernels
from structqa.encoders import bert
from structqa.encoders.bert import BertEncoder, EncoderConfig, packable, packed_rows
from structqa.encoders.variants import AttentionOptions, VariantAttentionSublayer


def _encoder(block: tuple[str, ...] = ("sa", "ffn")) -> BertEncoder:
    torch.manual_seed(3)
    cfg = EncoderConfig(
        vocab_size=60,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        max_position_embeddings=40,
        block=block,
    )
    return BertEncoder(cfg).eval().double()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(4)
    ids = torch.randint(1, 60, (4, 14))
    mask = torch.ones(4, 14, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 3:] = 0
    mask[3, 13:] = 0
    return ids, mask


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the packed passes (one entry per encoder layer run packed)."""
    calls: list[int] = []
    original = bert.Block.forward_packed

    def counting(self, x, rows):
        calls.append(len(rows))
        return original(self, x, rows)

    monkeypatch.setattr(bert.Block, "forward_packed", counting)
    return calls


@pytest.mark.parametrize("block", [("sa", "ffn"), ("sa", "naa", "ffn")])
def test_packed_path_equals_the_padded_path_at_the_real_tokens(
    block: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    enc = _encoder(block)
    ids, mask = _batch()
    calls = _calls(monkeypatch)
    with torch.inference_mode():
        packed = enc(ids, mask).last_hidden_state
        assert calls == [4, 4]  # both layers, four windows, packed
        with stock_kernels():  # the padded path with torch's own attention
            padded = enc(ids, mask).last_hidden_state
    assert len(calls) == 2
    real = mask.bool()
    torch.testing.assert_close(packed[real], padded[real], rtol=1e-10, atol=1e-10)
    assert torch.equal(packed[~real], torch.zeros_like(packed[~real]))


def test_packed_path_with_prefix_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    """DyReF's inserted vectors are real positions of every row, ahead of its tokens."""
    enc = _encoder()
    ids, mask = _batch()
    prefix = torch.randn(4, 2, 32, dtype=torch.float64)
    calls = _calls(monkeypatch)
    with torch.inference_mode():
        packed = enc(ids, mask, prefix=prefix).last_hidden_state
        with stock_kernels():
            padded = enc(ids, mask, prefix=prefix).last_hidden_state
    assert calls == [4, 4]
    real = torch.cat([torch.ones(4, 2, dtype=torch.bool), mask.bool()], dim=1)
    torch.testing.assert_close(packed[real], padded[real], rtol=1e-10, atol=1e-10)


def test_packed_rows() -> None:
    valid = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert packed_rows(valid) == [(0, 3), (3, 5), (5, 9)]
    left_padded = torch.tensor([[0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    assert packed_rows(left_padded) is None
    holes = torch.tensor([[1, 0, 1], [1, 1, 1]], dtype=torch.bool)
    assert packed_rows(holes) is None
    one_token = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    assert packed_rows(one_token) is None


def test_not_packed_under_autograd_with_attentions_or_with_attention_variants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enc = _encoder()
    ids, mask = _batch()
    calls = _calls(monkeypatch)
    enc(ids, mask)  # autograd on
    with torch.inference_mode():
        enc.train()
        enc(ids, mask)  # dropout on
        enc.eval()
        enc(ids, mask, output_attentions=True)
        enc(ids, mask, output_hidden_states=True)
        enc(ids, mask, extra_mask=lambda b, h, q, k: q >= 0)
    assert calls == []
    assert packable(enc.layers)
    enc.layers[0].sublayers[0] = VariantAttentionSublayer(
        enc.config, AttentionOptions(relative_keys=True)
    ).double()
    assert not packable(enc.layers)
    with torch.inference_mode():
        enc(ids, mask)
    assert calls == []


def test_attend_packed_matches_a_float64_reference_per_window() -> None:
    torch.manual_seed(6)
    heads, e = 3, 4
    rows = [(0, 5), (5, 7), (7, 16)]
    q, k, v = (torch.randn(16, heads * e, dtype=torch.float64) for _ in range(3))
    out = attend_packed(q, k, v, rows, heads)
    for start, end in rows:
        n = end - start
        qi, ki, vi = (t[start:end].view(n, heads, e).transpose(0, 1) for t in (q, k, v))
        probs = (qi @ ki.transpose(-1, -2) / e**0.5).softmax(-1)
        ref = (probs @ vi).transpose(0, 1).reshape(n, heads * e)
        torch.testing.assert_close(out[start:end], ref)
    # no attention to itself: the diagonal gets no weight
    out_ns = attend_packed(q, k, v, [(0, 2)], heads, no_self=True)
    swapped = v[[1, 0]]  # with two tokens, each attends only to the other
    torch.testing.assert_close(out_ns[:2], swapped)
