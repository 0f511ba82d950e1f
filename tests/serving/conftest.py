"""Fixtures of the service tests: the tiny trained checkpoints (the helpers that serve them are
in serving_support.py, which the tests import by name: a conftest is not importable by name
once another directory's conftest was imported first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from structqa.prediction.predictor import Predictor


@pytest.fixture(scope="session")
def tiny_predictor(tiny_trained_run: Path) -> Predictor:
    return Predictor.from_checkpoint(tiny_trained_run / "best", bf16="off")


@pytest.fixture(scope="session")
def tiny_dyrex_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path, shared_data: Path
) -> Path:
    """The ``best`` checkpoint of the tiny encoder with a DyREx head, trained two steps."""
    import torch
    from tiny import mini_train_args

    from structqa.cli import main

    out = tmp_path_factory.mktemp("tiny-dyrex") / "run"
    mini = "fixtures/squad-v1.1-mini.json"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        args = mini_train_args("train", shared_data, tiny_checkpoint, out, mini, steps=2)
        assert main([*args, "--no-progress", "--model.head=dyrex"]) == 0
    finally:
        torch.set_num_threads(before)
    return out / "best"
