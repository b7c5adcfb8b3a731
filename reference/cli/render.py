"""Rich consoles and tables for the `minborg` commands that are not everyday ones (the demo, cell up's progress); the everyday commands print plain text (cli_plain.py, cli_views.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from reference.cli.plain import ago, started, task_rows
from reference.cli.views import cpu_cell

__all__ = ["ago", "cpu_cell", "started"]

# Off a terminal, nothing is cut at 80 columns: a table as wide as its values, lines unwrapped.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 100_000)
errors = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 100_000)

STATE_STYLE = {
    "RUNNING": "green",
    "PENDING": "yellow",
    "DEAD": "red",
    "up": "green",
    "down": "red",
    "leader": "bold green",
}


def print_json(data: Any) -> None:
    """Machine-readable output: plain JSON on stdout, nothing else (no colours, no wrapping)."""
    from reference.cli.plain import dump

    print(dump(data, "json"))


def styled(value: Any) -> str:
    text = "" if value is None else str(value)
    style = STATE_STYLE.get(text)
    return f"[{style}]{text}[/{style}]" if style else text


def health(value: Any) -> str:
    return {True: "[green]healthy[/green]", False: "[red]unhealthy[/red]"}.get(value, "-")


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    # A light box leaves the width to the values: listings must read in an 80-column terminal.
    out = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in columns:
        out.add_column(column)
    for row in rows:
        out.add_row(*(styled(cell) if not isinstance(cell, str) else cell for cell in row))
    return out


# --- one table per listing -------------------------------------------------------------------


def tasks_table(tasks: list[dict[str, Any]], title: str | None = None, wide: bool = False) -> Table:
    columns, rows = task_rows(tasks, wide=wide)
    for row in rows:
        row[2] = styled(row[2])
        row[7] = health({"healthy": True, "unhealthy": False}.get(row[7]))
    return table(title, columns, rows)
