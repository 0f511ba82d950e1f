"""DyREx query source: parameter count, init, the query masks' effect, padding."""

from __future__ import annotations

import pytest
import torch
from head_helpers import make_batch, tiny_model

from structqa.encoders.bert import Block, EncoderConfig
from structqa.heads import DyRExQueries, build_head
from structqa.heads.dyrex import DYREX_BLOCK

CFG = EncoderConfig(hidden_size=32, num_heads=4, intermediate_size=64, num_layers=2)


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("layers", [1, 3])
def test_adds_q0_plus_k_decoder_blocks(tiny_checkpoint, layers: int) -> None:
    model = tiny_model(tiny_checkpoint, "dyrex", dyrex_layers=layers)
    cfg = model.encoder.config
    block = n_params(Block(cfg, spec=("sa", "xa", "ffn")))
    added = n_params(model) - n_params(model.encoder)
    assert added == 2 * cfg.hidden_size + layers * block
    assert len(model.head.queries.layers) == layers


def test_bert_style_init_and_the_encoders_sizes_and_dropout() -> None:
    torch.manual_seed(0)
    cfg = EncoderConfig(hidden_size=64, num_heads=4, intermediate_size=96, hidden_dropout=0.2)
    source = DyRExQueries(cfg, 3)
    block = source.layers[0]
    assert block.spec == DYREX_BLOCK == ("sa", "xa", "ffn")
    attn = block.sublayers[1].attn
    assert attn.heads == 4 and block.sublayers[1].cross
    assert block.sublayers[2].intermediate.out_features == 96  # the config's FFN size
    assert block.sublayers[0].dropout.p == 0.2
    for name, p in source.named_parameters():
        if name.endswith("LayerNorm.weight"):
            assert bool((p == 1).all()), name
        elif name.endswith("bias"):
            assert bool((p == 0).all()), name
        else:  # q0 and the linear weights: normal(0, 0.02)
            assert 0.015 < p.std().item() < 0.025, name


def queries(source: DyRExQueries, q0: torch.Tensor, hidden: torch.Tensor, batch) -> torch.Tensor:
    with torch.no_grad():
        source.q0.copy_(q0)
        return source(hidden, batch).queries


@pytest.mark.parametrize(
    ("mask", "start_sees_end", "end_sees_start"),
    [("bidirectional", True, True), ("causal", False, True), ("independent", False, False)],
)
def test_query_masks_decide_who_depends_on_whom(
    mask: str, start_sees_end: bool, end_sees_start: bool
) -> None:
    torch.manual_seed(0)
    source = DyRExQueries(CFG, 2, query_mask=mask).eval()
    hidden = torch.randn(1, 7, 32)
    batch = make_batch([[1] * 7], [0], [0])
    q0 = torch.randn(2, 32)
    base = queries(source, q0, hidden, batch)
    new_end, new_start = q0.clone(), q0.clone()
    new_end[1] += 1.0
    new_start[0] += 1.0
    start_changed = not torch.allclose(queries(source, new_end, hidden, batch)[0, 0], base[0, 0])
    end_changed = not torch.allclose(queries(source, new_start, hidden, batch)[0, 1], base[0, 1])
    assert start_changed == start_sees_end
    assert end_changed == end_sees_start


def test_queries_ignore_padding_tokens() -> None:
    torch.manual_seed(0)
    source = DyRExQueries(CFG, 2).eval()
    hidden = torch.randn(2, 6, 32)
    batch = make_batch([[1] * 6] * 2, [0, 0], [0, 0], attention_mask=[[1] * 6, [1, 1, 1, 1, 0, 0]])
    base = source(hidden, batch).queries
    changed = hidden.clone()
    changed[1, 4:] = 100.0  # padding of row 1
    with torch.no_grad():
        torch.testing.assert_close(source(changed, batch).queries, base)
        changed[0, 4:] = 100.0  # real tokens of row 0
        assert not torch.allclose(source(changed, batch).queries[0], base[0])


def test_full_is_not_a_dyrex_mask() -> None:
    with pytest.raises(ValueError, match="unknown DyREx query mask 'full'"):
        build_head("dyrex", CFG, query_mask="full")
