"""Sigma's events page: the task events the cell holds (each task keeps its last 40), and the jobs submitted and removed and the machines gone down, come up or removed that this replica's change log holds; newest first, searched, filtered by kind, paged; machines down now are listed above them.

Job and machine changes carry no time of their own in the change log: a submission shows its
job's submission time; the others the time this replica's `CellEvents` read them, which it
does every `SCAN_S` once the page was first asked for (before that, the time of that first
read, marked `~`). They are the same events `minborg events` streams (master/watch.py).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import Any

from reference.cli.plain import ago
from reference.master import codec
from reference.master import events as task_events
from reference.master.cell import Cell
from reference.master.changes import Change, ChangeLog, TooOld
from reference.master.sigma.html import e, filter_form, page, pager, sort_headers, table
from reference.master.sigma.listing import Query, select

SCAN_S = 2.0
KEPT = 2000  # job and machine events kept per replica, newest last
JOB_KINDS = ("submitted", "removed")
MACHINE_KINDS = ("down", "up", "removed")
KINDS = tuple(dict.fromkeys((*task_events.KINDS, *JOB_KINDS, *MACHINE_KINDS)))


def change_events(c: Change, now: float) -> list[dict[str, Any]]:
    """The job and machine events of one change, as rows of the page (as watch.event_messages words them)."""
    if c.kind == "job" and c.type == "ADDED" and c.value is not None:
        at = codec.decode_job(c.value)[1].submitted_at or now
        return [{"at": at, "seen": at == now, "subject": f"job {c.key}", "link": f"/ui/jobs/{c.key}", "kind": "submitted",
                 "detail": "", "revision": c.revision}]  # fmt: skip
    if c.kind == "job" and c.type == "DELETED":
        return [{"at": now, "seen": True, "subject": f"job {c.key}", "link": "", "kind": "removed", "detail": "",
                 "revision": c.revision}]  # fmt: skip
    if c.kind != "machine":
        return []
    if c.value is None:
        return [{"at": now, "seen": True, "subject": f"machine {c.key}", "link": "", "kind": "removed", "detail": "",
                 "revision": c.revision}]  # fmt: skip
    machine, info = codec.decode_machine(c.value)
    before = codec.decode_machine(c.prev)[0] if c.prev is not None else None
    if before is not None and before.up == machine.up:
        return []
    return [{"at": now, "seen": True, "subject": f"machine {machine.name}", "link": f"/ui/machines/{machine.name}",
             "kind": "up" if machine.up else "down", "detail": info.reason, "revision": c.revision}]  # fmt: skip


class CellEvents:
    """The job and machine events of one replica's change log, read as it grows (the last KEPT)."""

    def __init__(self, log: ChangeLog, clock: Any = time.time) -> None:
        self.log, self.clock = weakref.ref(log), clock
        self.rows: deque[dict[str, Any]] = deque(maxlen=KEPT)
        self.cursor: int | None = None
        self.lock = threading.Lock()

    def scan(self) -> bool:
        """Read the changes since the last scan; False once the log is gone."""
        log = self.log()
        if log is None:
            return False
        with self.lock:
            try:
                changes, upto = log.after(log.floor if self.cursor is None else self.cursor)
            except TooOld as old:  # the cache was read anew: what came between is not held
                changes, upto = log.after(old.floor)
            now = self.clock()
            for c in changes:
                if c.kind in ("job", "machine"):
                    self.rows.extend(change_events(c, now))
            self.cursor = upto
        return True


_FOLLOWED: weakref.WeakKeyDictionary[ChangeLog, CellEvents] = weakref.WeakKeyDictionary()
_FOLLOWING = threading.Lock()


def cell_events(log: ChangeLog) -> CellEvents:
    """The replica's CellEvents, read now and then every SCAN_S by a thread of its own (made on first use)."""
    with _FOLLOWING:
        found = _FOLLOWED.get(log)
        if found is None:
            found = _FOLLOWED[log] = CellEvents(log)

            def follow(events: CellEvents) -> None:
                while events.scan():
                    time.sleep(SCAN_S)

            threading.Thread(target=follow, args=(found,), name="sigma-events", daemon=True).start()
    found.scan()
    return found


def event_rows(cell: Cell, log: ChangeLog | None = None) -> list[dict[str, Any]]:
    """The task events of the cell, and the job and machine events of `log` (the replica's change log)."""
    rows = []
    for task in cell.state.tasks.values():
        for n, at, kind, detail in cell.task_info(task.id).events:
            rows.append({"at": at, "seen": False, "subject": str(task.id), "link": f"/ui/jobs/{task.id.job}/tasks/{task.id.index}",
                         "kind": kind, "detail": detail, "n": n})  # fmt: skip
    if log is not None:
        events = cell_events(log)
        with events.lock:
            rows.extend(dict(r) for r in events.rows)
    return rows


def events_page(cell: Cell, replica_name: str, params: dict[str, str], who: str, log: ChangeLog | None = None) -> str:
    rows = event_rows(cell, log)
    query = Query(params.get("q", ""), (("kind", params.get("kind", "")),), params.get("sort", ""),
                  int(params.get("page") or 1))  # fmt: skip
    columns = [("when", "at"), ("subject", "subject"), ("event", "kind"), ("detail", "")]
    shown = select(rows, query, ("subject", "detail"), ["at", "subject", "kind"], "-at")
    body_rows = []
    for r in shown.rows:
        bad = r["kind"] in task_events.WARNINGS or (r["subject"].startswith("machine ") and r["kind"] in ("down", "removed"))
        css = "bad" if bad else "ok" if r["kind"] in ("started", "healthy", "finished", "up", "submitted") else ""
        when = ("~" if r["seen"] else "") + time.strftime("%H:%M:%S", time.localtime(r["at"]))
        subject = f'<a href="{e(r["link"])}">{e(r["subject"])}</a>' if r["link"] else e(r["subject"])
        body_rows.append([e(f"{when} ({ago(r['at'])})"), subject, f'<span class="{css}">{e(r["kind"])}</span>', e(r["detail"])])
    down = [m.name for m in cell.state.machines.values() if not m.up]
    machines = ""
    if down:
        links = ", ".join(f'<a class="bad" href="/ui/machines/{e(n)}">{e(n)}</a>' for n in sorted(down))
        machines = f"<p>machines down now: {links}</p>"
    body = (
        '<p><a href="/ui">cell</a> / events</p><h2>Events</h2>' + machines
        + filter_form("/ui/events", params, "search task, job, machine, detail", [("kind", "event", KINDS)])
        + pager("/ui/events", params, shown, "events")
        + table([c for c, _ in columns], body_rows, headers=sort_headers("/ui/events", params, shown, columns))
    )
    return page("events", body, cell.revision, replica_name, who)
