"""Sigma's events page shows the jobs submitted and removed and the machines down, up and removed that the replica's change log holds, beside the task events."""

from __future__ import annotations

from dataclasses import replace

from reference.master import codec
from reference.master.cell import JobInfo, MachineInfo
from reference.master.changes import Change, ChangeLog
from reference.master.sigma.eventlog import CellEvents, events_page
from spec.model import Machine, Resources
from tests.unit.master_cells import SPEC, placed_cell

M1 = Machine("m1", Resources.of(cpu=4000, ram=2**30))


def machine(up: bool) -> bytes:
    return codec.encode_machine(replace(M1, up=up), MachineInfo("http://127.0.0.1:1", reason="" if up else "no answer for 30s"))


def a_log() -> ChangeLog:
    log = ChangeLog()
    job = codec.encode_job(SPEC.to_spec_job(), JobInfo(SPEC, submitted_at=1000.0))
    log.record(Change(5, "job", "alice/web", job, None))
    log.record(Change(6, "machine", "m1", machine(True), machine(True)))  # a report: no event
    log.record(Change(7, "machine", "m1", machine(False), machine(True)))
    log.record(Change(8, "machine", "m1", machine(True), machine(False)))
    log.record(Change(9, "job", "alice/web", None, job))
    log.record(Change(10, "machine", "m2", None, machine(True)))
    return log


def test_the_change_log_gives_job_and_machine_events_in_order_read_once() -> None:
    log = a_log()
    events = CellEvents(log, clock=lambda: 2000.0)
    assert events.scan()
    seen = [(r["revision"], r["subject"], r["kind"], r["at"], r["seen"], r["detail"]) for r in events.rows]
    assert seen == [
        (5, "job alice/web", "submitted", 1000.0, False, ""),
        (7, "machine m1", "down", 2000.0, True, "no answer for 30s"),
        (8, "machine m1", "up", 2000.0, True, ""),
        (9, "job alice/web", "removed", 2000.0, True, ""),
        (10, "machine m2", "removed", 2000.0, True, ""),
    ]
    log.record(Change(11, "machine", "m1", machine(False), machine(True)))
    events.scan()
    assert [(r["revision"], r["kind"]) for r in events.rows][-2:] == [(10, "removed"), (11, "down")], "each change read once"


def test_the_events_page_lists_them_beside_the_task_events_and_filters_by_kind() -> None:
    cell, log = placed_cell(events=((1, 1500.0, "started", "pid 1 on m1"),)), a_log()
    html = events_page(cell, "m0", {}, "admin", log)
    for text in ("job alice/web", "submitted", "machine m1", "no answer for 30s", "machine m2", "alice/web/0#0", "started"):
        assert text in html, text
    down = events_page(cell, "m0", {"kind": "down"}, "admin", log)
    assert "machine m1" in down and "alice/web/0#0" not in down and "submitted" not in down.split("<tbody>", 1)[-1]
