"""GenBERT / NC-BERT training on DROP: the CLI end to end on tiny data (synth -> drop-train ->
drop-predict -> score), exact resume after SIGINT, and config validation."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import weights_sha256

from structqa.cli import main
from structqa.config import ConfigError
from structqa.ncbert import loop
from structqa.ncbert.config import decode_cap_note, load_drop_config, validate

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: see conftest

MINI = "drop/drop-mini.json"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "ncbert"


@pytest.fixture(scope="module")
def synth_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "synthetic.json"
    assert main(["synth", f"--out={out}", "--n=12", "--seed=0"]) == 0
    return out


def tiny_overrides(out: Path, ckpt: Path, synth: Path, *extra: str) -> list[str]:
    """NC-BERT options on, at the tiny checkpoint's size (4 heads: NC-Mask on 2)."""
    return [
        f"--model.encoder={ckpt}",
        "--model.nc_layer=true",
        "--model.nc_heads=[0,1]",
        "--model.decoder_number_mask=true",
        "--model.dice_weight=0.1",
        "--model.lsdf=true",
        "--model.max_decode_len=6",
        f"--data.train=[{synth},{MINI}]",
        f"--data.eval={MINI}",
        "--data.max_seq_len=96",
        f"--train.output_dir={out}",
        "--train.batch_size=4",
        "--train.eval_batch_size=16",
        "--train.lr=1e-3",
        "--train.bf16=off",
        "--train.log_every_steps=1",
        *extra,
    ]


def test_cli_end_to_end(tmp_path, tiny_checkpoint, shared_data, synth_file, capsys):
    run_dir = tmp_path / "run"
    args = tiny_overrides(
        run_dir,
        tiny_checkpoint,
        synth_file,
        f"--data.test={MINI}",
        f"--data.annotation_cache={tmp_path / 'annotations.jsonl'}",
        "--train.max_steps=3",
    )
    # a test file that is not there is named before anything trains
    missing = [
        a if not a.startswith("--data.test=") else "--data.test=drop/no-such.json" for a in args
    ]
    assert main(["drop-train", "--no-progress", f"--data={shared_data}", *missing]) == 2
    assert "no-such.json" in capsys.readouterr().err and not run_dir.exists()
    assert main(["drop-train", "--no-progress", f"--data={shared_data}", *args]) == 0
    best = run_dir / "best"
    # a fresh start into it is refused at once (the data is not read again)
    capsys.readouterr()
    assert main(["drop-train", "--no-progress", f"--data={shared_data}", *args]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (tmp_path / "annotations.jsonl").stat().st_size > 0  # the entity channel's spaCy
    for name in ("model.safetensors", "structqa_config.json", "tokenizer.json", "metrics.json"):
        assert (best / name).exists(), name
    saved = json.loads((best / "structqa_config.json").read_text())
    assert saved["model"]["nc_heads"] == [0, 1] and saved["model"]["dice_weight"] == 0.1
    log = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in log if "loss" in x] == [1, 2, 3]
    assert all(math.isfinite(x["loss"]) for x in log if "loss" in x)
    assert "global_f1" in log[-1]["eval"]
    test_preds = json.loads((best / "test" / "predictions.json").read_text())
    assert len(test_preds) == 19 and all(isinstance(v, str) for v in test_preds.values())
    assert "per_type" in json.loads((best / "test" / "metrics.json").read_text())

    capsys.readouterr()
    preds = tmp_path / "out" / "predictions.json"
    mini = str(shared_data / MINI)
    # the file may come after the options too
    assert main(["drop-predict", str(best), "--out", str(preds), "--bf16=off", mini]) == 0
    assert json.loads(preds.read_text()) == test_preds  # same model, same file
    capsys.readouterr()
    assert main(["score", mini, str(preds)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert 0.0 <= scores["global_em"] <= scores["global_f1"] <= 1.0
    assert scores["total"] == 19
    expected = json.loads((best / "test" / "metrics.json").read_text())
    assert scores["global_f1"] == pytest.approx(expected["global_f1"])
    # its scores beside the answers, named after them (no folder-wide metrics.json)
    beside = json.loads((preds.parent / "predictions.metrics.json").read_text())
    assert beside["global_f1"] == pytest.approx(expected["global_f1"])
    assert not (preds.parent / "metrics.json").exists()
    # one question, no gold answer needed: the answer the file's run gave it
    from structqa.data.drop import read_drop

    first = read_drop(mini).examples[0]
    capsys.readouterr()
    one = ["drop-predict", str(best), "--question", first.question, "--passage", first.passage]
    assert main([*one, "--bf16=off"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == test_preds[first.id]
    # refused: both ways at once, and answers written into the checkpoint's sealed folder
    assert main(["drop-predict", str(best), mini, *one[2:]]) == 2
    assert "give one of the two" in capsys.readouterr().err
    assert main(["drop-predict", str(best), mini, "--out", str(best / "p.json")]) == 2
    assert "write elsewhere" in capsys.readouterr().err
    # a span command given this checkpoint says which command answers with it
    assert main(["predict", str(best), "--question", "How many?", "--context", "Two."]) == 2
    assert "drop-train checkpoint" in capsys.readouterr().err


def test_resume_after_sigint_is_exact(
    tmp_path, tiny_checkpoint, shared_data, synth_file, monkeypatch
):
    def config(out: Path, encoder: Path = tiny_checkpoint):
        args = tiny_overrides(
            out,
            encoder,
            synth_file,
            f"--data.dir={shared_data}",
            "--data.test=null",
            "--model.entity_channel=false",  # no spaCy here: the end-to-end test covers it
            "--model.dropout=0.1",
            "--train.max_steps=6",
        )
        return load_drop_config(overrides=args)

    loop.run(config(tmp_path / "a"), progress=False)
    expected = load_file(str(tmp_path / "a" / "last" / "model.safetensors"))

    calls = {"n": 0}
    real_collate = loop.collate_drop

    def collate_then_interrupt(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 3:  # a real SIGINT while the third training batch is being built
            os.kill(os.getpid(), signal.SIGINT)
        return real_collate(*a, **kw)

    monkeypatch.setattr(loop, "collate_drop", collate_then_interrupt)
    # the interrupted run starts from a copy of the encoder, gone by the time it resumes:
    # the resume builds from its last/ alone
    encoder = tmp_path / "encoder-copy"
    shutil.copytree(tiny_checkpoint, encoder)
    loop.run(config(tmp_path / "b", encoder), progress=False)
    state = json.loads((tmp_path / "b" / "last" / "train_state.json").read_text())
    assert state["global_step"] == 3 and not state["finished"]

    monkeypatch.setattr(loop, "collate_drop", real_collate)
    shutil.rmtree(encoder)
    loop.run(config(tmp_path / "b", encoder), resume=True, progress=False)
    state = json.loads((tmp_path / "b" / "last" / "train_state.json").read_text())
    assert state["finished"] and state["global_step"] == 6
    resumed = load_file(str(tmp_path / "b" / "last" / "model.safetensors"))
    assert expected.keys() == resumed.keys()
    for name, tensor in expected.items():
        assert torch.equal(tensor, resumed[name]), name
    # the same weights hash, as each checkpoint's manifest records it
    assert weights_sha256(tmp_path / "a" / "last") == weights_sha256(tmp_path / "b" / "last")


def test_unknown_key_names_the_closest(capsys):
    with pytest.raises(ConfigError, match="model.nc_head'.*'nc_heads'"):
        load_drop_config(overrides=["model.nc_head=[0]"])
    assert main(["drop-train", "--train.batchsize=4"]) == 2
    assert "did you mean 'batch_size'" in capsys.readouterr().err


def test_shipped_configs_load():
    base = load_drop_config(CONFIGS / "baseline.yaml")
    nc = load_drop_config(CONFIGS / "ncbert.yaml")
    assert not base.model.nc_layer and base.model.dice_weight == 0 and not base.model.lsdf
    assert nc.model.nc_layer and nc.model.nc_heads and nc.model.dice_weight > 0 and nc.model.lsdf
    assert base.train == type(base.train)(**{**vars(nc.train), "output_dir": base.train.output_dir})
    assert base.data == nc.data.__class__(**{**vars(nc.data), "annotation_cache": None})


def test_grad_accum_is_bounded_by_the_dice_seed_slots():
    """Each micro-batch's DICE noise has its own seed, with room for 64 a step."""
    assert load_drop_config(overrides=["train.grad_accum=64"]).train.grad_accum == 64
    with pytest.raises(ConfigError, match="grad_accum must be at most 64"):
        load_drop_config(overrides=["train.grad_accum=65"])


def test_nc_heads_need_the_nc_layer():
    with pytest.raises(ConfigError, match="nc_layer"):
        load_drop_config(overrides=["model.nc_heads=[0]"])


def test_nc_heads_the_encoder_lacks_are_refused_when_the_config_loads(tmp_path):
    """The encoder's head count is read from its config file (model.init's checkpoint, else
    model.encoder's); a checkpoint not written yet is checked again when the run starts."""
    on = ["model.nc_layer=true"]
    with pytest.raises(ConfigError) as err:
        load_drop_config(overrides=[*on, "model.nc_heads=[0,1,2,40]"])
    assert str(err.value).startswith(
        "model.nc_heads [0, 1, 2, 40]: head 40 does not exist: the encoder (model.encoder "
        "'default', "
    ) and str(err.value).endswith("has 12 attention heads, numbered 0 to 11; list heads below 12")
    assert load_drop_config(overrides=[*on, "model.nc_heads=[0,11]"]).model.nc_heads == [0, 11]
    encoder, init = tmp_path / "encoder", tmp_path / "init"
    encoder.mkdir(), init.mkdir()
    (encoder / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
    (init / "encoder_config.json").write_text(json.dumps({"num_heads": 2}))
    with pytest.raises(ConfigError, match=r"\[0, 4\]: head 4 .* has 4 attention heads"):
        load_drop_config(overrides=[*on, "model.nc_heads=[0,4]", f"model.encoder={encoder}"])
    with pytest.raises(ConfigError, match=r"head 2 .*\(model.init, .*\) has 2 attention heads"):
        load_drop_config(overrides=[*on, "model.nc_heads=[2]", f"model.init={init}"])
    # a checkpoint still to be written (stage one of two): checked by validate, which
    # loop.run calls first, once it is there
    later = load_drop_config(overrides=[*on, "model.nc_heads=[40]", f"model.init={tmp_path}/x"])
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "encoder_config.json").write_text(json.dumps({"num_heads": 12}))
    with pytest.raises(ConfigError, match="head 40 does not exist"):
        validate(later)


def test_type_window_must_hold_its_words():
    """The paper's m/2 <= k: m words cannot fit in k tokens each side when m > 2k."""
    assert load_drop_config(overrides=["model.type_words=12", "model.type_window=6"])
    with pytest.raises(ConfigError, match="type_words .m=13. must be at most twice"):
        load_drop_config(overrides=["model.type_words=13", "model.type_window=6"])
    with pytest.raises(ConfigError, match="must be >= 1"):
        load_drop_config(overrides=["model.type_window=0"])
    with pytest.raises(ConfigError, match="max_decode_len"):
        load_drop_config(overrides=["model.max_decode_len=0"])


def test_decoding_shorter_than_the_answers_trained_on_is_said():
    """Targets of 16 tokens hold answers of 14: decoding stopped at 12 cut the longest."""
    assert load_drop_config().model.max_decode_len == 14
    assert decode_cap_note(load_drop_config()) is None
    note = decode_cap_note(load_drop_config(overrides=["model.max_decode_len=12"]))
    assert note is not None and "shorter than the answers training sees" in note
    assert "up to 14 tokens" in note


def test_a_gzipped_drop_file_is_scored_and_a_repeat_across_files_refused(
    tmp_path, tiny_checkpoint, shared_data
):
    import gzip

    from structqa.models.build import load_tokenizer

    mini = shared_data / "drop" / "drop-mini.json"
    packed = tmp_path / "drop-mini.json.gz"
    packed.write_bytes(gzip.compress(mini.read_bytes()))
    cfg = load_drop_config(overrides=[f"model.encoder={tiny_checkpoint}"])
    tokenizer = load_tokenizer(tiny_checkpoint)
    split = loop.read_split([packed], tokenizer, cfg)
    assert len(split.gold) == len(split.examples) == 19
    with pytest.raises(ValueError, match=r"drop-mini.json: 19 query ids already in an earlier"):
        loop.read_split([packed, mini], tokenizer, cfg)
