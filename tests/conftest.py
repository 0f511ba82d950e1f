"""Shared test fixtures: where the shared data lives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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
