"""The two-stage no-answer schedule's pieces: ``data.answerable_only`` (spans first) and
``model.init_from`` (the answerability stage starts from the span model)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from tiny import mini_train_args

from structqa.cli import main
from structqa.config import load_config
from structqa.io import read_safetensors
from structqa.models.build import build_model
from structqa.training.data import prepare_data

MINI = "fixtures/squad-v1.1-mini.json"


@pytest.fixture(scope="module")
def squad2_mini(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The mini fixture with every second question made unanswerable."""
    squad = json.loads((shared_data / MINI).read_text())
    qas = [qa for art in squad["data"] for par in art["paragraphs"] for qa in par["qas"]]
    for i, qa in enumerate(qas):
        qa["is_impossible"] = i % 2 == 1
        if qa["is_impossible"]:
            qa["plausible_answers"], qa["answers"] = qa["answers"], []
    out = tmp_path_factory.mktemp("squad2") / "squad2-mini.json"
    out.write_text(json.dumps(squad))
    return out


def test_answerable_only_trains_on_the_answerable_questions_and_validates_on_all(
    squad2_mini: Path, tiny_checkpoint: Path, shared_data: Path, caplog
) -> None:
    overrides = [
        f"model.encoder={tiny_checkpoint}",
        f"data.dir={shared_data}",
        f"data.train={squad2_mini}",
        "data.train_size=all",
        "data.validation=0.3",
        "data.max_seq_len=128",
        "data.doc_stride=32",
    ]
    cfg = load_config(overrides=overrides)
    _, tokenizer = build_model(cfg)
    every = prepare_data(cfg, tokenizer)
    cfg_only = load_config(overrides=[*overrides, "data.answerable_only=true"])
    with caplog.at_level(logging.INFO, logger="structqa.training.data"):
        only = prepare_data(cfg_only, tokenizer)
    assert any(ex.is_impossible for ex in every.train_examples)
    assert only.train_examples and not any(ex.is_impossible for ex in only.train_examples)
    assert [ex.id for ex in only.train_examples] == [
        ex.id for ex in every.train_examples if not ex.is_impossible
    ]
    assert [ex.id for ex in only.eval_examples] == [
        ex.id for ex in every.eval_examples
    ]  # validation keeps all
    assert any(ex.is_impossible for ex in only.eval_examples)
    assert "answerable_only: training on" in caplog.text


def test_init_from_starts_an_answerability_model_from_a_span_checkpoint(
    tiny_trained_run: Path, tiny_checkpoint: Path
) -> None:
    saved = read_safetensors(tiny_trained_run / "best" / "model.safetensors")
    cfg = load_config(
        overrides=[
            f"model.encoder={tiny_checkpoint}",
            "model.null_head=cls",
            f"model.init_from={tiny_trained_run / 'best'}",
        ]
    )
    model, _ = build_model(cfg)
    state = model.state_dict()
    for name, tensor in saved.items():  # the span head's tensors moved under head.span
        target = name if name in state else "head.span." + name.removeprefix("head.")
        torch.testing.assert_close(state[target], tensor, rtol=0, atol=0)
    fresh = [k for k in state if k.startswith("head.classifier.")]
    assert fresh and all(k not in saved for k in fresh)


def test_init_from_refuses_tensors_the_model_has_no_place_for(
    tiny_trained_run: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from safetensors.torch import save_file

    saved = read_safetensors(tiny_trained_run / "best" / "model.safetensors")
    save_file({**saved, "head.other.weight": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    cfg = load_config(overrides=[f"model.encoder={tiny_checkpoint}", f"model.init_from={tmp_path}"])
    with pytest.raises(ValueError, match="holds 'head.other.weight', which this model has no"):
        build_model(cfg)
    key = next(k for k in saved if k.startswith("encoder.") and saved[k].dim() == 2)
    save_file({**saved, key: torch.zeros(3, 3)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="has shape \\(3, 3\\).*the encoders differ"):
        build_model(cfg)


def test_init_from_names_a_missing_checkpoint(tmp_path: Path, tiny_checkpoint: Path) -> None:
    cfg = load_config(overrides=[f"model.encoder={tiny_checkpoint}", f"model.init_from={tmp_path}"])
    with pytest.raises(FileNotFoundError, match="model.init_from: .*not a structqa checkpoint"):
        build_model(cfg)


def test_two_stages_train_end_to_end_with_a_frozen_encoder(
    squad2_mini: Path, tiny_checkpoint: Path, shared_data: Path, tmp_path: Path
) -> None:
    """Stage 1 on the answerable questions, stage 2 from its best/ with only the classifier
    learning: the encoder and span head leave stage 2 as they entered it."""
    first, second = tmp_path / "spans", tmp_path / "answerability"
    base = mini_train_args("train", shared_data, tiny_checkpoint, first, str(squad2_mini), 2)
    assert main([*base, "--data.answerable_only=true", "--no-progress"]) == 0
    args = mini_train_args("train", shared_data, tiny_checkpoint, second, str(squad2_mini), 2)
    args += [
        "--model.null_head=cls",
        f"--model.init_from={first / 'best'}",
        "--train.param_lr=encoder.*:0,head.span.*:0",
        "--no-progress",
    ]
    assert main(args) == 0
    before = read_safetensors(first / "best" / "model.safetensors")
    after = read_safetensors(second / "last" / "model.safetensors")
    for name, tensor in before.items():
        target = name if name in after else "head.span." + name.removeprefix("head.")
        torch.testing.assert_close(after[target], tensor, rtol=0, atol=0)
    added = [k for k in after if k.startswith("head.classifier.")]
    assert added and not any(k in before for k in added)  # the stage-2 classifier


def test_init_from_takes_the_checkpoints_stacking_when_none_is_given(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """A checkpoint trained with an added sub-layer (the general reader's recipe) starts a
    model that names no ``model.block``: the model gets the checkpoint's stacking and every
    one of its tensors, the added sub-layer's included."""
    from safetensors.torch import save_file

    from structqa.encoders.build import encoder_config_dict
    from structqa.io import write_json

    stacked, _ = build_model(
        load_config(overrides=[f"model.encoder={tiny_checkpoint}", "model.block=[sa,sa,ffn]"])
    )
    with torch.no_grad():  # the added sub-layer away from the identity, so that it shows
        for name, p in stacked.named_parameters():
            if ".sublayers.1." in name:
                p.add_(0.01)
    saved = {k: v.contiguous() for k, v in stacked.state_dict().items()}
    save_file(saved, str(tmp_path / "model.safetensors"))
    write_json(tmp_path / "encoder_config.json", encoder_config_dict(stacked.encoder))
    cfg = load_config(overrides=[f"model.encoder={tiny_checkpoint}", f"model.init_from={tmp_path}"])
    model, _ = build_model(cfg)
    assert tuple(model.encoder.config.block) == ("sa", "sa", "ffn")
    state = model.state_dict()
    assert any(".sublayers.1." in k for k in saved)
    for name, tensor in saved.items():
        torch.testing.assert_close(state[name], tensor, rtol=0, atol=0)


def test_init_from_an_encoder_folder_says_to_give_it_as_the_encoder(tiny_checkpoint: Path) -> None:
    cfg = load_config(
        overrides=[f"model.encoder={tiny_checkpoint}", f"model.init_from={tiny_checkpoint}"]
    )
    with pytest.raises(ValueError, match=r"is an encoder .*--model.encoder="):
        build_model(cfg)


def test_init_from_refuses_weights_changed_since_they_were_sealed(
    tiny_trained_run: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The manifest is checked before the weights are loaded, as every other load does."""
    import shutil

    from safetensors.torch import save_file

    from structqa.manifest import ManifestMismatch

    copy = tmp_path / "best"
    shutil.copytree(tiny_trained_run / "best", copy)
    saved = read_safetensors(copy / "model.safetensors")
    save_file({k: torch.zeros_like(v) for k, v in saved.items()}, str(copy / "model.safetensors"))
    cfg = load_config(overrides=[f"model.encoder={tiny_checkpoint}", f"model.init_from={copy}"])
    with pytest.raises(ManifestMismatch, match="model.safetensors"):
        build_model(cfg)


def test_init_from_another_head_names_the_checkpoints_head(
    tiny_trained_run: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """A tensor the model has no place for: the error says which head the checkpoint was
    trained with (here a copy, unsealed, with one tensor of another head added)."""
    import shutil

    from safetensors.torch import save_file

    copy = tmp_path / "best"
    shutil.copytree(tiny_trained_run / "best", copy)
    (copy / "manifest.json").unlink()
    saved = read_safetensors(copy / "model.safetensors")
    save_file({**saved, "head.other.weight": torch.zeros(2)}, str(copy / "model.safetensors"))
    cfg = load_config(overrides=[f"model.encoder={tiny_checkpoint}", f"model.init_from={copy}"])
    with pytest.raises(ValueError, match=r"it was trained with model.head=independent"):
        build_model(cfg)
