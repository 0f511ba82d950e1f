"""Stackings of Table 9 made from a pretrained encoder, and the attention variants of Table 8."""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from torch import Tensor

from structqa.encoders import (
    ANNA_BLOCK,
    STACKINGS,
    AttentionOptions,
    VariantAttentionSublayer,
    attention_options,
    convert_stacking,
    encoder_config_dict,
    encoder_from_config_dict,
    entity_keys,
    load_encoder,
    parse_stacking,
    plan_stacking,
    save_encoder,
)
from structqa.encoders.bert import AttentionSublayer, BertEncoder, EncoderConfig, encoder_hf_state
from structqa.encoders.variants import relative_distance_index

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

transformers = pytest.importorskip("transformers")

# Blocks that only add sub-layers to BERT's SA -> FFN: the function must survive conversion.
PRESERVING = ("SA->FFN", "SA->SA->FFN", "NAA->SA->FFN", "SA->NAA->FFN")


@pytest.fixture(scope="module")
def bert(tiny_checkpoint: Path) -> BertEncoder:
    """The tiny pretrained SA -> FFN encoder (read-only; convert_stacking leaves it alone)."""
    return BertEncoder.from_pretrained(tiny_checkpoint).eval()


def batch(vocab: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Three rows of lengths 11, 7 and 4 (right padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 11), generator=g)
    mask = torch.zeros(3, 11, dtype=torch.long)
    for row, length in enumerate((11, 7, 4)):
        mask[row, :length] = 1
        ids[row, length:] = 0
    return ids, mask


def encode(enc: BertEncoder, ids: Tensor, mask: Tensor) -> Tensor:
    with torch.no_grad():
        return enc(ids, mask).last_hidden_state[mask.bool()]  # (real tokens, D)


def tiny_config(**overrides) -> EncoderConfig:
    base = dict(
        vocab_size=100,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    return EncoderConfig(**{**base, **overrides})


# ---- block specs and the weight plan ---------------------------------------------------------


def test_table9_stackings_are_block_specs() -> None:
    assert STACKINGS["SA->NAA->FFN"] == ANNA_BLOCK == ("sa", "naa", "ffn")
    assert len(STACKINGS) == 6
    assert parse_stacking("SA -> NAA -> FFN") == ANNA_BLOCK
    assert parse_stacking("sa,naa,ffn") == ANNA_BLOCK
    assert parse_stacking("NAA → SA → FFN") == ("naa", "sa", "ffn")
    assert parse_stacking(["naa", "ffn"]) == ("naa", "ffn")
    for bad in ("SA->MLP", "sa,xa,ffn", ""):
        with pytest.raises(ValueError, match="stackings are made of"):
            parse_stacking(bad)


def test_plan_from_bert_matches_the_hf_loader_placement() -> None:
    bert_block = ("sa", "ffn")
    want = {
        "SA->FFN": (0, 1),
        "NAA->FFN": (0, 1),  # replacement: NAA takes SA's weights
        "SA->SA->FFN": (0, None, 1),
        "NAA->NAA->FFN": (0, None, 1),
        "NAA->SA->FFN": (None, 0, 1),  # the pretrained SA stays an SA; the NAA is added
        "SA->NAA->FFN": (0, None, 1),
    }
    for name, plan in want.items():
        assert plan_stacking(bert_block, STACKINGS[name]) == plan, name
    assert plan_stacking(ANNA_BLOCK, ("sa", "ffn")) == (0, 2)  # drops the NAA
    assert plan_stacking(("naa", "ffn"), ("sa", "ffn")) == (0, 1)
    assert plan_stacking(("sa", "ffn"), ("sa", "ffn", "ffn")) == (0, 1, None)


# ---- identity at step 0 ------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESERVING)
def test_added_sublayers_preserve_the_function(bert: BertEncoder, name: str) -> None:
    ids, mask = batch(bert.config.vocab_size)
    new = convert_stacking(bert, STACKINGS[name]).eval()
    assert new.config.block == STACKINGS[name]
    # a plain BertEncoder of the new spec: no parameter beyond the paper's architecture
    assert type(new) is BertEncoder
    assert set(new.state_dict()) == set(BertEncoder(new.config).state_dict())
    # fp32 rounding: the CPU's kernels sum in their own order (AVX2's differ from AVX512's by
    # up to 1.4e-6 here); the float64 test below shows the identity is exact
    torch.testing.assert_close(
        encode(new, ids, mask), encode(bert, ids, mask), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("name", PRESERVING)
def test_preservation_is_exact_up_to_layer_norm_eps(bert: BertEncoder, name: str) -> None:
    """In float64 the only difference left is LayerNorm's eps (1e-12), not float32 rounding."""
    old = convert_stacking(bert, bert.config.block).double().eval()  # a float64 copy
    new = convert_stacking(old, STACKINGS[name]).eval()
    ids, mask = batch(bert.config.vocab_size, seed=1)
    diff = (encode(new, ids, mask) - encode(old, ids, mask)).abs().max()
    assert float(diff) < 1e-9


def test_layer_norm_alone_would_break_the_identity(bert: BertEncoder) -> None:
    """Why the hand-off is needed: a zero output projection alone leaves LN(x) != x."""
    new = convert_stacking(bert, ANNA_BLOCK).eval()
    with torch.no_grad():
        for old_layer, layer in zip(bert.layers, new.layers, strict=True):
            layer.sublayers[0].LayerNorm.load_state_dict(
                old_layer.sublayers[0].LayerNorm.state_dict()
            )
            layer.sublayers[1].LayerNorm.reset_parameters()
    ids, mask = batch(bert.config.vocab_size)
    assert float((encode(new, ids, mask) - encode(bert, ids, mask)).abs().max()) > 1e-2


def test_two_naa_equals_one_naa(bert: BertEncoder) -> None:
    """NAA -> NAA -> FFN adds an identity NAA to the replacement NAA -> FFN."""
    ids, mask = batch(bert.config.vocab_size, seed=2)
    one = convert_stacking(bert, "NAA->FFN").eval()
    two = convert_stacking(bert, "NAA->NAA->FFN").eval()
    torch.testing.assert_close(encode(two, ids, mask), encode(one, ids, mask), rtol=1e-6, atol=1e-6)


def test_replacing_sa_by_naa_copies_the_weights_and_changes_the_function(
    bert: BertEncoder,
) -> None:
    new = convert_stacking(bert, "NAA->FFN").eval()
    for old_layer, layer in zip(bert.layers, new.layers, strict=True):
        naa, sa = layer.sublayers[0], old_layer.sublayers[0]
        assert naa.neighbor_aware and not sa.neighbor_aware
        old_params = dict(sa.named_parameters())
        assert len(old_params) == 10
        for name, param in naa.named_parameters():
            assert torch.equal(param, old_params[name]), name
            assert param.data_ptr() != old_params[name].data_ptr()  # copied, not shared
        old_ffn, ffn = old_layer.sublayers[1], layer.sublayers[1]
        for a, b in zip(old_ffn.parameters(), ffn.parameters(), strict=True):
            assert torch.equal(a, b)
    ids, mask = batch(bert.config.vocab_size, seed=3)
    assert float((encode(new, ids, mask) - encode(bert, ids, mask)).abs().max()) > 1e-2
    with torch.no_grad():
        probs = new(ids, mask, output_attentions=True).attentions
    assert bool((torch.diagonal(probs[0], dim1=-2, dim2=-1) == 0).all())


def test_added_sublayer_initialization(bert: BertEncoder) -> None:
    new = convert_stacking(bert, ANNA_BLOCK)
    fresh = convert_stacking(bert, ANNA_BLOCK, added_init="random")
    for i, layer in enumerate(new.layers):
        sa, naa = layer.sublayers[0], layer.sublayers[1]
        old_sa = bert.layers[i].sublayers[0]
        assert not bool(naa.attn.output.weight.any()) and not bool(naa.attn.output.bias.any())
        assert torch.equal(naa.attn.query.weight, old_sa.attn.query.weight)
        assert torch.equal(naa.attn.value.bias, old_sa.attn.value.bias)
        # the hand-off: the SA keeps a plain normalization, the NAA takes the affine
        assert torch.equal(sa.LayerNorm.weight, torch.ones(32))
        assert torch.equal(sa.LayerNorm.bias, torch.zeros(32))
        assert torch.equal(naa.LayerNorm.weight, old_sa.LayerNorm.weight)
        assert torch.equal(naa.LayerNorm.bias, old_sa.LayerNorm.bias)
        assert torch.equal(sa.attn.key.weight, old_sa.attn.key.weight)
        rand = fresh.layers[i].sublayers[1]
        assert not torch.equal(rand.attn.query.weight, old_sa.attn.query.weight)
        assert not bool(rand.attn.output.weight.any())
    with pytest.raises(ValueError, match="added_init"):
        convert_stacking(bert, ANNA_BLOCK, added_init="ones")


def test_naa_first_hands_off_the_previous_blocks_layer_norm(bert: BertEncoder) -> None:
    new = convert_stacking(bert, "NAA->SA->FFN")
    assert torch.equal(new.embeddings.LayerNorm.weight, torch.ones(32))
    assert torch.equal(
        new.layers[0].sublayers[0].LayerNorm.weight, bert.embeddings.LayerNorm.weight
    )
    assert torch.equal(new.layers[0].sublayers[2].LayerNorm.weight, torch.ones(32))
    ffn0 = bert.layers[0].sublayers[1].LayerNorm
    assert torch.equal(new.layers[1].sublayers[0].LayerNorm.bias, ffn0.bias)
    # the last block's feed-forward keeps its affine: nothing follows it
    last = bert.layers[-1].sublayers[1].LayerNorm
    assert torch.equal(new.layers[-1].sublayers[2].LayerNorm.weight, last.weight)


def test_conversion_leaves_the_source_encoder_unchanged(bert: BertEncoder) -> None:
    before = {k: v.clone() for k, v in bert.state_dict().items()}
    convert_stacking(bert, "NAA->SA->FFN")
    after = bert.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_kept_weights_agree_with_the_hf_loader(bert: BertEncoder, tiny_checkpoint: Path) -> None:
    for name in ("SA->NAA->FFN", "NAA->SA->FFN", "NAA->FFN"):
        block = STACKINGS[name]
        loaded = BertEncoder.from_pretrained(tiny_checkpoint, block=block)
        converted = convert_stacking(bert, block)
        plan = plan_stacking(("sa", "ffn"), block)
        for i in range(bert.config.num_layers):
            for j, source in enumerate(plan):
                if source is None:
                    continue
                a = loaded.layers[i].sublayers[j].state_dict()
                b = converted.layers[i].sublayers[j].state_dict()
                for key in a:
                    if "LayerNorm" not in key:  # layer norms may have handed off their affine
                        assert torch.equal(a[key], b[key]), (name, i, j, key)


# ---- saving and loading ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["SA->NAA->FFN", "NAA->SA->FFN", "NAA->NAA->FFN"])
def test_saved_stacking_reloads_through_structqa_block(
    bert: BertEncoder, tmp_path: Path, name: str
) -> None:
    new = convert_stacking(bert, STACKINGS[name]).eval()
    with torch.no_grad():  # make every sub-layer distinct, so a dropped weight would show
        for p in new.parameters():
            p.add_(0.01 * torch.randn_like(p))
    save_encoder(new, tmp_path)
    from safetensors.torch import load_file

    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "encoder.layer.0.attention.self.query.weight" in keys
    assert "encoder.layer.1.intermediate.dense.weight" in keys
    assert any(k.startswith("encoder.layer.1.sublayers.") for k in keys)

    loaded = BertEncoder.from_pretrained(tmp_path).eval()  # block from config.json
    assert loaded.config.block == STACKINGS[name]
    want = new.state_dict()
    got = loaded.state_dict()
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    ids, mask = batch(bert.config.vocab_size, seed=4)
    assert torch.equal(encode(loaded, ids, mask), encode(new, ids, mask))


def test_saved_bert_block_is_an_hf_bert_checkpoint(bert: BertEncoder, tmp_path: Path) -> None:
    save_encoder(convert_stacking(bert, "SA->FFN"), tmp_path)
    hf = transformers.BertModel.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    ids, mask = batch(bert.config.vocab_size, seed=5)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask).last_hidden_state[mask.bool()]
    torch.testing.assert_close(encode(bert, ids, mask), want, rtol=1e-5, atol=1e-5)


def test_hf_state_names_invert_the_loader_mapping(bert: BertEncoder) -> None:
    from structqa.encoders.bert import hf_to_structqa_key

    for block in STACKINGS.values():
        enc = convert_stacking(bert, block)
        for key in encoder_hf_state(enc, prefix="bert."):
            assert hf_to_structqa_key(key, block) is not None, key
        mapped = {hf_to_structqa_key(k, block) for k in encoder_hf_state(enc)}
        assert mapped == set(enc.state_dict())


# ---- attention variants (Table 8) -----------------------------------------------------------


def test_relative_distance_index_is_clipped() -> None:
    got = relative_distance_index(4, 4, 1, torch.device("cpu"))
    want = torch.tensor([[1, 2, 2, 2], [0, 1, 2, 2], [0, 0, 1, 2], [0, 0, 0, 1]])
    assert torch.equal(got, want)


def sublayer_pair(options: AttentionOptions, neighbor_aware: bool = False, seed: int = 0):
    """A plain sub-layer and a variant one with the same (random) weights."""
    cfg = tiny_config()
    torch.manual_seed(seed)
    plain = AttentionSublayer(cfg, neighbor_aware=neighbor_aware).eval()
    variant = VariantAttentionSublayer(cfg, options, neighbor_aware=neighbor_aware).eval()
    missing, unexpected = variant.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected
    assert all(k.startswith(("rel_", "entity_")) for k in missing)
    return plain, variant


def run(sub, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    with torch.no_grad():
        out, probs = sub(x, mask, None, None, True)
    return out, probs


def padding_mask(lengths: list[int], n: int) -> Tensor:
    valid = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    return valid[:, None, None, :]  # (B, 1, 1, K)


@pytest.mark.parametrize("neighbor_aware", [False, True])
def test_zero_relative_tables_equal_plain_attention(neighbor_aware: bool) -> None:
    plain, variant = sublayer_pair(
        AttentionOptions(relative_keys=True, relative_values=True, max_distance=0),
        neighbor_aware,
    )
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(1))
    mask = padding_mask([6, 4], 6)
    (want, want_p), (got, got_p) = run(plain, x, mask), run(variant, x, mask)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_p, want_p, rtol=1e-6, atol=1e-6)
    assert variant.rel_keys.weight.shape == (1, 8)  # (2k + 1, head_dim)


def test_k0_key_table_shifts_every_score_equally() -> None:
    """With k = 0 every key gets the same vector: a per-query constant that softmax ignores;
    the one value vector is added to every output before the output projection."""
    plain, variant = sublayer_pair(
        AttentionOptions(relative_keys=True, relative_values=True, max_distance=0)
    )
    with torch.no_grad():
        variant.rel_keys.weight.normal_()
        variant.rel_values.weight.normal_()
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(2))
    (_, want_p), (_, got_p) = run(plain, x, None), run(variant, x, None)
    torch.testing.assert_close(got_p, want_p, rtol=1e-5, atol=1e-6)


def naive_shaw(sub: VariantAttentionSublayer, x: Tensor) -> Tensor:
    """Shaw et al. eqs. 3-4 with explicit loops (one sequence, no mask), before the output
    projection, as (N, H * E)."""
    attn, k = sub.attn, sub.options.max_distance
    heads, e = attn.heads, attn.head_dim
    q_all, k_all, v_all = attn.query(x[0]), attn.key(x[0]), attn.value(x[0])
    n = x.shape[1]
    out = torch.zeros(n, heads * e)
    for h in range(heads):
        sl = slice(h * e, (h + 1) * e)
        for i in range(n):
            scores = []
            for j in range(n):
                a_k = sub.rel_keys.weight[max(-k, min(k, j - i)) + k]
                scores.append(q_all[i, sl] @ (k_all[j, sl] + a_k) / math.sqrt(e))
            p = torch.stack(scores).softmax(0)
            for j in range(n):
                a_v = sub.rel_values.weight[max(-k, min(k, j - i)) + k]
                out[i, sl] += p[j] * (v_all[j, sl] + a_v)
    return out


def test_relative_attention_matches_the_definition() -> None:
    _, variant = sublayer_pair(
        AttentionOptions(relative_keys=True, relative_values=True, max_distance=2)
    )
    with torch.no_grad():
        variant.rel_keys.weight.normal_()
        variant.rel_values.weight.normal_()
        x = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(3))
        context = naive_shaw(variant, x)
        want = variant.LayerNorm(x[0] + variant.attn.output(context))
    got, probs = run(variant, x, None)
    assert probs.shape == (1, 4, 6, 6)
    torch.testing.assert_close(got[0], want, rtol=1e-5, atol=1e-5)


def test_relative_attention_with_padding_is_finite_and_position_dependent() -> None:
    plain, variant = sublayer_pair(AttentionOptions(relative_keys=True, max_distance=2))
    with torch.no_grad():
        variant.rel_keys.weight.normal_()
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(4))
    mask = padding_mask([7, 3], 7)
    out, probs = run(variant, x, mask)
    assert out.shape == (2, 7, 32) and bool(torch.isfinite(out).all())
    assert bool((probs[1, :, :, 3:] == 0).all())
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 7))
    assert float((probs - run(plain, x, mask)[1]).abs().max()) > 1e-2


def test_zero_entity_bias_equals_plain_attention() -> None:
    plain, variant = sublayer_pair(AttentionOptions(entity_bias=True))
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(5))
    ents = torch.tensor([[0, 1, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    variant.entity_keys = ents
    (want, want_p), (got, got_p) = run(plain, x, None), run(variant, x, None)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_p, want_p, rtol=1e-6, atol=1e-6)


def test_entity_bias_multiplies_entity_key_odds_by_exp_w() -> None:
    plain, variant = sublayer_pair(AttentionOptions(entity_bias=True), neighbor_aware=True)
    w = torch.tensor([0.0, 0.5, -1.0, 2.0])
    with torch.no_grad():
        variant.entity_bias.copy_(w)
    x = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(6))
    ents = torch.tensor([[0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    variant.entity_keys = ents
    (_, p0), (_, p1) = run(plain, x, None), run(variant, x, None)
    # p1 / p0 is exp(w_h * entity_j) up to the row's normalization
    ratio = (p1 / p0.clamp_min(1e-30)).log()  # (1, H, Q, K), diagonal is 0/0
    off = ~torch.eye(6, dtype=torch.bool)
    gap = ratio[0, :, 0, 1] - ratio[0, :, 0, 3]  # entity key 1 vs non-entity key 3, query 0
    torch.testing.assert_close(gap, w, rtol=1e-4, atol=1e-4)
    assert bool((torch.diagonal(p1, dim1=-2, dim2=-1) == 0).all())
    assert bool(torch.isfinite(ratio[..., off]).all())


def test_entity_keys_context_sets_and_clears_the_mask(bert: BertEncoder) -> None:
    enc = convert_stacking(bert, ANNA_BLOCK, attention=AttentionOptions(entity_bias=True)).eval()
    ids, mask = batch(bert.config.vocab_size, seed=7)
    with pytest.raises(ValueError, match="entity key mask"):
        enc(ids, mask)
    ents = torch.zeros(3, 11, dtype=torch.bool)
    ents[:, 2:4] = True
    with entity_keys(enc, ents):
        out = encode(enc, ids, mask)
        with torch.no_grad():  # a DyReF prefix: prefix keys are never entities
            prefixed = enc(ids, mask, prefix=torch.zeros(3, 2, 32)).last_hidden_state
    assert prefixed.shape == (3, 13, 32)
    torch.testing.assert_close(out, encode(bert, ids, mask), rtol=1e-6, atol=1e-6)
    subs = [m for m in enc.modules() if isinstance(m, VariantAttentionSublayer)]
    assert len(subs) == 2 * bert.config.num_layers
    assert all(s.entity_keys is None for s in subs)
    with pytest.raises(ValueError, match="no entity-aware"):
        with entity_keys(bert, ents):
            pass


@pytest.mark.parametrize(
    "options",
    [
        AttentionOptions(relative_keys=True, max_distance=3),
        AttentionOptions(relative_values=True, max_distance=3),
        AttentionOptions(entity_bias=True),
    ],
)
def test_variant_encoders_start_as_the_pretrained_one_and_round_trip(
    bert: BertEncoder, tmp_path: Path, options: AttentionOptions
) -> None:
    enc = convert_stacking(bert, "SA->FFN", attention=options).eval()
    assert attention_options(enc) == options
    ids, mask = batch(bert.config.vocab_size, seed=8)
    ents = torch.zeros(3, 11, dtype=torch.bool)
    ents[:, 1:3] = True
    with entity_keys(enc, ents) if options.entity_bias else nullcontext():
        # the variants compute attention by hand (softmax of explicit scores), the plain
        # encoder through SDPA: with AVX2's kernels the two differ by up to ~1.1e-6 (one
        # value in 704); a wrong start would differ by ~1e-1
        torch.testing.assert_close(
            encode(enc, ids, mask), encode(bert, ids, mask), rtol=1e-5, atol=1e-5
        )
    with torch.no_grad():
        for name, p in enc.named_parameters():
            if "rel_" in name or "entity_" in name:
                p.normal_()
    save_encoder(enc, tmp_path)
    loaded = load_encoder(tmp_path).eval()
    assert attention_options(loaded) == options
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in enc.state_dict().items())
    with entity_keys(loaded, ents) if options.entity_bias else nullcontext():
        with entity_keys(enc, ents) if options.entity_bias else nullcontext():
            assert torch.equal(encode(loaded, ids, mask), encode(enc, ids, mask))
    # the plain loader refuses the variant's tables instead of dropping them
    with pytest.raises(ValueError, match="unexpected weights"):
        BertEncoder.from_pretrained(tmp_path)


def test_default_encoder_conversion_preserves_the_function() -> None:
    from structqa.paths import default_encoder_path

    try:
        path = default_encoder_path()
    except FileNotFoundError as err:
        pytest.skip(f"default encoder not installed: {err}")
    old = BertEncoder.from_pretrained(path).double().eval()
    new = convert_stacking(old, ANNA_BLOCK).eval()
    ids, mask = batch(old.config.vocab_size, seed=9)
    assert float((encode(new, ids, mask) - encode(old, ids, mask)).abs().max()) < 1e-8


@pytest.mark.parametrize(
    ("block", "options"),
    [
        ("SA->NAA->FFN", AttentionOptions()),
        ("NAA->FFN", AttentionOptions(relative_keys=True, relative_values=True, max_distance=3)),
        ("SA->FFN", AttentionOptions(entity_bias=True)),
    ],
)
def test_the_config_dict_of_training_checkpoints_rebuilds_the_structure(
    bert: BertEncoder, block: str, options: AttentionOptions
) -> None:
    enc = convert_stacking(bert, block, attention=options)
    d = json.loads(json.dumps(encoder_config_dict(enc)))  # as encoder_config.json holds it
    rebuilt = encoder_from_config_dict(d)
    assert rebuilt.config == enc.config and attention_options(rebuilt) == options
    shapes = {k: v.shape for k, v in enc.state_dict().items()}
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == shapes
    del d["attention"]  # encoder_config.json of checkpoints written before the variants
    assert attention_options(encoder_from_config_dict(d)).plain
