"""The conformance suite: drives a cell through its HTTP API and judges it by spec/."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for `minborg conformance` (same arguments as `python -m harness`)."""
    from harness.cli import main as cli_main

    return cli_main(argv)
