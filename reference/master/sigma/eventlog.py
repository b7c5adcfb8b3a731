"""Sigma's events page: the task events the cell holds (each task keeps its last 40), newest first, searched, filtered by kind, paged; machines down are listed above them."""

from __future__ import annotations

import time
from typing import Any

from reference.cli.plain import ago
from reference.master import events as task_events
from reference.master.cell import Cell
from reference.master.sigma.html import e, filter_form, page, pager, sort_headers, table
from reference.master.sigma.listing import Query, select


def event_rows(cell: Cell) -> list[dict[str, Any]]:
    rows = []
    for task in cell.state.tasks.values():
        for n, at, kind, detail in cell.task_info(task.id).events:
            rows.append({"at": at, "task": str(task.id), "job": task.id.job, "index": task.id.index,
                         "kind": kind, "detail": detail, "n": n})  # fmt: skip
    return rows


def events_page(cell: Cell, replica_name: str, params: dict[str, str], who: str) -> str:
    rows = event_rows(cell)
    query = Query(params.get("q", ""), (("kind", params.get("kind", "")),), params.get("sort", ""),
                  int(params.get("page") or 1))  # fmt: skip
    columns = [("when", "at"), ("task", "task"), ("event", "kind"), ("detail", "")]
    shown = select(rows, query, ("task", "detail"), ["at", "task", "kind"], "-at")
    body_rows = []
    for r in shown.rows:
        css = "bad" if r["kind"] in task_events.WARNINGS else "ok" if r["kind"] in ("started", "healthy", "finished") else ""
        when = time.strftime("%H:%M:%S", time.localtime(r["at"]))
        body_rows.append([
            e(f"{when} ({ago(r['at'])})"),
            f'<a href="/ui/jobs/{e(r["job"])}/tasks/{r["index"]}">{e(r["task"])}</a>',
            f'<span class="{css}">{e(r["kind"])}</span>', e(r["detail"]),
        ])  # fmt: skip
    down = [m.name for m in cell.state.machines.values() if not m.up]
    machines = ""
    if down:
        links = ", ".join(f'<a class="bad" href="/ui/machines/{e(n)}">{e(n)}</a>' for n in sorted(down))
        machines = f"<p>machines down now: {links}</p>"
    body = (
        '<p><a href="/ui">cell</a> / events</p><h2>Events</h2>' + machines
        + filter_form("/ui/events", params, "search task, detail", [("kind", "event", task_events.KINDS)])
        + pager("/ui/events", params, shown, "events")
        + table([c for c, _ in columns], body_rows, headers=sort_headers("/ui/events", params, shown, columns))
    )
    return page("events", body, cell.revision, replica_name, who)
