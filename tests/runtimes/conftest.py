"""Tiny trained-shape checkpoints of every span head and encoder stacking, for export tests."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from structqa.config import load_config
from structqa.data import read_examples
from structqa.data.records import Example
from structqa.encoders.bert import BertEncoder
from structqa.encoders.stacking import AttentionOptions, convert_stacking, save_encoder
from structqa.models.build import build_model
from structqa.training.checkpoint import TrainState, save_checkpoint

HELDOUT = "splits/squad1-heldout.mrqa.jsonl.gz"

#: name -> config overrides; every head, both joint modes, ANNA and NAA stackings, and an
#: encoder reading token tags (entity-aware attention, relative positions, POS embedding)
CASES: dict[str, list[str]] = {
    "independent": ["model.head=independent"],
    "joint": ["model.head=joint"],
    "joint-full": ["model.head=joint", "model.joint_mode=full"],
    "dyrex": ["model.head=dyrex", "model.dyrex_layers=2"],
    "dyref": ["model.head=dyref"],
    "dyrex+joint": ["model.head=dyrex+joint", "model.dyrex_layers=1"],
    "dyref+joint": ["model.head=dyref+joint"],
    "anna-dyrex": ["model.head=dyrex", "model.dyrex_layers=1", "model.block=[sa,naa,ffn]"],
    "naa-independent": ["model.head=independent", "model.block=[naa,ffn]"],
    "anna-dyref+joint": ["model.head=dyref+joint", "model.block=[sa,naa,ffn]"],
    "tagged-dyrex+joint": ["model.head=dyrex+joint", "model.dyrex_layers=1", "ENCODER=tagged"],
}


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


def make_checkpoint(
    out: Path, encoder: Path, overrides: list[str], data_dir: Path, seed: int = 0
) -> Path:
    """Build the model of ``overrides`` on ``encoder``, give every zero-initialized
    parameter (joint W, added sub-layers' projections, variant tables) random values so it
    shapes the scores, and save it as a training checkpoint at ``out``."""
    cfg = load_config(
        None,
        [
            f"model.encoder={encoder}",
            f"data.dir={data_dir}",
            "data.max_seq_len=128",
            "data.doc_stride=48",
            "data.max_query_len=32",
            "decode.max_answer_length=12",
            *overrides,
        ],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, tokenizer = build_model(cfg)
        with torch.no_grad():
            for p in model.parameters():
                if not p.detach().abs().sum():
                    p.normal_(0.0, 0.1)
    save_checkpoint(out, model.eval(), tokenizer, cfg.to_dict(), TrainState())
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
