"""Sigma's pages of jobs and tasks: the cell with its jobs (searched, filtered, sorted, paged), a job (its tasks, usage and, for its owner, kill and count), and a task (its events and followed logs)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from reference.cli.plain import ago
from reference.master import events as task_events
from reference.master import views
from reference.master.access import Identity
from reference.master.cell import Cell
from reference.master.logs import find_task
from reference.master.sigma.charts import chart
from reference.master.sigma.history import WINDOW_S, UsageHistory
from reference.master.sigma.html import (
    STATE_CLASS,
    bar,
    e,
    filter_form,
    key_values,
    page,
    pager,
    sort_headers,
    state,
    table,
)  # fmt: skip
from reference.master.sigma.listing import Query, select
from reference.resources import format_quantity, format_resources
from spec.model import Band, TaskState, band_of, is_stale

JOB_STATUSES = ("running", "starting", "pending", "crash loop", "done")
STATUS_CLASS = {"running": "ok", "starting": "warn", "pending": "warn", "crash loop": "bad", "done": "done"}
LOG_TAIL = 200


def outcome(v: Mapping[str, Any]) -> tuple[str, str]:
    """(label, css class) of a task view as Sigma paints it: by how it is doing, not by its
    spec state alone. Red only for failure: a crash loop (BACKOFF) or a death by failure or
    loss; a task that finished (exit 0) or was killed (by a user, or by scaling down) is done,
    in grey; a crash loop is never green, nor a task placed but not yet started."""
    if v.get("crash_loop"):
        return str(v.get("status") or "BACKOFF"), "bad"
    if v["state"] == "DEAD":
        cause = v.get("cause")
        if cause in ("finished", "killed"):
            return f"DEAD ({cause})", "done"
        return f"DEAD ({cause})" if cause else "DEAD", "bad"
    if v["state"] == "RUNNING":
        if not v.get("confirmed"):
            return "RUNNING", "warn"
        return "RUNNING", "warn" if v.get("healthy") is False else "ok"
    return str(v["state"]), STATE_CLASS.get(str(v["state"]), "")


def painted(v: Mapping[str, Any]) -> str:
    label, css = outcome(v)
    return f'<span class="{css}">{e(label)}</span>'


def job_status(counts: Mapping[str, int], loops: int) -> str:
    """One word for a job's row: a crash loop first, then tasks waiting, starting, running, else done."""
    if loops:
        return "crash loop"
    if counts["PENDING"]:
        return "pending"
    if counts["RUNNING"] > counts["running_confirmed"]:
        return "starting"
    return "running" if counts["RUNNING"] else "done"


def job_rows(cell: Cell) -> list[dict[str, Any]]:
    """A row per job the cell has, with its task counts by the newest incarnation of each index."""
    rows = []
    for job in cell.state.jobs.values():
        c = views.task_counts(cell, job.key)
        loops = len(views.crash_loops(cell, job.key)) if c["RUNNING"] or c["DEAD"] else 0
        rows.append({
            "job": job.key, "user": job.user, "name": job.name, "band": band_of(job.priority).value,
            "priority": job.priority, "wanted": job.task_count, "running": c["RUNNING"],
            "started": c["running_confirmed"], "pending": c["PENDING"], "crash_loop": loops, "dead": c["DEAD"],
            "status": job_status(c, loops),
        })  # fmt: skip
    return rows


def totals(cell: Cell, rows: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """The tasks of the jobs listed (the sum of their rows), and those of jobs already removed
    (a killed job's dead tasks, kept by the cell until compaction) apart, so the figures add up."""
    listed = {k: sum(r[k] for r in rows) for k in ("running", "started", "pending", "dead", "crash_loop")}
    every = views.task_counts(cell)
    removed = {
        "running": every["RUNNING"] - listed["running"], "pending": every["PENDING"] - listed["pending"],
        "dead": every["DEAD"] - listed["dead"],
    }  # fmt: skip
    return listed, removed


def cell_page(cell: Cell, overview: dict[str, Any], replica_name: str, params: dict[str, str], who: str) -> str:
    rows = job_rows(cell)
    listed, removed = totals(cell, rows)
    query = Query(params.get("q", ""), tuple((k, params.get(k, "")) for k in ("user", "band", "status")),
                  params.get("sort", ""), int(params.get("page") or 1))  # fmt: skip
    columns = [("user", "user"), ("band", "band"), ("job", "job"), ("priority", "priority"), ("wanted", "wanted"),
               ("ready", "started"), ("running", "running"), ("pending", "pending"), ("crash loop", "crash_loop"),
               ("dead", "dead"), ("status", "status")]  # fmt: skip
    shown = select(rows, query, ("job",), [c for _, c in columns], "job")
    body_rows = []
    for r in shown.rows:
        body_rows.append([
            e(r["user"]), e(r["band"]), f'<a href="/ui/jobs/{e(r["job"])}">{e(r["name"])}</a>', e(r["priority"]),
            e(r["wanted"]), f'{r["started"]}/{r["wanted"]}',
            f'{state("RUNNING")} {r["running"]}' if r["running"] else "0",
            f'{state("PENDING")} {r["pending"]}' if r["pending"] else "0",
            f'<span class="bad">BACKOFF</span> {r["crash_loop"]}' if r["crash_loop"] else "0",
            f'<span class="done">DEAD</span> {r["dead"]}' if r["dead"] else "0",
            f'<span class="{STATUS_CLASS[r["status"]]}">{e(r["status"])}</span>',
        ])  # fmt: skip
    machines = list(cell.state.machines.values())
    up = sum(1 for m in machines if m.up)
    capacity = {k: sum(m.capacity.as_dict().get(k, 0) for m in machines if m.up) for k in ("cpu", "ram")}
    reserved = {k: sum(cell.state.machine_reserved(m.name).as_dict().get(k, 0) for m in machines if m.up)
                for k in ("cpu", "ram")}  # fmt: skip
    used = {k: sum(dict(i.usage).get(u, 0) for n, i in cell.machines.items() if n in cell.state.machines)
            for k, u in (("cpu", "cpu_milli"), ("ram", "ram_bytes"))}  # fmt: skip
    tasks = (f'{state("RUNNING")} {listed["running"]} ({listed["started"]} started), {state("PENDING")} '
             f'{listed["pending"]}, <span class="done">DEAD</span> {listed["dead"]}')  # fmt: skip
    if listed["crash_loop"]:
        tasks += f'; in a crash loop (<span class="bad">BACKOFF</span>): {listed["crash_loop"]}'

    pairs = [
        ("cell", e(overview["cell"])),
        ("leader", f'<span class="ok">{e(overview["leader"])}</span>' if overview["leader"] else '<span class="bad">none</span>'),
        ("etcd revision", e(cell.revision)),
        ("machines", f'<a href="/ui/machines">{up} up</a>'
                     + (f', <a class="bad" href="/ui/machines?state=down">{len(machines) - up} down</a>' if len(machines) > up else "")),
        ("cpu", bar("cpu", reserved["cpu"], used["cpu"], capacity["cpu"])),
        ("ram", bar("ram", reserved["ram"], used["ram"], capacity["ram"])),
        ("jobs", e(len(rows))),
        ("tasks", tasks),
    ]  # fmt: skip
    if any(removed.values()):
        pairs.append(("tasks of removed jobs", f'<span class="done">DEAD</span> {removed["dead"]}'
                      + "".join(f", {k} {v}" for k, v in removed.items() if k != "dead" and v)
                      + ' <span class="note">(not in the rows below: their jobs were killed)</span>'))
    replicas = table(
        ["replica", "role", "url", "live"],
        [[e(r["name"]), f'<span class="ok">{e(r["role"])}</span>' if r["role"] == "leader" else e(r["role"]),
          e(r["url"]), "yes" if r.get("live") else '<span class="bad">no</span>'] for r in overview["replicas"]],
    )  # fmt: skip
    users = sorted({r["user"] for r in rows})
    choices = [("user", "user", users), ("band", "band", [b.value for b in Band]), ("status", "status", JOB_STATUSES)]
    body = (
        f"<h2>Cell</h2>{key_values(pairs)}"
        '<p class="legend">bars: <i style="background:#8fb3ea"></i>reserved <i style="background:#1d4f9c"></i>used, '
        "out of the capacity of the machines up</p>"
        f"<h2>Jobs</h2>{filter_form('/ui', params, 'search jobs (user/name)', choices)}"
        + pager("/ui", params, shown, "jobs")
        + table([c for c, _ in columns], body_rows, headers=sort_headers("/ui", params, shown, columns))
        + f"<h2>Master replicas</h2>{replicas}"
    )
    return page(f"cell {overview['cell']}", body, cell.revision, replica_name, who)


def actions(key: str, wanted: int) -> str:
    """Kill and task count for the job's owner or the admin, sent by the page with the token."""
    url = f"/v1/jobs/{quote(key)}"
    return (
        '<div class="actions">'
        f'<form data-method="PATCH" data-url="{e(url)}" data-done="task count changed" id="count-form">'
        f'<label>tasks <input name="task_count" type="number" min="0" value="{wanted}" style="width:6em"></label>'
        ' <button type="submit">set task count</button></form>'
        f'<button class="danger" id="kill-job" data-method="DELETE" data-url="{e(url)}" '
        'data-confirm="click again to kill every task" data-done="job killed">kill job</button>'
        '<span id="action-result"></span></div>'
    )


def usage_charts(history: UsageHistory, series: str, cpu_limit: float, ram_limit: float, now: float,
                 limit_name: str) -> str:  # fmt: skip
    """The series' cpu and ram over the last hour, each against its limit (dashed)."""
    points = history.points(series, now - WINDOW_S)
    return '<div class="charts">' + chart(
        "cpu used", points, lambda p: p.cpu_milli, lambda v: format_quantity("cpu", int(v)), now, WINDOW_S, cpu_limit,
        limit_name,
    ) + chart(
        "ram used", points, lambda p: p.ram_bytes, lambda v: format_quantity("ram", int(v)), now, WINDOW_S, ram_limit,
        limit_name,
    ) + "</div>"  # fmt: skip


def job_page(cell: Cell, key: str, cell_name: str, replica_name: str, params: dict[str, str],
             who: Identity | None, history: UsageHistory, extra: str = "") -> str | None:  # fmt: skip
    job = cell.state.jobs.get(key)
    tasks = views.job_tasks(cell, key)
    if job is None and not tasks:
        return None
    task_rows = []
    for t in views.live_indices(cell, key).values():
        v = views.task_view(cell, t, cell_name)
        label, css = outcome(v)
        # Which version the task runs: an older one until the rolling update replaces it.
        version = "-" if job is None or t.state is TaskState.DEAD else "older" if is_stale(t, job) else "current"
        task_rows.append({"index": v["index"], "view": v, "state": label, "machine": v["machine"] or "",
                          "restarts": v["restarts"], "outcome": css or "none", "version": version})  # fmt: skip
    query = Query(params.get("q", ""), (("outcome", params.get("outcome", "")),), params.get("sort", ""),
                  int(params.get("page") or 1))  # fmt: skip
    columns = [("index", "index"), ("incarnation", ""), ("state", "state"), ("version", "version"), ("started", ""),
               ("machine", "machine"),
               ("restarts", "restarts"), ("cause / crash loop", ""), ("last event", ""), ("pending reason", "")]  # fmt: skip
    path = f"/ui/jobs/{key}"
    shown = select(task_rows, query, ("index", "state", "machine"), [c for _, c in columns if c], "index")
    rows, classes = [], []
    for r in shown.rows:
        v = r["view"]
        last = (v["events"] or [{}])[-1]
        rows.append([
            f'<a href="/ui/jobs/{e(key)}/tasks/{v["index"]}">{v["index"]}</a>', e(v["incarnation"]),
            painted(v), f'<span class="warn">{r["version"]}</span>' if r["version"] == "older" else e(r["version"]),
            "yes" if v["confirmed"] else "-", e(v["machine"] or "-"),
            e(v["restarts"]), e((v["crash_loop"] or {}).get("text") or v["cause"] or ""),
            f'{e(last.get("kind"))}: {e(last.get("detail"))}' if last.get("kind") else "-",
            f'<span class="pending">{e(v["pending_reason"])}</span>' if v["pending_reason"] else "",
        ])  # fmt: skip
        classes.append("down" if r["outcome"] == "bad" else "")
    pairs: list[tuple[str, str]] = [("job", e(key))]
    controls = charts = ""
    if job is not None:
        view = views.job_view(cell, job)
        pairs += [
            ("priority", f"{job.priority} ({band_of(job.priority).value})"),
            ("tasks wanted", e(job.task_count)),
            ("request", e(format_resources(view.get("request")))),
            ("command", f"<code>{e(' '.join(view.get('command', [])))}</code>"),
            ("restart policy", e(view.get("restart_policy"))),
            ("version", e(job.version)),
        ]
        for entry in views.pending_reasons(cell, key):
            reason = entry["reason"] or "no reason yet: the scheduler has not looked at them"
            pairs.append(("pending", f'{entry["tasks"]} task(s): <span class="pending">{e(reason)}</span>'))
        for loop in views.crash_loops(cell, key):
            pairs.append(("crash loop", f'task {loop["index"]}: <span class="bad">{e(loop["text"])}</span>'))
        if who is not None and (who.admin or who.name == job.user):
            controls = actions(key, job.task_count)
        request = job.request.as_dict()
        running = views.task_counts(cell, key)["RUNNING"]
        charts = "<h2>Usage, last hour</h2>" + usage_charts(
            history, f"job:{key}", request.get("cpu", 0) * running, request.get("ram", 0) * running, time.time(), "requested"
        ) + '<p class="legend">scaled to the peak; dashed, when usage comes near it: what its running tasks requested</p>'
    else:
        pairs.append(("state", '<span class="done">killed</span>'))
    outcomes = ["ok", "warn", "bad", "done"]
    body = (
        f'<p><a href="/ui">cell</a> / {e(key)}</p><h2>Job {e(key)}</h2>{key_values(pairs)}{controls}{extra}{charts}'
        f"<h2>Tasks</h2>{filter_form(path, params, 'search index, state, machine', [('outcome', 'outcome', outcomes)])}"
        + pager(path, params, shown, "tasks")
        + table([c for c, _ in columns], rows, classes, headers=sort_headers(path, params, shown, columns))
    )
    return page(f"job {key}", body, cell.revision, replica_name, who.name if who else "")


def task_page(cell: Cell, key: str, index: int, cell_name: str, replica_name: str, who: str) -> str | None:
    found = find_task(cell, key, index, None)
    if not hasattr(found, "id"):
        return None
    v = views.task_view(cell, found, cell_name)  # type: ignore[arg-type]
    pairs = [
        ("task", e(f"{key}/{index}#{v['incarnation']}")),
        ("state", painted(v)),
        ("started", "yes" if v["confirmed"] else "-"),
        ("machine", f'<a href="/ui/machines/{e(v["machine"])}">{e(v["machine"])}</a>' if v["machine"]
         else e(f"- (last: {v['last_machine']})" if v["last_machine"] else "-")),
        ("pid", e(v["pid"] or "-")),
        ("bns", e(v["bns"])),
        ("restarts", e(v["restarts"])),
        ("cause", e(v["cause"] or "-")),
        ("usage", e(format_resources(v["usage"]))),
    ]  # fmt: skip
    if v["pending_reason"]:
        pairs.insert(2, ("pending", f'<span class="pending">{e(v["pending_reason"])}</span>'))
    if v["crash_loop"]:
        pairs.insert(2, ("crash loop", f'<span class="bad">{e(v["crash_loop"]["text"])}</span>'))
    if v["last_exit"]:
        pairs.append(("last exit", e(v["last_exit"])))
    event_rows = []
    for ev in reversed(v["events"]):
        kind = ev["kind"]
        css = "bad" if kind in task_events.WARNINGS else "ok" if kind in ("started", "healthy", "finished") else ""
        when = time.strftime("%H:%M:%S", time.localtime(ev["at"]))
        event_rows.append([e(f"{when} ({ago(ev['at'])})"), f'<span class="{css}">{e(kind)}</span>', e(ev["detail"])])
    task_id = f"{key}/{index}#{v['incarnation']}"
    logs = f'<section id="logs" data-task="{e(task_id)}">'
    for stream in ("stdout", "stderr"):
        url = f"/v1/jobs/{quote(key)}/tasks/{index}/logs?stream={stream}&tail={LOG_TAIL}&follow=true&max_s=3600"
        logs += (f'<h2>{stream} (followed, from its last {LOG_TAIL} lines) <span class="note" id="log-{stream}-state">'
                 f'</span></h2><pre id="log-{stream}" data-url="{e(url)}"> </pre>')  # fmt: skip
    logs += "</section>"
    body = (
        f'<p><a href="/ui">cell</a> / <a href="/ui/jobs/{e(key)}">{e(key)}</a> / task {index}</p>'
        f"<h2>Task {index} of {e(key)}</h2>{key_values(pairs)}<h2>Events (newest first)</h2>"
        + table(["when", "event", "detail"], event_rows)
        + logs
    )
    return page(f"task {key}/{index}", body, cell.revision, replica_name, who)
