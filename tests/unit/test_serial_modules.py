"""The integration env's list of serial test modules (tests/conftest.py) names files that exist:
a renamed module would otherwise leave the list silently and run on two workers."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SERIAL_MODULES

ROOT = Path(__file__).resolve().parents[2]


def test_every_serial_module_exists() -> None:
    missing = sorted(name for name in SERIAL_MODULES if not (ROOT / name).is_file())
    assert not missing, f"tests/conftest.py names test modules that do not exist: {missing}"
