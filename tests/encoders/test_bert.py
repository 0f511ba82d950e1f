"""BertEncoder against transformers.BertModel with the same weights, plus its variants."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import Tensor

from structqa.encoders.bert import BertEncoder, EncoderConfig

transformers = pytest.importorskip("transformers")

TOL = 1e-5


def hf_model(path: Path, cls_name: str = "BertModel"):
    cls = getattr(transformers, cls_name)
    return cls.from_pretrained(str(path), attn_implementation="eager").eval()


def random_batch(vocab: int, seed: int = 0) -> dict[str, Tensor]:
    """Three rows of lengths 11, 7 and 4 (right padding) with two token-type segments."""
    g = torch.Generator().manual_seed(seed)
    lengths = [11, 7, 4]
    n = max(lengths)
    ids = torch.randint(5, vocab, (len(lengths), n), generator=g)
    mask = torch.zeros(len(lengths), n, dtype=torch.long)
    types = torch.zeros(len(lengths), n, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        types[row, length // 2 : length] = 1
        ids[row, length:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def assert_same_on_real_tokens(ours: Tensor, theirs: Tensor, mask: Tensor) -> None:
    real = mask.bool()
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours[real], theirs[real], rtol=TOL, atol=TOL)


@pytest.fixture(scope="module")
def tiny_pair(tiny_checkpoint: Path) -> tuple[BertEncoder, object]:
    return BertEncoder.from_pretrained(tiny_checkpoint).eval(), hf_model(tiny_checkpoint)


def test_config_is_read_from_the_checkpoint(tiny_pair: tuple[BertEncoder, object]) -> None:
    ours, theirs = tiny_pair
    assert ours.config.hidden_size == 32
    assert ours.config.num_layers == 2
    assert ours.config.num_heads == 4
    assert ours.config.intermediate_size == 64
    assert ours.config.vocab_size == theirs.config.vocab_size
    assert ours.config.block == ("sa", "ffn")


def test_last_hidden_state_matches_bert_model(tiny_pair: tuple[BertEncoder, object]) -> None:
    ours, theirs = tiny_pair
    batch = random_batch(ours.config.vocab_size)
    with torch.no_grad():
        got = ours(**batch)
        want = theirs(**batch)
    assert got.last_hidden_state.shape == (3, 11, 32)
    assert bool(torch.isfinite(got.last_hidden_state).all())
    assert_same_on_real_tokens(
        got.last_hidden_state, want.last_hidden_state, batch["attention_mask"]
    )


def test_token_types_matter(tiny_pair: tuple[BertEncoder, object]) -> None:
    """Guards the comparison above: type ids really reach the embeddings."""
    ours, _ = tiny_pair
    batch = random_batch(ours.config.vocab_size)
    with torch.no_grad():
        with_types = ours(**batch).last_hidden_state
        without = ours(batch["input_ids"], batch["attention_mask"]).last_hidden_state
    assert (with_types[0, 6:11] - without[0, 6:11]).abs().max() > 1e-2


def test_hidden_states_count_and_values_match(tiny_pair: tuple[BertEncoder, object]) -> None:
    ours, theirs = tiny_pair
    batch = random_batch(ours.config.vocab_size, seed=1)
    with torch.no_grad():
        got = ours(**batch, output_hidden_states=True)
        want = theirs(**batch, output_hidden_states=True)
    assert len(got.hidden_states) == ours.config.num_layers + 1 == len(want.hidden_states)
    for mine, hf in zip(got.hidden_states, want.hidden_states, strict=True):
        assert_same_on_real_tokens(mine, hf, batch["attention_mask"])
    assert torch.equal(got.hidden_states[-1], got.last_hidden_state)


def test_hidden_states_are_empty_unless_asked(tiny_pair: tuple[BertEncoder, object]) -> None:
    ours, _ = tiny_pair
    with torch.no_grad():
        out = ours(**random_batch(ours.config.vocab_size))
    assert out.hidden_states == ()
    assert out.attentions == ()


def test_attention_probabilities_match_eager_bert(tiny_pair: tuple[BertEncoder, object]) -> None:
    ours, theirs = tiny_pair
    batch = random_batch(ours.config.vocab_size, seed=2)
    with torch.no_grad():
        got = ours(**batch, output_attentions=True)
        want = theirs(**batch, output_attentions=True)
    assert len(got.attentions) == ours.config.num_layers == len(want.attentions)
    real = batch["attention_mask"].bool()
    for mine, hf in zip(got.attentions, want.attentions, strict=True):
        assert mine.shape == (3, 4, 11, 11)
        rows, hf_rows = mine.transpose(1, 2)[real], hf.transpose(1, 2)[real]  # (real Q, H, K)
        torch.testing.assert_close(rows, hf_rows, rtol=TOL, atol=TOL)
        torch.testing.assert_close(rows.sum(-1), torch.ones(rows.shape[:2]))
    # probabilities on padded keys are exactly zero
    assert bool((got.attentions[0][2, :, :, 4:] == 0).all())
    # the attention is far from uniform, so the comparison above is not vacuous
    assert float(got.attentions[0][0, :, :11, :11].max()) > 0.3


def test_pytorch_model_bin_checkpoint_loads(tiny_checkpoint: Path, tmp_path: Path) -> None:
    config = transformers.BertConfig.from_pretrained(str(tiny_checkpoint))
    torch.manual_seed(1)
    reference = transformers.BertModel(config).eval()
    with torch.no_grad():
        for p in reference.parameters():  # differ from the safetensors weights everywhere
            p.add_(0.05 * torch.randn_like(p))
    config.save_pretrained(str(tmp_path))
    torch.save(reference.state_dict(), tmp_path / "pytorch_model.bin")
    assert not (tmp_path / "model.safetensors").exists()

    ours = BertEncoder.from_pretrained(tmp_path).eval()
    batch = random_batch(config.vocab_size, seed=3)
    with torch.no_grad():
        got = ours(**batch).last_hidden_state
        want = reference(**batch).last_hidden_state
    assert_same_on_real_tokens(got, want, batch["attention_mask"])


def test_question_answering_checkpoint_with_bert_prefix_loads(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    config = transformers.BertConfig.from_pretrained(str(tiny_checkpoint))
    torch.manual_seed(2)
    qa = transformers.BertForQuestionAnswering(config).eval()
    qa.save_pretrained(str(tmp_path))
    from safetensors.torch import load_file

    keys = load_file(str(tmp_path / "model.safetensors")).keys()
    assert any(k.startswith("bert.encoder.layer.") for k in keys)
    assert any(k.startswith("qa_outputs.") for k in keys)

    ours = BertEncoder.from_pretrained(tmp_path).eval()
    batch = random_batch(config.vocab_size, seed=4)
    with torch.no_grad():
        got = ours(**batch).last_hidden_state
        want = qa.bert(**batch).last_hidden_state
    assert_same_on_real_tokens(got, want, batch["attention_mask"])


def test_missing_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no config.json"):
        BertEncoder.from_pretrained(tmp_path)


def test_missing_weights_is_a_clear_error(tiny_checkpoint: Path, tmp_path: Path) -> None:
    shutil.copy(tiny_checkpoint / "config.json", tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match="neither model.safetensors nor pytorch_model.bin"):
        BertEncoder.from_pretrained(tmp_path)


def test_default_encoder_matches_bert_model() -> None:
    from structqa.paths import default_encoder_path

    try:
        path = default_encoder_path()
    except FileNotFoundError as err:
        pytest.skip(f"default encoder not installed: {err}")
    ours = BertEncoder.from_pretrained(path).eval()
    theirs = hf_model(path)
    assert ours.config.hidden_size == theirs.config.hidden_size
    batch = random_batch(ours.config.vocab_size, seed=5)
    with torch.no_grad():
        got = ours(**batch, output_attentions=True)
        want = theirs(**batch, output_attentions=True)
    assert_same_on_real_tokens(
        got.last_hidden_state, want.last_hidden_state, batch["attention_mask"]
    )
    torch.testing.assert_close(got.attentions[-1][0], want.attentions[-1][0], rtol=TOL, atol=TOL)


# ---- prefix vectors (DyReF) -----------------------------------------------------------------


def tokens_ignore_prefix(p: int):
    """Tokens (positions >= p) neither attend to the prefix nor are reached by it."""

    def mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return ~((q >= p) & (kv < p))

    return mod


def test_prefix_leaves_token_positions_unchanged(tiny_pair: tuple[BertEncoder, object]) -> None:
    ours, _ = tiny_pair
    batch = random_batch(ours.config.vocab_size, seed=6)
    p = 3
    prefix = torch.randn(3, p, 32, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        plain = ours(**batch).last_hidden_state
        isolated = ours(**batch, prefix=prefix, extra_mask=tokens_ignore_prefix(p))
        mixed = ours(**batch, prefix=prefix).last_hidden_state
    assert isolated.last_hidden_state.shape == (3, p + 11, 32)
    assert isolated.mask is not None and isolated.mask.shape[-1] == p + 11
    assert_same_on_real_tokens(isolated.last_hidden_state[:, p:], plain, batch["attention_mask"])
    # without the extra mask the prefix does change the tokens (the check above is not vacuous)
    real = batch["attention_mask"].bool()
    assert (mixed[:, p:][real] - plain[real]).abs().max() > 1e-3


def test_prefix_rows_attend_to_tokens(tiny_pair: tuple[BertEncoder, object]) -> None:
    ours, _ = tiny_pair
    batch = random_batch(ours.config.vocab_size, seed=8)
    p = 2
    prefix = torch.randn(3, p, 32, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        out = ours(**batch, prefix=prefix, output_attentions=True)
    probs = out.attentions[0]  # (B, H, P + N, P + N)
    assert probs.shape == (3, 4, p + 11, p + 11)
    # prefix keys are never padding; padded token keys are masked for prefix queries too
    assert bool((probs[:, :, :p, :p] > 0).all())
    assert bool((probs[2, :, :p, p + 4 :] == 0).all())
    torch.testing.assert_close(probs[:, :, :p].sum(-1), torch.ones(3, 4, p))


# ---- block specs ----------------------------------------------------------------------------


def test_sa_naa_ffn_block_loads_and_runs(tiny_checkpoint: Path) -> None:
    enc = BertEncoder.from_pretrained(tiny_checkpoint, block=("sa", "naa", "ffn")).eval()
    batch = random_batch(enc.config.vocab_size, seed=10)
    with torch.no_grad():
        out = enc(**batch, output_attentions=True)
    assert out.last_hidden_state.shape == (3, 11, 32)
    assert bool(torch.isfinite(out.last_hidden_state).all())
    assert len(out.attentions) == 2 * enc.config.num_layers  # sa and naa in every layer
    for layer in range(enc.config.num_layers):
        sa, naa = out.attentions[2 * layer], out.attentions[2 * layer + 1]
        diag_sa = torch.diagonal(sa, dim1=-2, dim2=-1)
        diag_naa = torch.diagonal(naa, dim1=-2, dim2=-1)
        assert bool((diag_naa == 0).all())
        assert bool((diag_sa[:, :, :4] > 0).all())
        real_rows = naa[0]  # batch row 0 has no padding: every row still sums to 1
        torch.testing.assert_close(real_rows.sum(-1), torch.ones(4, 11))


def test_sa_naa_ffn_keeps_checkpoint_sa_weights(tiny_checkpoint: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(str(tiny_checkpoint / "model.safetensors"))
    enc = BertEncoder.from_pretrained(tiny_checkpoint, block=("sa", "naa", "ffn"))
    sa = enc.layers[1].sublayers[0]
    assert torch.equal(sa.attn.query.weight, state["encoder.layer.1.attention.self.query.weight"])
    ffn = enc.layers[1].sublayers[2]
    assert torch.equal(ffn.intermediate.weight, state["encoder.layer.1.intermediate.dense.weight"])


def test_naa_replacing_sa_takes_the_sa_weights(tiny_checkpoint: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(str(tiny_checkpoint / "model.safetensors"))
    enc = BertEncoder.from_pretrained(tiny_checkpoint, block=("naa", "ffn")).eval()
    hf_names = {
        "attn.query": "attention.self.query",
        "attn.key": "attention.self.key",
        "attn.value": "attention.self.value",
        "attn.output": "attention.output.dense",
        "LayerNorm": "attention.output.LayerNorm",
    }
    for layer in range(enc.config.num_layers):
        naa = enc.layers[layer].sublayers[0]
        assert naa.neighbor_aware
        params = dict(naa.named_parameters())
        assert len(params) == 2 * len(hf_names)
        for ours_name, hf_name in hf_names.items():
            for kind in ("weight", "bias"):
                want = state[f"encoder.layer.{layer}.{hf_name}.{kind}"]
                assert torch.equal(params[f"{ours_name}.{kind}"], want), (layer, ours_name, kind)

    batch = random_batch(enc.config.vocab_size, seed=11)
    with torch.no_grad():
        out = enc(**batch, output_attentions=True)
    assert len(out.attentions) == enc.config.num_layers
    for probs in out.attentions:
        assert bool((torch.diagonal(probs, dim1=-2, dim2=-1) == 0).all())


def test_unknown_block_kind_in_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown sub-layer kind"):
        EncoderConfig(block=("sa", "mlp"))


def test_unknown_block_kind_in_from_pretrained_is_rejected(tiny_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="unknown sub-layer kind"):
        BertEncoder.from_pretrained(tiny_checkpoint, block=("sa", "bogus", "ffn"))


def test_unknown_block_kind_in_checkpoint_config_is_rejected(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    shutil.copytree(tiny_checkpoint, tmp_path, dirs_exist_ok=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["structqa_block"] = ["sa", "bogus", "ffn"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="bogus"):
        BertEncoder.from_pretrained(tmp_path)


# ---- POS-tag input embedding (ANNA Table 7, word + POS) -------------------------------------


def test_pos_tag_embedding_starts_at_zero_and_changes_nothing(tiny_checkpoint: Path) -> None:
    plain = BertEncoder.from_pretrained(tiny_checkpoint).eval()
    tagged = BertEncoder.from_pretrained(tiny_checkpoint).eval()
    tagged.add_pos_tag_embeddings(19)
    table = tagged.embeddings.pos_tag_embeddings
    assert table is not None and table.weight.shape == (19, 32)
    assert tagged.config.pos_vocab_size == 19 and not table.weight.any()
    assert BertEncoder(tagged.config).embeddings.pos_tag_embeddings.weight.abs().sum() == 0

    batch = random_batch(plain.config.vocab_size, seed=3)
    tags = torch.randint(
        0, 19, batch["input_ids"].shape, generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        want = plain(**batch).last_hidden_state
        got = tagged(**batch, pos_tag_ids=tags).last_hidden_state
        assert torch.equal(got, want)  # x + 0 is x: exact
        table.weight.normal_()
        moved = tagged(**batch, pos_tag_ids=tags).last_hidden_state
    assert not torch.allclose(moved, want)  # trained, the tags do reach the encoder

    with pytest.raises(ValueError, match="pass pos_tag_ids"):
        tagged(**batch)
    with pytest.raises(ValueError, match="without a POS-tag embedding"):
        plain(**batch, pos_tag_ids=tags)
    with pytest.raises(ValueError, match="already has"):
        tagged.add_pos_tag_embeddings(19)


def test_pos_tag_embedding_round_trips(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from structqa.encoders import (
        encoder_config_dict,
        encoder_from_config_dict,
        load_encoder,
        save_encoder,
    )

    enc = BertEncoder.from_pretrained(tiny_checkpoint).eval()
    enc.add_pos_tag_embeddings(7)
    with torch.no_grad():
        enc.embeddings.pos_tag_embeddings.weight.normal_()
    save_encoder(enc, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["structqa_pos_vocab_size"] == 7
    batch = random_batch(enc.config.vocab_size, seed=4)
    tags = torch.randint(0, 7, batch["input_ids"].shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = enc(**batch, pos_tag_ids=tags).last_hidden_state
    for loaded in (BertEncoder.from_pretrained(tmp_path), load_encoder(tmp_path)):
        loaded.eval()
        assert loaded.config == enc.config
        for name, value in enc.state_dict().items():
            assert torch.equal(loaded.state_dict()[name], value), name
        with torch.no_grad():
            assert torch.equal(loaded(**batch, pos_tag_ids=tags).last_hidden_state, want)
    # the dict of training checkpoints (encoder_config.json) rebuilds the same structure
    rebuilt = encoder_from_config_dict(json.loads(json.dumps(encoder_config_dict(enc))))
    assert rebuilt.config == enc.config
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in enc.state_dict().items()
    }
    # and HF BERT reads the directory, skipping only the table it does not know
    hf = transformers.BertModel.from_pretrained(str(tmp_path))
    assert hf.config.num_hidden_layers == 2
