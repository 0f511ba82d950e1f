"""Building the QA model from a pre-trained encoder: its structure and the token tags it reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from structqa.config import ConfigError, load_config
from structqa.encoders import AttentionOptions, convert_stacking, save_encoder
from structqa.encoders.bert import BertEncoder
from structqa.models.build import build_model, required_token_tags


@pytest.fixture(scope="module")
def tagged_encoder_dir(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    """The tiny encoder with entity-aware attention and a POS-tag embedding, saved."""
    out = tmp_path_factory.mktemp("tagged")
    shutil.copytree(tiny_checkpoint, out, dirs_exist_ok=True)
    enc = convert_stacking(
        BertEncoder.from_pretrained(tiny_checkpoint), "SA->FFN", AttentionOptions(entity_bias=True)
    )
    enc.add_pos_tag_embeddings(19)
    save_encoder(enc, out)
    return out


def test_token_tags_resolve_from_the_encoder(
    tagged_encoder_dir: Path, tiny_checkpoint: Path
) -> None:
    cfg = load_config(overrides=[f"model.encoder={tagged_encoder_dir}"])
    assert cfg.data.token_tags is None
    model, _ = build_model(cfg)
    assert cfg.data.token_tags == required_token_tags(model.encoder) == ["entities", "pos"]
    given = load_config(
        overrides=[f"model.encoder={tagged_encoder_dir}", "data.token_tags=[pos, entities]"]
    )
    build_model(given)  # the same set, in another order
    plain = load_config(overrides=[f"model.encoder={tiny_checkpoint}"])
    build_model(plain)
    assert plain.data.token_tags == []


@pytest.mark.parametrize(
    ("tags", "message"),
    [("[pos]", "the encoder reads \\['entities', 'pos'\\]"), ("[pos, lemma]", "unknown")],
)
def test_token_tags_that_differ_from_the_encoders_are_errors(
    tagged_encoder_dir: Path, tags: str, message: str
) -> None:
    cfg = load_config(overrides=[f"model.encoder={tagged_encoder_dir}", f"data.token_tags={tags}"])
    with pytest.raises(ConfigError, match=message):
        build_model(cfg)


def test_windows_longer_than_the_encoders_positions_are_refused(tiny_checkpoint: Path) -> None:
    positions = BertEncoder.from_pretrained(tiny_checkpoint).config.max_position_embeddings
    too_long = load_config(
        overrides=[f"model.encoder={tiny_checkpoint}", f"data.max_seq_len={positions + 1}"]
    )
    with pytest.raises(ValueError, match=f"exceeds the {positions} positions"):
        build_model(too_long)


def test_a_block_that_adds_sub_layers_keeps_the_encoders_function(tiny_checkpoint: Path) -> None:
    """``model.block`` converts the encoder as `structqa pretrain` does: an added sub-layer
    starts as the identity, so the fine-tune starts from the checkpoint's own function."""
    import torch

    plain, _ = build_model(load_config(overrides=[f"model.encoder={tiny_checkpoint}"]))
    cfg = load_config(overrides=[f"model.encoder={tiny_checkpoint}", "model.block=[sa, sa, ffn]"])
    model, _ = build_model(cfg)
    assert plain.encoder.config.block == ("sa", "ffn")
    assert model.encoder.config.block == ("sa", "sa", "ffn")
    ids = torch.randint(5, plain.encoder.config.vocab_size, (2, 17))
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    plain.eval()
    model.eval()
    with torch.no_grad():
        a = plain.encoder(ids, attention_mask=mask).last_hidden_state
        b = model.encoder(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(b[mask.bool()], a[mask.bool()], rtol=1e-5, atol=1e-5)
    # replacing SA by NAA reuses SA's weights (and changes the function: no attention to self)
    naa, _ = build_model(
        load_config(overrides=[f"model.encoder={tiny_checkpoint}", "model.block=[naa, ffn]"])
    )
    assert naa.encoder.config.block == ("naa", "ffn")
    w = naa.encoder.layers[0].sublayers[0].attn.query.weight
    torch.testing.assert_close(w, plain.encoder.layers[0].sublayers[0].attn.query.weight)


@pytest.mark.parametrize("block", ["[sa, ffn]", "[sa, sa, ffn]", "[naa, ffn]"])
def test_converting_the_block_leaves_the_seeded_head_and_rng_alone(
    tiny_checkpoint: Path, block: str
) -> None:
    """Under one seed a converted build gets the head, and then the random stream (dropout),
    of the plain build: the conversion's throwaway init consumes no global RNG, so runs that
    differ only in ``model.block`` are paired on everything else. ``[sa, ffn]`` is the encoder's
    own block, which converts nothing."""
    import torch

    def build(*extra: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        torch.manual_seed(0)
        model, _ = build_model(load_config(overrides=[f"model.encoder={tiny_checkpoint}", *extra]))
        return model.head.state_dict(), torch.rand(4)

    head, after = build()
    converted_head, converted_after = build(f"model.block={block}")
    assert head.keys() == converted_head.keys() and head
    for name, tensor in head.items():
        assert torch.equal(tensor, converted_head[name]), name
    assert torch.equal(after, converted_after)


def test_a_converted_block_keeps_the_checkpoints_attention_variant(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    """A Table 8 checkpoint (relative keys) given another ``model.block`` keeps its variant
    attention, and the added sub-layer keeps the checkpoint's function at step 0."""
    import torch

    from structqa.encoders import (
        AttentionOptions,
        attention_options,
        convert_stacking,
        save_encoder,
    )
    from structqa.encoders.bert import BertEncoder

    options = AttentionOptions(relative_keys=True, max_distance=4)
    rel = convert_stacking(BertEncoder.from_pretrained(tiny_checkpoint), ["sa", "ffn"], options)
    touched = 0
    with torch.no_grad():  # give the (zero-initialised) relative embeddings some weight
        for name, p in rel.named_parameters():
            if ".rel_keys." in name:
                p.normal_(0.0, 0.5)
                touched += 1
    assert touched == len(rel.layers)
    save_encoder(rel, tmp_path / "rel")
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):  # its tokenizer
        shutil.copy(tiny_checkpoint / name, tmp_path / "rel" / name)
    plain, _ = build_model(load_config(overrides=[f"model.encoder={tmp_path / 'rel'}"]))
    model, _ = build_model(
        load_config(overrides=[f"model.encoder={tmp_path / 'rel'}", "model.block=[sa, sa, ffn]"])
    )
    assert attention_options(plain.encoder) == options
    assert attention_options(model.encoder) == options
    ids = torch.randint(5, plain.encoder.config.vocab_size, (2, 13))
    mask = torch.ones_like(ids)
    plain.eval()
    model.eval()
    with torch.no_grad():
        a = plain.encoder(ids, attention_mask=mask).last_hidden_state
        b = model.encoder(ids, attention_mask=mask).last_hidden_state
        without = BertEncoder.from_pretrained(tiny_checkpoint).eval()(ids, attention_mask=mask)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a, without.last_hidden_state, atol=1e-3)  # the variant is live


def test_runs_sharing_init_seed_start_from_the_same_weights(tiny_checkpoint: Path) -> None:
    from structqa.training.loop import build_seeded

    def head(*overrides: str) -> dict[str, object]:
        cfg = load_config(overrides=[f"model.encoder={tiny_checkpoint}", *overrides])
        model, _ = build_seeded(cfg)
        return {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("encoder.")}

    a = head("train.seed=0", "train.init_seed=7")
    b = head("train.seed=1", "train.init_seed=7")
    c = head("train.seed=1")
    assert a and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())
    # after the build, draws follow train.seed: two seeds sharing init_seed drop out differently
    torch_draws = [
        load_config(
            overrides=[f"model.encoder={tiny_checkpoint}", f"train.seed={s}", "train.init_seed=7"]
        )
        for s in (0, 1)
    ]
    after = []
    for cfg in torch_draws:
        build_seeded(cfg)
        after.append(torch.rand(4))
    assert not torch.equal(after[0], after[1])
