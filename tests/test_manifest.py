"""Checkpoint manifests (structqa.manifest): a missing, cut-short or altered file is refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from structqa.manifest import MANIFEST, ManifestMismatch, main, verify_manifest, write_manifest


def _saved_dir(root: Path) -> Path:
    d = root / "ckpt"
    d.mkdir()
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (d / "tokenizer.json").write_text('{"model": {}}')
    (d / "train_state.json").write_text("{}")
    (d / "sub").mkdir()
    (d / "sub" / "part.bin").write_bytes(b"abc")
    (d / ".model.safetensors.x.tmp").write_bytes(b"an atomic write's leftover")
    write_manifest(d)
    return d


def test_the_manifest_records_every_file_with_size_and_hash(tmp_path):
    import hashlib

    d = _saved_dir(tmp_path)
    doc = json.loads((d / MANIFEST).read_text())
    assert sorted(doc["files"]) == [
        "model.safetensors",
        "sub/part.bin",
        "tokenizer.json",
        "train_state.json",
    ]
    rec = doc["files"]["model.safetensors"]
    assert rec["size"] == 1024
    assert rec["sha256"] == hashlib.sha256(bytes(range(256)) * 4).hexdigest()
    assert verify_manifest(d) is True


def test_a_missing_file_is_named(tmp_path):
    d = _saved_dir(tmp_path)
    (d / "tokenizer.json").unlink()
    with pytest.raises(ManifestMismatch, match=r"tokenizer\.json: missing .*copy it again"):
        verify_manifest(d)


def test_a_cut_short_file_is_named_with_both_sizes(tmp_path):
    d = _saved_dir(tmp_path)
    (d / "model.safetensors").write_bytes(bytes(range(256)))
    with pytest.raises(
        ManifestMismatch, match=r"model\.safetensors: 256 bytes where manifest\.json records 1024"
    ):
        verify_manifest(d)


def test_an_altered_file_of_the_same_size_is_caught_by_its_hash(tmp_path):
    d = _saved_dir(tmp_path)
    data = bytearray((d / "model.safetensors").read_bytes())
    data[500] ^= 1
    (d / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ManifestMismatch, match=r"model\.safetensors: its SHA-256 .* altered"):
        verify_manifest(d)


def test_files_added_later_are_not_checked(tmp_path):
    d = _saved_dir(tmp_path)
    (d / "eval").mkdir()
    (d / "eval" / "metrics.json").write_text("{}")
    assert verify_manifest(d) is True


def test_without_a_manifest_structqa_dirs_warn_and_hf_dirs_stay_quiet(tmp_path, caplog):
    d = _saved_dir(tmp_path)
    (d / MANIFEST).unlink()
    with caplog.at_level(logging.WARNING):
        assert verify_manifest(d) is False
    assert "no manifest.json" in caplog.text and "python -m structqa.manifest write" in caplog.text
    caplog.clear()
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        assert verify_manifest(hf) is False
    assert caplog.text == ""


def test_a_damaged_manifest_is_an_error_naming_it(tmp_path):
    d = _saved_dir(tmp_path)
    (d / MANIFEST).write_text('{"format": "structqa-manifest", "version": 1, "files": [1')
    with pytest.raises(ValueError, match=r"manifest\.json: invalid JSON"):
        verify_manifest(d)
    (d / MANIFEST).write_text('{"files": {}}')
    with pytest.raises(ValueError, match="not a structqa manifest"):
        verify_manifest(d)


def test_the_command_writes_and_verifies(tmp_path, capsys):
    d = _saved_dir(tmp_path)
    (d / MANIFEST).unlink()
    assert main(["write", str(d)]) == 0
    assert main(["verify", str(d)]) == 0
    (d / "sub" / "part.bin").write_bytes(b"abd")
    assert main(["verify", str(d)]) == 2
    assert "part.bin" in capsys.readouterr().err
