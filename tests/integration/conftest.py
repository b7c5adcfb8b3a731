"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reference import launcher


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state dir for a cell the test starts with the launcher; whatever the test did, what
    it started is stopped."""
    path = tmp_path / "cell"
    yield path
    if (path / "cell.json").exists() and launcher.CellInfo.load(path).running():
        launcher.down(path)
