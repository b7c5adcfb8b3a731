"""Sigma's machine pages: every machine (searched, filtered, sorted, paged, with reserved and used bars) and one machine with its tasks and its usage over the last hour."""

from __future__ import annotations

import time
from typing import Any

from reference.master import views
from reference.master.cell import Cell
from reference.master.sigma.history import UsageHistory
from reference.master.sigma.html import (
    bar,
    e,
    filter_form,
    key_values,
    page,
    pager,
    sort_headers,
    state,
    table,
)
from reference.master.sigma.jobs import usage_charts
from reference.master.sigma.listing import Query, select
from spec.taskid import parse_task_id


def machine_rows(cell: Cell) -> list[dict[str, Any]]:
    rows = []
    for name in cell.state.machines:
        m = views.machine_view(cell, name)
        usage = m.get("usage") or {}
        capacity, reserved = m["capacity"], m["reserved"]
        rows.append({
            "machine": name, "state": m["state"], "domain": m.get("failure_domain") or "",
            "attrs": " ".join(f"{k}={v}" for k, v in sorted(m["attrs"].items())), "reason": m.get("reason") or "",
            "cpu_reserved": _share(reserved.get("cpu", 0), capacity.get("cpu", 0)),
            "cpu_used": _share(usage.get("cpu_milli", 0), capacity.get("cpu", 0)),
            "ram_reserved": _share(reserved.get("ram", 0), capacity.get("ram", 0)),
            "ram_used": _share(usage.get("ram_bytes", 0), capacity.get("ram", 0)),
            "tasks": len(m["tasks"]), "view": m,
        })  # fmt: skip
    return rows


def _share(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def machines_page(cell: Cell, replica_name: str, params: dict[str, str], who: str) -> str:
    rows = machine_rows(cell)
    query = Query(params.get("q", ""), (("state", params.get("state", "")), ("domain", params.get("domain", ""))),
                  params.get("sort", ""), int(params.get("page") or 1))  # fmt: skip
    columns = [("machine", "machine"), ("state", "state"), ("domain", "domain"), ("cpu", "cpu_used"),
               ("cpu reserved", "cpu_reserved"), ("ram", "ram_used"), ("ram reserved", "ram_reserved"),
               ("tasks", "tasks"), ("attributes", "attrs")]  # fmt: skip
    shown = select(rows, query, ("machine", "attrs", "domain", "reason"), [c for _, c in columns], "machine")
    body_rows, classes = [], []
    for r in shown.rows:
        m = r["view"]
        usage = m.get("usage") or {}
        cpu = bar("cpu", m["reserved"].get("cpu", 0), usage.get("cpu_milli", 0), m["capacity"].get("cpu", 0))
        ram = bar("ram", m["reserved"].get("ram", 0), usage.get("ram_bytes", 0), m["capacity"].get("ram", 0))
        body_rows.append([
            f'<a href="/ui/machines/{e(r["machine"])}">{e(r["machine"])}</a>', state(r["state"]), e(r["domain"] or "-"),
            cpu, f'{r["cpu_reserved"]:.0%}', ram, f'{r["ram_reserved"]:.0%}', e(r["tasks"]), e(r["attrs"] or "-"),
        ])  # fmt: skip
        classes.append("down" if r["state"] == "down" else "")
    domains = sorted({r["domain"] for r in rows if r["domain"]})
    choices = [("state", "state", ["up", "down"]), ("domain", "domain", domains)]
    body = (
        '<p><a href="/ui">cell</a> / machines</p><h2>Machines</h2>'
        + filter_form("/ui/machines", params, "search name, attributes", choices)
        + '<p class="legend">bars: <i style="background:#8fb3ea"></i>reserved <i style="background:#1d4f9c"></i>used, '
        "out of capacity; sorting by cpu or ram sorts by the share used</p>"
        + pager("/ui/machines", params, shown, "machines")
        + table([c for c, _ in columns], body_rows, classes, headers=sort_headers("/ui/machines", params, shown, columns))
    )
    return page("machines", body, cell.revision, replica_name, who)


def machine_page(cell: Cell, name: str, replica_name: str, who: str, history: UsageHistory) -> str | None:
    if name not in cell.state.machines:
        return None
    m = views.machine_view(cell, name)
    usage = m.get("usage") or {}
    pairs = [
        ("machine", e(name)),
        ("state", state(m["state"]) + (f' <span class="bad">{e(m["reason"])}</span>' if m.get("reason") else "")),
        ("address", e(m["address"] or "-")),
        ("failure domain", e(m.get("failure_domain") or "-")),
        ("attributes", e(" ".join(f"{k}={v}" for k, v in sorted(m["attrs"].items())) or "-")),
        ("isolation", e(m.get("isolation") or "-")),
        ("cpu", bar("cpu", m["reserved"].get("cpu", 0), usage.get("cpu_milli", 0), m["capacity"].get("cpu", 0))),
        ("ram", bar("ram", m["reserved"].get("ram", 0), usage.get("ram_bytes", 0), m["capacity"].get("ram", 0))),
    ]
    rows = []
    for task_id in m["tasks"]:
        job, index, _, _ = parse_task_id(task_id)
        rows.append([f'<a href="/ui/jobs/{e(job)}/tasks/{e(index)}">{e(task_id)}</a>', f'<a href="/ui/jobs/{e(job)}">{e(job)}</a>'])
    charts = usage_charts(history, f"machine:{name}", m["capacity"].get("cpu", 0), m["capacity"].get("ram", 0), time.time(),
                          "capacity")  # fmt: skip
    body = (
        f'<p><a href="/ui">cell</a> / <a href="/ui/machines">machines</a> / {e(name)}</p>'
        f"<h2>Machine {e(name)}</h2>{key_values(pairs)}<h2>Usage, last hour</h2>{charts}"
        '<p class="legend">scaled to the peak; dashed, when usage comes near it: the machine\'s capacity</p>'
        f"<h2>Tasks running here ({len(rows)})</h2>" + table(["task", "job"], rows)
    )
    return page(f"machine {name}", body, cell.revision, replica_name, who)
