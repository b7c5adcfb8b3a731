"""Job and task listings as plain text, with the standard library only: the same rows for the fast path (cli_fast.py) and the full command line.

Tables never cut a value: a listing piped to a file or another program keeps every column
whole, however wide. Colours (states) only when writing to a terminal.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from reference.resources import format_resources

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any

COLORS = {"bold": "1", "green": "32", "yellow": "33", "red": "31", "cyan": "36", "dim": "2"}
STATE_COLOR = {
    "RUNNING": "green", "PENDING": "yellow", "STARTING": "yellow", "DEAD": "red", "BACKOFF": "red",
    "up": "green", "down": "red",
}  # fmt: skip
OUTPUTS = ("table", "wide", "json", "yaml", "name", "jsonpath=TEMPLATE")  # cli/output.py
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def color_on() -> bool:
    """Colours and bold only on a terminal, and never under NO_COLOR."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def paint(text: str, color: str | None, on: bool) -> str:
    return f"\x1b[{COLORS[color]}m{text}\x1b[0m" if on and color in COLORS else text


def visible_len(text: str) -> int:
    return len(_ANSI.sub("", text))


def render(columns: Sequence[str], rows: Iterable[Sequence[str]], *, color: bool = False, title: str | None = None) -> str:
    """Columns two spaces apart, a rule under the header, nothing truncated."""
    rows = [list(r) for r in rows]
    widths = [len(c) for c in columns]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], visible_len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c + " " * (w - visible_len(c)) for c, w in zip(cells, widths, strict=True)]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out.append(line([paint(c, None, color) for c in columns]))
    out.append("  ".join("─" * w for w in widths))
    out.extend(line(r) for r in rows)
    return "\n".join(out)


# --- values as a person reads them -----------------------------------------------------------


def ago(timestamp: Any) -> str:
    if not isinstance(timestamp, int | float):
        return str(timestamp or "-")
    seconds = max(0.0, time.time() - timestamp)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def started(task: Mapping[str, Any]) -> str:
    """A RUNNING task's start as its borglet reports it: yes, queued there, or not yet seen."""
    if task.get("crash_loop"):
        return "crash loop"
    if task.get("state") != "RUNNING":
        return "-"
    if task.get("confirmed"):
        return "yes"
    return "queued" if task.get("borglet_state") == "QUEUED" else "not yet"


def health_text(value: Any) -> tuple[str, str | None]:
    return {True: ("healthy", "green"), False: ("unhealthy", "red")}.get(value, ("-", None))


# --- the listings ----------------------------------------------------------------------------


USER_ENV = "MINBORG_USER"


def job_by_name(
    name: str, list_jobs: Callable[[], list[dict[str, Any]]], whoami: Callable[[], Mapping[str, Any]] | None = None
) -> str:
    """The key of the job a reading command names as NAME alone: $MINBORG_USER's job of that
    name when it is set (a context's user sets it), else the token's user's (whoami: GET
    /v1/whoami) unless that is the admin, else the cell's one job of that name (list_jobs: GET
    /v1/jobs); several jobs of one name are a ValueError that lists them."""
    user = os.environ.get(USER_ENV) or token_user(whoami)
    if user:
        return f"{user}/{name}"
    found = sorted(j.get("key") or f"{j.get('user')}/{j.get('name')}" for j in list_jobs() if j.get("name") == name)
    if len(found) == 1:
        return found[0]
    if not found:
        raise ValueError(f"no job named {name!r} in the cell: give USER/NAME such as demo/hello_world")
    raise ValueError(f"{len(found)} jobs are named {name!r} ({', '.join(found)}): give USER/NAME, or set ${USER_ENV}")


def token_user(whoami: Callable[[], Mapping[str, Any]] | None) -> str | None:
    """The user the token names (not the admin, who owns no jobs of its own); None when the
    masters check no tokens or do not say (a master from before /v1/whoami)."""
    if whoami is None:
        return None
    from reference.cellfile import ClientError

    try:
        answer = whoami()
    except ClientError:
        return None
    user = answer.get("user")
    return user if isinstance(user, str) and user and not answer.get("admin") else None


def job_status(task_count: int, counts: Mapping[str, int] | None) -> tuple[str, str]:
    """A job's status and ready count from its tasks by state (GET /v1/jobs/U/N's `tasks`, and
    `backoff`: how many of its crash_loops): BACKOFF while a task crash-loops (the master waits
    before its next incarnation); PENDING while any task waits for a machine; RUNNING when every wanted task runs with its
    start confirmed by its borglet; STARTING while some are placed but not yet confirmed; DEAD
    when every task ended; DEGRADED when some ended and the others run. Ready is the confirmed
    running tasks over the wanted ones: `3/3`."""
    if counts is None:
        return "-", "-"
    running, confirmed = counts.get("RUNNING", 0), counts.get("running_confirmed", 0)
    ready = f"{confirmed}/{task_count}"
    if counts.get("backoff", 0):
        return "BACKOFF", ready
    if counts.get("PENDING", 0):
        return "PENDING", ready
    if running and running > confirmed:
        return "STARTING", ready
    if task_count and confirmed >= task_count:
        return "RUNNING", ready
    if counts.get("DEAD", 0) and not running:
        return "DEAD", ready
    return ("DEGRADED" if counts.get("DEAD", 0) else "RUNNING"), ready


def job_counts(jobs: list[dict[str, Any]], fetch: Callable[[str], Mapping[str, Any]], limit: int = 200,
               threads: int = 8) -> dict[str, Mapping[str, int]]:  # fmt: skip
    """Each job's tasks by state, by key: `fetch(key)` is GET /v1/jobs/KEY's answer, asked for
    `threads` jobs at a time (the listing carries no counts). Past `limit` jobs none is asked:
    their status reads `-` (`minborg job show` has it)."""
    import threading

    keys = [j.get("key") or f"{j.get('user')}/{j.get('name')}" for j in jobs][:limit]
    found: dict[str, Mapping[str, int]] = {}
    todo = list(reversed(keys))

    def work() -> None:
        while todo:
            try:
                key = todo.pop()
            except IndexError:
                return
            try:
                answer = fetch(key)
                found[key] = {**(answer.get("tasks") or {}), "backoff": len(answer.get("crash_loops") or [])}
            except Exception:  # noqa: BLE001 - gone since the listing, or refused: no status, not a failure
                pass

    workers = [threading.Thread(target=work, daemon=True) for _ in range(min(threads, len(keys)))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return found


def job_rows(
    jobs: list[dict[str, Any]], *, wide: bool = False, counts: Mapping[str, Mapping[str, int]] | None = None,
    color: bool = False,
) -> tuple[list[str], list[list[str]]]:  # fmt: skip
    columns = ["job", "status", "ready", "priority", "tasks", "request", "restart", "appclass", "version", "submitted"]
    if wide:
        columns += ["command", "constraints"]
    rows = []
    for j in jobs:
        key = j.get("key") or f"{j.get('user')}/{j.get('name')}"
        status, ready = job_status(int(j.get("task_count") or 0), (counts or {}).get(key))
        row = [
            key,
            paint(status, STATE_COLOR.get(status, "red" if status == "DEGRADED" else None), color),
            ready,
            str(j.get("priority", "")),
            str(j.get("task_count", "")),
            format_resources(j.get("request")),
            str(j.get("restart_policy", "")),
            str(j.get("appclass", "")),
            str(j.get("version", "")),
            ago(j.get("submitted_at")),
        ]
        if wide:
            row += [" ".join(j.get("command") or []), json.dumps(j.get("constraints") or [])]
        rows.append(row)
    return columns, rows


def task_rows(
    tasks: list[dict[str, Any]], *, wide: bool = False, color: bool = False
) -> tuple[list[str], list[list[str]]]:
    columns = ["index", "incarnation", "state", "started", "machine", "host:port", "restarts", "health"]
    rows = []
    for t in sorted(tasks, key=lambda t: (t.get("index", 0), t.get("incarnation", 0))):
        address = f"{t['host']}:{t['port']}" if t.get("host") and t.get("port") else "-"
        state = str(t.get("status") or t.get("state") or "")  # BACKOFF: a crash loop
        health, tint = health_text(t.get("healthy"))
        loop = t.get("crash_loop") or {}
        row = [
            str(t.get("index", "")),
            str(t.get("incarnation", "")),
            paint(state, STATE_COLOR.get(state), color),
            started(t),
            t.get("machine") or "-",
            address,
            str(t.get("restarts", 0)),
            paint(health, tint, color),
            str(loop.get("text") or t.get("cause") or ""),
        ]
        if wide:
            last = (t.get("events") or [{}])[-1]
            row += [
                str(t.get("pid") or "-"),
                str(t.get("bns") or "-"),
                f"{last.get('kind')}: {last.get('detail')}" if last.get("kind") else "-",
                str(t.get("pending_reason") or ""),
            ]
        rows.append(row)
    if wide:
        columns += ["cause / crash loop", "pid", "bns", "last event", "pending reason"]
    elif any(row[8] for row in rows):
        columns.append("cause / crash loop")
    else:
        rows = [row[:8] for row in rows]  # no task has died: no cause to show
    return columns, rows


def dump(data: Any, output: str) -> str:
    """Machine-readable output: JSON (sorted, indented), YAML, names or a jsonpath template,
    each quantity in one unit and each time in ISO 8601 too (cli/output.py)."""
    from reference.cli.output import render as render_data

    return render_data(data, output)


def error_text(err: Any) -> str:
    """A ClientError as the line(s) the command prints on stderr: a cell that no replica
    answers says what to do; anything else is `error: ` and what the cell said."""
    from reference.cellfile import NO_ANSWER, client_error_message

    if err.status == NO_ANSWER and err.url and str(err.detail).startswith("no master replica could serve"):
        context = os.environ.get("MINBORG_CONTEXT_IN_USE")  # cli/contexts.py's IN_USE_ENV
        if context:
            return (f"minborg: no cell answers at {err.url} (context {context}): check it with "
                    "'minborg config get-contexts', or pass --context or --master")  # fmt: skip
        return f"minborg: no cell answers at {err.url}: start one with 'minborg cell up' or pass --master"
    return f"error: {client_error_message(err)}"
