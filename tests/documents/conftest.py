"""Fixtures shared by the document-collection tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_documents import BEES, VOLCANO


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """A folder of two text files: bees and Etna."""
    d = tmp_path / "docs"
    d.mkdir()
    (d / "bees.txt").write_text(BEES, encoding="utf-8")
    (d / "etna.txt").write_text(VOLCANO, encoding="utf-8")
    return d
