"""Shared test fixtures: where the shared data lives."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

# The test checkpoints are shared by many tests: `predict` and `serve` must not write an int8
# export into them on a CPU without native bf16 (tests of that export turn it back on).
os.environ["STRUCTQA_AUTO_EXPORT"] = "off"
# a general reader built on this machine (`structqa reader build`) must not answer for the
# tests: they look for it in a directory of their own, empty
os.environ["STRUCTQA_HOME"] = tempfile.mkdtemp(prefix="structqa-home-")
os.environ.pop("STRUCTQA_READER", None)

# Let the suite run from a plain checkout, without installing the package first.
_SRC = Path(__file__).resolve().parents[1] / "src"
if str(_SRC) not in sys.path:
    sys.path.insert(0, str(_SRC))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data directory (../shared/data or $STRUCTQA_DATA); skips tests without it."""
    from structqa.paths import resolve_data_dir

    try:
        return resolve_data_dir(None)
    except FileNotFoundError as err:
        pytest.skip(f"shared data not available: {err}")


# ---- tiny model checkpoint ---------------------------------------------------------------

_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:  # so test modules can `from tiny import make_tiny_checkpoint`
    sys.path.insert(0, str(_TESTS))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """A tiny random HF BERT checkpoint directory (session-scoped; treat it as read-only).

    Built by ``tests/tiny.py::make_tiny_checkpoint`` from the contexts and questions of
    ``fixtures/squad-v1.1-mini.json`` (skips without the shared data): hidden 32, 2 layers,
    4 heads, intermediate 64, 512 positions, an uncased WordPiece vocabulary of ~250 pieces
    under which every fixture text tokenizes without [UNK], seed 0. The directory holds
    vocab.txt, tokenizer.json, tokenizer_config.json, config.json and model.safetensors, so
    ``BertEncoder.from_pretrained``, ``load_tokenizer`` and ``transformers.BertModel`` all
    load it. Copy it (``shutil.copytree``) before changing anything inside.
    """
    from tiny import make_tiny_checkpoint, mini_squad_texts

    out = tmp_path_factory.mktemp("tiny-bert")
    return make_tiny_checkpoint(out, mini_squad_texts(shared_data))


@pytest.fixture(scope="session")
def tiny_trained_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path, shared_data: Path
) -> Path:
    """A run directory (with ``best/`` and ``last/``) of the tiny encoder trained for two steps
    on the mini fixture; read-only for the tests that share it."""
    from tiny import mini_train_args

    from structqa.cli import main

    out = tmp_path_factory.mktemp("tiny-run") / "run"
    mini = "fixtures/squad-v1.1-mini.json"
    code = main(
        [
            *mini_train_args("train", shared_data, tiny_checkpoint, out, mini, steps=2),
            "--no-progress",
        ]
    )
    assert code == 0
    return out


@pytest.fixture
def one_thread():
    """One intra-op thread for tests on tiny tensors (``pytestmark = usefixtures(...)``): they
    gain nothing from a second thread, and on a busy machine OpenMP's spin-waiting made the
    training runs in tests/heads ~10x slower (measured: 15 s vs 1.4 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
