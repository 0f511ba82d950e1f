"""Checkpoints of every span head and stacking for the export tests (imported by name;
pytest collects no tests here)."""

from __future__ import annotations

from pathlib import Path

import torch

from structqa.config import load_config
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
    # an answerability classifier decides no-answer: its odds are a graph output too
    "classifier-dyrex": ["model.head=dyrex", "model.dyrex_layers=1", "model.null_head=queries"],
}


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
