"""Rich tables and text for the `minborg` command line: how cells, jobs, tasks and machines read."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from reference.cli_plain import ago, job_rows, started, task_rows
from reference.resources import USAGE_NAMES, format_quantity, format_resources

__all__ = ["ago", "started"]

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
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def styled(value: Any) -> str:
    text = "" if value is None else str(value)
    style = STATE_STYLE.get(text)
    return f"[{style}]{text}[/{style}]" if style else text


def share(name: str, used: Mapping[str, Any] | None, capacity: Mapping[str, Any] | None) -> str:
    """'300m/4000m': how much of one resource is taken out of the machine's capacity."""
    taken = {USAGE_NAMES.get(k, k): v for k, v in (used or {}).items()}
    return f"{format_quantity(name, taken.get(name, 0))}/{format_quantity(name, (capacity or {}).get(name, 0))}"


def state_counts(counts: Mapping[str, Any] | None) -> str:
    """{'RUNNING': 3, 'PENDING': 1, 'running_confirmed': 2} -> 'PENDING 1, RUNNING 3 (2 started)'
    (in state-machine order; RUNNING is placed, "started" is what the borglets confirmed)."""
    if not counts:
        return "none"
    counts = dict(counts)
    started = counts.pop("running_confirmed", None)
    order = {"PENDING": 0, "RUNNING": 1, "DEAD": 2}
    items = sorted(counts.items(), key=lambda kv: (order.get(kv[0], 9), kv[0]))
    items = [kv for kv in items if kv[1]]  # zero counts are noise
    if not items:
        return "none"

    def one(state: str, n: Any) -> str:
        suffix = f" ({started} started)" if state == "RUNNING" and started is not None else ""
        return f"{styled(state)} {n}{suffix}"

    return ", ".join(one(k, v) for k, v in items)


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


def key_values(title: str | None, pairs: Iterable[tuple[str, Any]]) -> Table:
    out = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    out.add_column(style="bold")
    out.add_column()
    for key, value in pairs:
        out.add_row(key, value if isinstance(value, str) else styled(value))
    return out


# --- one table per listing -------------------------------------------------------------------


def jobs_table(jobs: list[dict[str, Any]], wide: bool = False) -> Table:
    columns, rows = job_rows(jobs, wide=wide)
    return table(None, columns, rows)


def tasks_table(tasks: list[dict[str, Any]], title: str | None = None, wide: bool = False) -> Table:
    columns, rows = task_rows(tasks, wide=wide)
    for row in rows:
        row[2] = styled(row[2])
        row[7] = health({"healthy": True, "unhealthy": False}.get(row[7]))
    return table(title, columns, rows)


def machines_table(machines: list[dict[str, Any]]) -> Table:
    rows = []
    for m in sorted(machines, key=lambda m: m.get("name", "")):
        tasks = m.get("tasks")
        capacity, reserved, usage = m.get("capacity"), m.get("reserved"), m.get("usage") or {}
        # Requests minus reservations is what reclamation freed for non-prod work.
        requested = m.get("requested", reserved)
        others = {k: v for k, v in (capacity or {}).items() if k not in ("cpu", "ram")}
        # Hollow machines (scale tests only) run no processes: marked so none is taken for real.
        hollow = (m.get("attrs") or {}).get("hollow") == "true"
        rows.append(
            [
                m.get("name", "") + (" [dim](hollow)[/dim]" if hollow else ""),
                styled(m.get("state")),
                m.get("failure_domain") or "-",
                share("cpu", requested, capacity),
                share("cpu", reserved, capacity),
                share("ram", reserved, capacity),
                format_quantity("cpu", usage.get("cpu_milli", usage.get("cpu", "-"))),
                format_quantity("ram", usage.get("ram_bytes", usage.get("ram", "-"))),
                str(m.get("isolation") or "-"),
                str(len(tasks) if isinstance(tasks, list | dict) else tasks or 0),
                format_resources(others) if others else "",
            ]
        )
    columns = [
        "machine",
        "state",
        "domain",
        "cpu req",
        "cpu resv",
        "ram resv",
        "cpu used",
        "ram used",
        "isolation",
        "tasks",
    ]
    if any(row[-1] for row in rows):
        columns.append("other capacity")  # GPUs, disks, ports
    else:
        rows = [row[:-1] for row in rows]
    return table(None, columns, rows)


def replicas_table(
    replicas: list[dict[str, Any]], alive: Mapping[str, bool] | None = None
) -> Table:
    rows = []
    for r in replicas:
        row = [r.get("name", ""), styled(r.get("role")), r.get("url", "")]
        if alive is not None:
            row.append("yes" if alive.get(r.get("name", ""), True) else "[red]no[/red]")
        rows.append(row)
    columns = ["replica", "role", "url"] + (["process"] if alive is not None else [])
    return table("master replicas", columns, rows)


def processes_table(processes: list[dict[str, Any]]) -> Table:
    """The cell's processes; the CPU column shows seconds used and, for a master replica of
    a cell started with --replica-cpu, the budget its cgroup holds it to."""
    rows = [
        (
            p["role"],
            p["name"],
            str(p["pid"]),
            "[green]running[/green]" if p["alive"] else "[red]stopped[/red]",
            cpu_cell(p.get("cpu_s"), p.get("cpu_budget")),
            p.get("url") or "-",
        )
        for p in processes
    ]
    return table("processes", ("role", "name", "pid", "process", "cpu", "url"), rows)


def cpu_cell(used_s: float | None, budget: float | None) -> str:
    """12.3 s of CPU, 'of 0.5 cores' when the process has a budget: '12.3s (0.5 cores)'."""
    used = "-" if used_s is None else f"{used_s:.1f}s"
    return used if budget is None else f"{used} ({budget:g} cores)"


# --- one task: its fields and its events -------------------------------------------------------

EVENT_STYLE = {
    "scheduled": "cyan", "started": "green", "healthy": "green", "finished": "green",
    "restarted": "yellow", "unhealthy": "red", "exited": "red", "signaled": "red", "oom": "red",
    "spawn_failed": "red", "evicted": "yellow", "lost": "red", "killed": "red",
}  # fmt: skip


def pending_line(entry: Mapping[str, Any]) -> str:
    """{'reason': ..., 'tasks': 3, 'indices': [0, 1, 2]} -> '3 task(s) [0, 1, 2]: 0 of 4 machines fit: ...'."""
    indices = entry.get("indices") or []
    shown = ", ".join(str(i) for i in indices) + (", ..." if entry.get("tasks", 0) > len(indices) else "")
    reason = entry.get("reason") or "[dim]no reason yet: the scheduler has not looked at them[/dim]"
    return f"{entry.get('tasks')} task(s) [{shown}]: [yellow]{reason}[/yellow]"


def when(timestamp: Any) -> str:
    if not isinstance(timestamp, int | float) or not timestamp:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(timestamp)) + f" ({ago(timestamp)})"


def task_fields(task: Mapping[str, Any]) -> Table:
    address = f"{task['host']}:{task['port']}" if task.get("host") and task.get("port") else "-"
    pairs: list[tuple[str, Any]] = [
        ("task", f"{task.get('job')}/{task.get('index')}#{task.get('incarnation')}"),
        ("state", styled(task.get("state"))),
        ("started", started(task)),
        ("machine", task.get("machine") or (f"- (last: {task['last_machine']})" if task.get("last_machine") else "-")),
        ("host:port", address),
        ("pid", str(task.get("pid") or "-")),
        ("bns", str(task.get("bns") or "-")),
        ("restarts", str(task.get("restarts", 0))),
        ("health", health(task.get("healthy"))),
        ("cause", str(task.get("cause") or "-")),
        ("request", format_resources(task.get("request"))),
        ("usage", format_resources(task.get("usage"))),
        ("started at", when(task.get("started_at"))),
    ]
    if task.get("pending_reason"):
        pairs.insert(2, ("pending", f"[yellow]{task['pending_reason']}[/yellow]"))
    return key_values(None, pairs)


def events_table(events: list[Mapping[str, Any]]) -> Table:
    rows = []
    for e in events:
        kind = str(e.get("kind", ""))
        style = EVENT_STYLE.get(kind)
        rows.append(
            [
                when(e.get("at")),
                f"[{style}]{kind}[/{style}]" if style else kind,
                str(e.get("detail", "")),
            ]
        )
    return table("events", ("when", "event", "detail"), rows)
