"""Building the QA model from a pre-trained encoder: its structure and the token tags it reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from structqa.config import ConfigError, load_config
from structqa.encoders.bert import BertEncoder
from structqa.encoders.stacking import AttentionOptions, convert_stacking, save_encoder
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
