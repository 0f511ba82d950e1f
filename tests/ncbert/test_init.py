"""Two-stage training: ``model.init`` starts DROP fine-tuning from a drop-train checkpoint (the
synthetic-data GenBERT), with fresh modules for what the checkpoint lacks (the NC layer)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from structqa.cli import main
from structqa.config import ConfigError
from structqa.ncbert import loop
from structqa.ncbert.config import load_drop_config

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

MINI = "drop/drop-mini.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "ncbert"


def tiny_args(ckpt: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"model.encoder={ckpt}",
        "model.max_decode_len=4",
        f"data.dir={data}",
        f"data.train=[{MINI}]",
        f"data.eval={MINI}",
        "data.test=null",
        "data.max_seq_len=96",
        f"train.output_dir={out}",
        "train.batch_size=4",
        "train.eval_batch_size=16",
        "train.bf16=off",
        *extra,
    ]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint, shared_data) -> Path:
    """best/ of a GenBERT (no NC layer) trained from the CLI for two steps on `structqa synth`
    data: the stage-one checkpoint."""
    root = tmp_path_factory.mktemp("pretrain")
    synth = root / "synthetic.json"
    assert main(["synth", f"--out={synth}", "--n=12", "--seed=0"]) == 0
    args = tiny_args(tiny_checkpoint, shared_data, root / "run", "train.max_steps=2")
    args += [f"data.train=[{synth}]", "train.lr=1e-3"]
    assert main(["drop-train", "--no-progress", *(f"--{a}" for a in args)]) == 0
    return root / "run" / "best"


def test_init_keeps_the_checkpoint_weights_and_adds_a_fresh_nc_layer(
    tmp_path, tiny_checkpoint, shared_data, pretrained, caplog
):
    saved = load_file(str(pretrained / "model.safetensors"))
    assert not any(k.startswith("nc_layer.") for k in saved)
    args = tiny_args(
        tiny_checkpoint,
        shared_data,
        tmp_path / "ft",
        f"model.init={pretrained}",
        "model.encoder=/nonexistent",  # not read with init: encoder and tokenizer are the ckpt's
        "model.nc_layer=true",
        "model.nc_heads=[0,1]",
        "model.entity_channel=false",
        "train.seed=3",
    )
    with caplog.at_level(logging.INFO, logger="structqa.ncbert.loop"):
        model, tokenizer = loop.build_genbert(load_drop_config(overrides=args))
    state = model.state_dict()
    assert set(saved) < set(state)
    for name, tensor in saved.items():  # encoder, cross-attention, ffn_enc/dec, heads
        assert torch.equal(state[name], tensor), name
    fresh = sorted(set(state) - set(saved))
    assert fresh and all(k.startswith("nc_layer.") for k in fresh)
    assert "freshly: nc_layer" in caplog.text
    # the fresh layer is initialized as without init (seeded by train.seed)
    plain_args = [
        a for a in args if not a.startswith("model.init=") and a != "model.encoder=/nonexistent"
    ]
    plain, _ = loop.build_genbert(load_drop_config(overrides=plain_args))
    for name in fresh:
        assert torch.equal(state[name], plain.state_dict()[name]), name
    assert (
        tokenizer.get_vocab()
        == json.loads((pretrained / "tokenizer.json").read_text())["model"]["vocab"]
    )


def test_cli_chain_fine_tunes_from_init_then_predicts_and_scores(
    tmp_path, tiny_checkpoint, shared_data, pretrained, capsys
):
    out = tmp_path / "ft"
    args = tiny_args(
        tiny_checkpoint,
        shared_data,
        out,
        f"model.init={pretrained}",
        "model.nc_layer=true",
        "model.nc_heads=[0]",
        "model.entity_channel=false",
        f"data.test={MINI}",
        "train.max_steps=1",
    )
    assert main(["drop-train", "--no-progress", *(f"--{a}" for a in args)]) == 0
    saved = json.loads((out / "best" / "structqa_config.json").read_text())
    assert saved["model"]["init"] == str(pretrained)
    model, _, cfg = loop.load_genbert(out / "best")  # rebuilt without reading model.init
    assert cfg.model.nc_layer and model.nc_layer is not None

    preds = tmp_path / "pred" / "predictions.json"
    mini = str(shared_data / MINI)
    assert main(["drop-predict", str(out / "best"), mini, "--out", str(preds), "--bf16=off"]) == 0
    assert json.loads(preds.read_text()) == json.loads(
        (out / "best" / "test" / "predictions.json").read_text()
    )
    capsys.readouterr()
    assert main(["score", mini, str(preds)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["total"] == 19 and 0.0 <= scores["global_f1"] <= 1.0


def test_shipped_configs_are_two_stage():
    pre = load_drop_config(CONFIGS / "pretrain-synthetic.yaml")
    assert pre.model.init is None and not pre.model.nc_layer and pre.data.test is None
    assert pre.data.train == ["runs/ncbert/synthetic.json"] and pre.train.max_steps
    for name in ("baseline", "ncbert"):
        cfg = load_drop_config(CONFIGS / f"{name}.yaml")
        assert cfg.model.init == f"{pre.train.output_dir}/best"
        assert cfg.data.train == ["drop/drop-train-sample.json", "drop/drop-mini.json"]
        assert cfg.data.eval == "drop/drop-dev-sample.json"
        assert cfg.data.test == "drop/drop-contrast-sets.json"


def test_missing_or_invalid_init_is_a_clear_error(tmp_path, tiny_checkpoint, shared_data):
    def build(init: Path):
        args = tiny_args(tiny_checkpoint, shared_data, tmp_path / "x", f"model.init={init}")
        return loop.build_genbert(load_drop_config(overrides=args))

    with pytest.raises(FileNotFoundError, match=r"model.init .*nope.*does not exist"):
        build(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="has no structqa_config.json"):
        build(tiny_checkpoint)  # an HF encoder directory, not a drop-train checkpoint
    with pytest.raises(ConfigError, match="model.init"):
        load_drop_config(overrides=["model.init= "])


def test_a_damaged_drop_checkpoint_is_refused_by_init_and_by_prediction(
    tmp_path, tiny_checkpoint, shared_data, pretrained
):
    import shutil

    from structqa.manifest import ManifestMismatch

    ckpt = Path(shutil.copytree(pretrained, tmp_path / "best"))
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # a cut-short copy
    args = tiny_args(tiny_checkpoint, shared_data, tmp_path / "x", f"model.init={ckpt}")
    with pytest.raises(ManifestMismatch, match=r"model\.safetensors: \d+ bytes where manifest"):
        loop.build_genbert(load_drop_config(overrides=args))
    with pytest.raises(ManifestMismatch, match=r"model\.safetensors: \d+ bytes where manifest"):
        loop.load_genbert(ckpt)


def test_checkpoint_tensors_the_model_lacks_or_misshapes_are_errors(
    tmp_path, tiny_checkpoint, shared_data, pretrained
):
    args = tiny_args(tiny_checkpoint, shared_data, tmp_path / "x")
    model, _ = loop.build_genbert(load_drop_config(overrides=args))
    state = load_file(str(pretrained / "model.safetensors"))
    extra = {**state, "nc_layer.sublayers.0.attn.query.weight": torch.zeros(32, 32)}
    with pytest.raises(ValueError, match=r"lacks .*nc_layer.*nc_layer\.sublayers\.0"):
        loop.warm_start(model, extra, "ckpt")
    bad = {**state, "type_head.weight": torch.zeros(5, 32)}
    with pytest.raises(
        ValueError, match=r"type_head\.weight \(checkpoint \(5, 32\), model \(3, 32\)"
    ):
        loop.warm_start(model, bad, "ckpt")


def test_drop_train_keeps_a_stacked_relative_encoder_and_refuses_pos_inputs(
    tmp_path, tiny_checkpoint, shared_data, caplog
):
    import shutil

    from structqa.encoders import (
        AttentionOptions,
        attention_options,
        convert_stacking,
        save_encoder,
    )
    from structqa.encoders.bert import BertEncoder

    plain = BertEncoder.from_pretrained(tiny_checkpoint)
    anna = convert_stacking(plain, ["sa", "naa", "ffn"], AttentionOptions(relative_keys=True))
    save_encoder(anna, tmp_path / "anna")
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (tiny_checkpoint / f).exists():
            shutil.copy(tiny_checkpoint / f, tmp_path / "anna" / f)
    args = tiny_args(tmp_path / "anna", shared_data, tmp_path / "run")
    with caplog.at_level("WARNING"):
        model, _ = loop.build_genbert(load_drop_config(overrides=args))
    # its NAA sub-layer runs causally in the decoder too, where the first position sees none:
    # a combination neither paper describes, said
    assert "neighbor-aware (NAA) sub-layer; GenBERT's decoder reuses it" in caplog.text
    assert model.encoder.layers[0].spec == anna.layers[0].spec
    assert attention_options(model.encoder).relative_keys
    for key, value in anna.state_dict().items():
        assert torch.equal(model.encoder.state_dict()[key], value), key

    plain.config.pos_vocab_size = 4  # a word+POS encoder (ANNA Table 7)
    with pytest.raises(ValueError, match="POS-tag inputs or entity-aware attention"):
        loop.drop_ready(BertEncoder(plain.config), "x")
