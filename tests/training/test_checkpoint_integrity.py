"""A broken checkpoint or input never yields a silent wrong answer or a traceback: the `structqa`
command exits with status 2 and a message naming the file (or the text) and what to do."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from tiny import mini_train_args

from structqa.cli import main
from structqa.manifest import MANIFEST, verify_manifest, write_manifest
from structqa.training.checkpoint import load_resume

MINI = "fixtures/squad-v1.1-mini.json"
CONTEXT = "Super Bowl 50 was an American football game won by the Denver Broncos."
ANSWERS = [{"text": "Denver Broncos", "answer_start": CONTEXT.index("Denver")}]


@pytest.fixture
def ckpt(tiny_trained_run: Path, tmp_path: Path) -> Path:
    """A copy of the tiny run's best/ checkpoint, free to damage."""
    return Path(shutil.copytree(tiny_trained_run / "best", tmp_path / "best"))


def predict(ckpt: Path, question: str = "Who won?", context: str = CONTEXT) -> list[str]:
    return ["predict", str(ckpt), "--question", question, "--context", context, "--bf16", "off"]


def test_every_saved_checkpoint_has_a_manifest_that_matches(tiny_trained_run):
    for name in ("best", "last"):
        directory = tiny_trained_run / name
        assert verify_manifest(directory) is True
        listed = json.loads((directory / MANIFEST).read_text())["files"]
        assert {"model.safetensors", "tokenizer.json", "structqa_config.json"} <= set(listed)
    assert "resume.pt" in json.loads((tiny_trained_run / "last" / MANIFEST).read_text())["files"]
    # resume.pt holds tensors and plain data only: torch's safe loader reads it as it is
    extra = torch.load(tiny_trained_run / "last" / "resume.pt", weights_only=True)
    assert set(extra) == {"optimizer", "scheduler", "rng"}


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "tokenizer.json").unlink(), r"tokenizer\.json: missing \(listed in"),
        (lambda d: _cut(d / "model.safetensors"), r"model\.safetensors: \d+ bytes where manifest"),
        (lambda d: _flip_a_byte(d / "model.safetensors"), r"model\.safetensors: its SHA-256"),
        (lambda d: _flip_a_byte(d / "encoder_config.json"), r"encoder_config\.json: its SHA-256"),
    ],
    ids=["missing-tokenizer", "truncated-weights", "altered-weights", "altered-config"],
)
def test_a_damaged_checkpoint_is_refused_naming_the_file(ckpt, capsys, damage, message):
    assert main(predict(ckpt)) == 0
    capsys.readouterr()
    damage(ckpt)
    assert main(predict(ckpt)) == 2
    err = capsys.readouterr().err
    assert err.startswith("structqa predict: error: ")
    assert re_search(message, err) and "copy it again from its source" in err
    assert "Traceback" not in err


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def test_an_old_checkpoint_without_a_manifest_loads_with_a_warning(ckpt, capsys, caplog):
    (ckpt / MANIFEST).unlink()
    with caplog.at_level(logging.WARNING):
        assert main(predict(ckpt)) == 0
    assert f"{ckpt}: no manifest.json" in caplog.text
    assert "answer" in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda d: (d / "tokenizer.json").unlink(),
            r"tokenizer\.json: missing \(and no vocab\.txt\)",
        ),
        (
            lambda d: _cut(d / "model.safetensors"),
            r"model\.safetensors: not a readable safetensors file",
        ),
        (
            lambda d: (d / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": 3}}'),
            r"the tokenizer files cannot be read",
        ),
        (lambda d: _cut(d / "structqa_config.json"), r"structqa_config\.json: invalid JSON"),
    ],
    ids=["missing-tokenizer", "truncated-weights", "corrupt-tokenizer", "truncated-config"],
)
def test_an_old_checkpoint_with_a_damaged_file_is_a_clear_error(ckpt, capsys, damage, message):
    """Without a manifest nothing lists the files, but each load still fails clearly: a
    checkpoint without tokenizer.json used to load a vocabulary-less tokenizer and answer."""
    (ckpt / MANIFEST).unlink()
    damage(ckpt)
    assert main(predict(ckpt)) == 2
    err = capsys.readouterr().err
    assert re_search(message, err), err
    assert "Traceback" not in err


def _tokens(ckpt: Path, text: str) -> int:
    from structqa.models.build import load_tokenizer

    return len(load_tokenizer(ckpt)(text, add_special_tokens=False)["input_ids"])


def test_an_over_long_question_is_an_error_naming_the_limit(ckpt, capsys):
    question = " ".join(["word"] * 5000) + "?"
    assert main(predict(ckpt, question)) == 2
    err = capsys.readouterr().err
    length = _tokens(ckpt, question)
    assert f"the question has {length} tokens, more than the 64 this model reads" in err
    assert "data.max_query_len" in err


@pytest.mark.parametrize(
    ("question", "context", "message"),
    [
        ("Who \ud800 won?", CONTEXT, "the question contains a lone surrogate U+D800 at offset 4"),
        ("Who won?", CONTEXT + "\x00", "the context contains a NUL character (U+0000)"),
    ],
)
def test_invalid_unicode_is_an_error(ckpt, capsys, question, context, message):
    assert main(predict(ckpt, question, context)) == 2
    assert message in capsys.readouterr().err


def test_the_predictor_raises_specific_errors(ckpt):
    from structqa.prediction.predictor import InvalidText, Predictor, QuestionTooLong

    predictor = Predictor.from_checkpoint(ckpt, bf16="off")
    with pytest.raises(QuestionTooLong, match=r"^pair 1: the question has \d+ tokens") as info:
        predictor.predict_batch([("Who won?", CONTEXT), ("why " * 70, CONTEXT)])
    assert (info.value.index, info.value.length, info.value.limit) == (
        1,
        _tokens(ckpt, "why " * 70),
        64,
    )
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidText, match=r"pair 1: the context contains a lone surrogate"):
        predictor.predict_batch([("Who won?", CONTEXT), ("Who won?", "x\udfff")])
    # a question of exactly the limit is answered
    at_limit = "the " * 64
    assert _tokens(ckpt, at_limit) == 64
    assert predictor.predict(at_limit, CONTEXT).score is not None


def test_damaged_dataset_files_end_in_exit_2(ckpt, tmp_path, capsys):
    cut = tmp_path / "cut.json.gz"
    whole = gzip.compress(json.dumps({"version": "1.1", "data": []}).encode() * 50)
    cut.write_bytes(whole[: len(whole) // 2])
    deep = tmp_path / "deep.json"
    nested = "[" * 100_000 + "]" * 100_000
    deep.write_text('{"data": [{"paragraphs": ' + nested + "}]}")
    for path, message in ((cut, "compressed data cut short"), (deep, "nested too deeply")):
        out = tmp_path / "p.json"
        assert main(["predict", str(ckpt), "--file", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and message in err and "Traceback" not in err
        assert not out.exists()


def test_over_long_questions_in_a_file_are_cut_counted_and_reported(ckpt, tmp_path, caplog):
    data = {
        "version": "1.1",
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": CONTEXT,
                        "qas": [
                            {"id": "long", "question": "who " * 80, "answers": ANSWERS},
                            {"id": "short", "question": "Who won?", "answers": ANSWERS},
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "p.json"
    with caplog.at_level(logging.WARNING):
        assert main(["predict", str(ckpt), "--file", str(path), "--out", str(out)]) == 0
    assert "1 of 2 questions are longer than data.max_query_len = 64 tokens" in caplog.text
    assert "'long'" in caplog.text
    assert set(json.loads((tmp_path / "p.json").read_text())) == {"long", "short"}


class _RunsCode:
    """An object whose unpickling would run code (it would create ``marker``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_resume_state_holding_a_pickled_object_is_refused(
    tiny_trained_run, tiny_checkpoint, shared_data, tmp_path, capsys
):
    run = Path(shutil.copytree(tiny_trained_run, tmp_path / "run"))
    marker = tmp_path / "code-ran"
    resume = run / "last" / "resume.pt"
    extra = torch.load(resume, weights_only=True)
    extra["rng"]["python"] = _RunsCode(marker)
    torch.save(extra, resume)
    args = [*mini_train_args("train", shared_data, tiny_checkpoint, run, MINI, 2), "--no-progress"]

    # the manifest catches the swap first ...
    assert main([*args, "--resume"]) == 2
    assert "resume.pt: " in capsys.readouterr().err
    # ... and a manifest forged to match does not make it load
    write_manifest(run / "last")
    assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "resume.pt: holds Python objects besides tensors and plain data" in err
    assert "(it refers to " in err  # the refused global is named
    assert not marker.exists()


def test_a_resume_state_from_before_plain_rng_states_still_loads(tmp_path):
    """resume.pt files written before this change hold numpy's RNG state as an array; those
    arrays are allowed (rebuilding them runs no code), so such runs still resume."""
    import random

    import numpy as np

    (tmp_path / "train_state.json").write_text(json.dumps({"epoch": 1, "global_step": 3}))
    legacy_rng = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": None,
    }
    torch.save({"optimizer": {}, "scheduler": None, "rng": legacy_rng}, tmp_path / "resume.pt")
    state, extra = load_resume(tmp_path)
    assert state.global_step == 3
    assert np.array_equal(extra["rng"]["numpy"][1], legacy_rng["numpy"][1])


def test_a_train_state_from_a_later_version_loads_what_this_one_knows(tmp_path, caplog):
    """A later structqa may keep more in train_state.json: this one resumes on the fields it
    knows and says which it left aside; a file that is no state at all is refused."""
    import logging

    from structqa.io import UnreadableFile

    (tmp_path / "train_state.json").write_text(json.dumps({"global_step": 3, "later": 1}))
    torch.save({"optimizer": {}, "scheduler": None, "rng": {}}, tmp_path / "resume.pt")
    with caplog.at_level(logging.WARNING):
        state, _ = load_resume(tmp_path)
    assert state.global_step == 3 and "['later'] unknown here" in caplog.text
    (tmp_path / "train_state.json").write_text("[3]")
    with pytest.raises(UnreadableFile, match="not a train state"):
        load_resume(tmp_path)


def test_a_pretraining_checkpoint_is_sealed_and_checked_when_used_as_encoder(
    tiny_checkpoint, tmp_path
):
    from structqa.encoders import load_encoder
    from structqa.manifest import ManifestMismatch
    from structqa.models.build import load_tokenizer
    from structqa.pretrain.loop import save_pretrain_checkpoint
    from structqa.pretrain.mlm_head import MaskedLM
    from structqa.training.checkpoint import TrainState

    model = MaskedLM.from_pretrained(tiny_checkpoint)
    target = tmp_path / "final"
    save_pretrain_checkpoint(target, model, load_tokenizer(tiny_checkpoint), {}, TrainState())
    assert verify_manifest(target) is True
    load_encoder(target)  # loads as it was saved
    (target / "config.json").write_text((target / "config.json").read_text() + " ")
    with pytest.raises(ManifestMismatch, match=r"config\.json: \d+ bytes where manifest"):
        load_encoder(target)


def test_resume_without_last_warns_that_the_kept_best_will_be_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """--resume where only best/ is left starts afresh (a run stopped before its first save,
    as the reader build and the experiment runner resume) and says that best/ is replaced."""
    from structqa.training.checkpoint import TrainState, resume_from

    out = tmp_path / "run"
    (out / "best").mkdir(parents=True)
    (out / "last.tmp").mkdir()  # a first save cut short
    with caplog.at_level(logging.WARNING):
        state = resume_from(out / "last", True, lambda _: None, None, None)  # type: ignore[arg-type]
    assert state == TrainState()
    assert "holds a checkpoint; starting fresh, and the first evaluation replaces it" in caplog.text
