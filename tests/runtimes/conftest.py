"""Tiny trained-shape checkpoints of every span head and encoder stacking, for export tests."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from export_cases import CASES, HELDOUT, make_checkpoint

from structqa.data import read_examples
from structqa.data.records import Example
from structqa.encoders import AttentionOptions, convert_stacking, save_encoder
from structqa.encoders.bert import BertEncoder


@dataclass
class Heldout:
    examples: list[Example]


@pytest.fixture(scope="session")
def heldout(shared_data: Path) -> Heldout:
    """The first 24 held-out SQuAD questions (their contexts span one to three windows)."""
    return Heldout(list(read_examples(shared_data / HELDOUT).examples)[:24])


@pytest.fixture(scope="session")
def tagged_encoder(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    out = tmp_path_factory.mktemp("tagged-encoder")
    shutil.copytree(tiny_checkpoint, out, dirs_exist_ok=True)
    enc = convert_stacking(
        BertEncoder.from_pretrained(tiny_checkpoint),
        "SA->FFN",
        AttentionOptions(relative_keys=True, relative_values=True, entity_bias=True),
    )
    enc.add_pos_tag_embeddings(19)
    save_encoder(enc, out)
    return out


@pytest.fixture(scope="session")
def checkpoint_of(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_checkpoint: Path,
    tagged_encoder: Path,
    shared_data: Path,
) -> Callable[[str], Path]:
    """``checkpoint_of(name)``: the checkpoint of a CASES entry, built on first use
    (read-only for the tests)."""
    root = tmp_path_factory.mktemp("export-cases")

    @functools.cache
    def build(name: str) -> Path:
        overrides = [o for o in CASES[name] if not o.startswith("ENCODER=")]
        encoder = tagged_encoder if "ENCODER=tagged" in CASES[name] else tiny_checkpoint
        return make_checkpoint(root / name, encoder, overrides, shared_data)

    return build


@pytest.fixture(autouse=True)
def _one_thread_for_runtimes(one_thread):  # noqa: ARG001 (see tests/conftest.py)
    yield
