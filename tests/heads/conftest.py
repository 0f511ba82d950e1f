"""Fixtures for head tests: featurized mini-SQuAD windows under the tiny checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from structqa.data import read_examples
from structqa.data.records import Example
from structqa.features.batching import Batch, collate
from structqa.features.squad import Feature, FeatureConfig, featurize
from structqa.models.build import load_tokenizer

MINI = "fixtures/squad-v1.1-mini.json"


@dataclass
class MiniData:
    examples: list[Example]
    features: list[Feature]

    def batch(self) -> Batch:
        """Every window in one padded batch (windows differ in length: padding is real)."""
        return collate(self.features, list(range(len(self.features))))


@pytest.fixture(scope="session")
def mini_data(tiny_checkpoint: Path, shared_data: Path) -> MiniData:
    examples = list(read_examples(shared_data / MINI).examples)
    # 64-token windows: 21 windows of 5 questions, the answer inside some and outside others
    features, _ = featurize(examples, load_tokenizer(tiny_checkpoint), FeatureConfig(64, 24, 16))
    return MiniData(examples, features)


@pytest.fixture(autouse=True)
def _one_thread_for_heads(one_thread):  # noqa: ARG001 (see tests/conftest.py)
    yield
