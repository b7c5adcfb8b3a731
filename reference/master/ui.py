"""Sigma: the read-only dashboard at /ui, server-rendered from the replica's watch cache with a little JavaScript for live updates.

Three pages: the cell (leader, replicas, etcd revision, machines as utilization bars, jobs by
user and band), a job (its tasks with states and pending reasons), and a task (its fields,
its events and the tail of its logs). Each page opens the cell's event stream from the
revision it was rendered at (/v1/events) and, when something changes, fetches itself again
and swaps its content in: no front-end build, one inline script.
"""

from __future__ import annotations

import time
from html import escape
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from reference.cli.plain import ago
from reference.master import events as task_events
from reference.master import views
from reference.master.cell import Cell
from reference.master.logs import LogProxy, find_task
from reference.resources import format_quantity, format_resources
from spec.model import band_of

STATE_CLASS = {"RUNNING": "ok", "PENDING": "warn", "DEAD": "bad", "BACKOFF": "bad", "up": "ok", "down": "bad"}
LOG_TAIL = 40

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f4f6f9}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:baseline}
header a{color:#fff;text-decoration:none;font-weight:600;font-size:18px}
header span{color:#aeb7c7}
main{padding:16px 20px;max-width:1200px}
h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0002}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #e3e7ee;vertical-align:top}
th{background:#eef1f6;font-weight:600}
a{color:#1f5fbf}
.ok{color:#17803d;font-weight:600}.warn{color:#a86400;font-weight:600}.bad{color:#c3221f;font-weight:600}
.done{color:#5b6475;font-weight:600}
tr.down td{background:#fde8e8}
.kv td:first-child{font-weight:600;width:160px}
.bar{position:relative;height:14px;width:220px;background:#e3e7ee;border-radius:3px;overflow:hidden}
.bar .resv{position:absolute;top:0;left:0;height:100%;background:#8fb3ea}
.bar .used{position:absolute;top:4px;left:0;height:6px;background:#1d4f9c}
.legend{color:#5b6475;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px;vertical-align:middle}
pre{background:#11151c;color:#d8dee9;padding:10px;overflow:auto;max-height:360px;font-size:12px}
.pending{color:#a86400}
#live{font-size:12px;color:#aeb7c7}
"""

SCRIPT = """
(function(){
  var timer = null, live = document.getElementById('live');
  // The token the user gave once: from the page's URL fragment (#token=...), else asked for;
  // kept in this tab's sessionStorage and sent with every request the page makes.
  function token(){
    var m = location.hash.match(/token=([^&]+)/);
    if (m) {
      sessionStorage.setItem('minborg-token', decodeURIComponent(m[1]));
      history.replaceState(null, '', location.pathname + location.search);
    }
    var t = sessionStorage.getItem('minborg-token');
    if (!t) {
      t = window.prompt('Token for this cell (`minborg user add NAME` prints one; the admin token is in the state dir):');
      if (t) sessionStorage.setItem('minborg-token', t.trim());
    }
    return sessionStorage.getItem('minborg-token') || '';
  }
  function headers(extra){
    var h = {'Authorization': 'Bearer ' + token()};
    for (var k in extra) h[k] = extra[k];
    return h;
  }
  function refresh(){
    timer = null;
    return fetch(location.href, {headers: headers({'X-Minborg-Fragment': '1'})}).then(function(r){
      if (r.status === 401) {
        sessionStorage.removeItem('minborg-token');
        live.textContent = 'the token was refused: reload the page to give another';
        throw new Error('401');
      }
      return r.text();
    }).then(function(html){
      var doc = new DOMParser().parseFromString(html, 'text/html');
      var main = doc.querySelector('main');
      document.querySelector('main').innerHTML = main ? main.innerHTML : doc.body.innerHTML;
      if (doc.body.dataset.revision) document.body.dataset.revision = doc.body.dataset.revision;
      live.textContent = 'live, revision ' + document.body.dataset.revision;
    });
  }
  // Server-sent events read through fetch: EventSource cannot send an Authorization header.
  function connect(){
    fetch('/v1/events?timeout_s=300&since=' + document.body.dataset.revision, {headers: headers({})})
      .then(function(r){
        if (!r.ok) throw new Error('HTTP ' + r.status);
        live.textContent = 'live, revision ' + document.body.dataset.revision;
        var reader = r.body.getReader(), decoder = new TextDecoder(), buffer = '';
        function pump(){
          return reader.read().then(function(chunk){
            if (chunk.done) { connect(); return; }
            buffer += decoder.decode(chunk.value, {stream: true});
            var messages = buffer.split('\\n\\n');
            buffer = messages.pop();
            messages.forEach(function(m){
              if (/^event: (task|job|machine)$/m.test(m) && !timer) timer = setTimeout(refresh, 300);
            });
            return pump();
          });
        }
        return pump();
      })
      .catch(function(){ live.textContent = 'reconnecting...'; setTimeout(connect, 2000); });
  }
  var first = document.body.dataset.shell ? refresh() : Promise.resolve();
  first.then(connect, function(){});
  setInterval(refresh, 10000);  // machines' usage changes without events
})();
"""


def e(value: Any) -> str:
    return escape("" if value is None else str(value))


def state(value: Any) -> str:
    return f'<span class="{STATE_CLASS.get(str(value), "")}">{e(value)}</span>'


def outcome(v: dict[str, Any]) -> tuple[str, str]:
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


def painted(v: dict[str, Any]) -> str:
    label, css = outcome(v)
    return f'<span class="{css}">{e(label)}</span>'


def page(title: str, body: str, cell: Cell, replica_name: str) -> str:
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{e(title)} - Sigma</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{STYLE}</style></head>
<body data-revision="{cell.revision}">
<header><a href="/ui">Sigma</a><span>minborg cell, served by replica {e(replica_name)}</span>
<span id="live">revision {cell.revision}</span></header>
<main>{body}</main>
<script>{SCRIPT}</script>
</body></html>"""


def shell_page() -> str:
    """A page asked for without a token: no data, only the script that asks again with one."""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Sigma</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>{STYLE}</style></head>
<body data-revision="0" data-shell="1">
<header><a href="/ui">Sigma</a><span>minborg cell</span><span id="live">loading...</span></header>
<main><p>Loading the cell with your token...</p></main>
<script>{SCRIPT}</script>
</body></html>"""


def table(columns: list[str], rows: list[list[str]], row_classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = "".join(
        f'<tr class="{(row_classes or [""] * len(rows))[i]}">' + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
        for i, row in enumerate(rows)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body or '<tr><td>none</td></tr>'}</tbody></table>"


def key_values(pairs: list[tuple[str, str]]) -> str:
    return '<table class="kv">' + "".join(f"<tr><td>{e(k)}</td><td>{v}</td></tr>" for k, v in pairs) + "</table>"


def bar(resource: str, reserved: int, used: int, capacity: int) -> str:
    """Reserved (light) and used (dark) out of capacity, with the figures beside it."""
    if capacity <= 0:
        return "-"
    r, u = min(100.0, 100 * reserved / capacity), min(100.0, 100 * used / capacity)
    label = f"{format_quantity(resource, reserved)} reserved, {format_quantity(resource, used)} used of {format_quantity(resource, capacity)}"
    return (
        f'<div class="bar" title="{e(label)}"><div class="resv" style="width:{r:.1f}%"></div>'
        f'<div class="used" style="width:{u:.1f}%"></div></div><span class="legend">{e(label)}</span>'
    )


# --- the pages -------------------------------------------------------------------------------


def cell_page(cell: Cell, overview: dict[str, Any], replica_name: str) -> str:
    replicas = table(
        ["replica", "role", "url", "live"],
        [[e(r["name"]), f'<span class="ok">{e(r["role"])}</span>' if r["role"] == "leader" else e(r["role"]),
          e(r["url"]), "yes" if r.get("live") else '<span class="bad">no</span>']
         for r in overview["replicas"]],
    )  # fmt: skip
    machine_rows, machine_classes = [], []
    for name in sorted(cell.state.machines):
        m = views.machine_view(cell, name)
        usage = m.get("usage") or {}
        machine_rows.append(
            [
                e(name),
                state(m["state"]),
                e(m.get("failure_domain") or "-"),
                bar("cpu", m["reserved"].get("cpu", 0), usage.get("cpu_milli", 0), m["capacity"].get("cpu", 0)),
                bar("ram", m["reserved"].get("ram", 0), usage.get("ram_bytes", 0), m["capacity"].get("ram", 0)),
                e(len(m["tasks"])),
            ]
        )
        machine_classes.append("down" if m["state"] == "down" else "")
    counts = views.task_counts(cell)
    jobs_by: dict[tuple[str, str], list[Any]] = {}
    for job in cell.state.jobs.values():
        jobs_by.setdefault((job.user, band_of(job.priority).value), []).append(job)
    job_rows = []
    for (user, band), jobs in sorted(jobs_by.items()):
        for job in sorted(jobs, key=lambda j: j.name):
            c = views.task_counts(cell, job.key)
            pending = c["PENDING"]
            loops = len(views.crash_loops(cell, job.key)) if c["RUNNING"] or c["DEAD"] else 0
            job_rows.append(
                [
                    e(user), e(band), f'<a href="/ui/jobs/{e(job.key)}">{e(job.name)}</a>', e(job.priority),
                    e(job.task_count),
                    # Green only for what runs: placed but not started, or crash-looping, is not.
                    f'<span class="{"ok" if c["running_confirmed"] and not loops else "warn"}">RUNNING</span> '
                    f'{c["RUNNING"]} ({c["running_confirmed"]} started)' if c["RUNNING"] else "0",
                    f'{state("PENDING")} {pending}' if pending else "0",
                    f'<span class="bad">BACKOFF</span> {loops}' if loops else "0",
                    f'<span class="done">DEAD</span> {c["DEAD"]}' if c["DEAD"] else "0",
                ]
            )  # fmt: skip
    up, down = overview["machines"]["up"], overview["machines"]["down"]
    summary = key_values(
        [
            ("cell", e(overview["cell"])),
            ("leader", f'<span class="ok">{e(overview["leader"])}</span>' if overview["leader"] else '<span class="bad">none</span>'),
            ("etcd revision", e(cell.revision)),
            ("machines", f"{up} up" + (f', <span class="bad">{down} down</span>' if down else "")),
            ("jobs", e(len(cell.state.jobs))),
            ("tasks", f'{state("RUNNING")} {counts["RUNNING"]} ({counts["running_confirmed"]} started), '
                      f'{state("PENDING")} {counts["PENDING"]}, {state("DEAD")} {counts["DEAD"]}'),
        ]
    )  # fmt: skip
    legend = '<p class="legend">bars: <i style="background:#8fb3ea"></i>reserved <i style="background:#1d4f9c"></i>used, out of capacity</p>'
    body = (
        f"<h2>Cell</h2>{summary}<h2>Master replicas</h2>{replicas}"
        f"<h2>Machines</h2>{legend}"
        + table(["machine", "state", "domain", "cpu", "ram", "tasks"], machine_rows, machine_classes)
        + "<h2>Jobs by user and band</h2>"
        + table(["user", "band", "job", "priority", "wanted", "running", "pending", "crash loop", "dead"], job_rows)
    )
    return page(f"cell {overview['cell']}", body, cell, replica_name)


def job_page(cell: Cell, key: str, cell_name: str, replica_name: str) -> str | None:
    job = cell.state.jobs.get(key)
    tasks = views.job_tasks(cell, key)
    if job is None and not tasks:
        return None
    rows, classes = [], []
    for t in sorted(views.live_indices(cell, key).values(), key=lambda t: t.id.index):
        v = views.task_view(cell, t, cell_name)
        last = (v["events"] or [{}])[-1]
        rows.append(
            [
                f'<a href="/ui/jobs/{e(key)}/tasks/{v["index"]}">{v["index"]}</a>', e(v["incarnation"]),
                painted(v), "yes" if v["confirmed"] else "-", e(v["machine"] or "-"),
                e(v["restarts"]), e((v["crash_loop"] or {}).get("text") or v["cause"] or ""),
                f'{e(last.get("kind"))}: {e(last.get("detail"))}' if last.get("kind") else "-",
                f'<span class="pending">{e(v["pending_reason"])}</span>' if v["pending_reason"] else "",
            ]
        )  # fmt: skip
        classes.append("down" if outcome(v)[1] == "bad" else "")
    pairs: list[tuple[str, str]] = [("job", e(key))]
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
    else:
        pairs.append(("state", '<span class="bad">killed</span>'))
    body = (
        f'<p><a href="/ui">cell</a> / {e(key)}</p><h2>Job {e(key)}</h2>{key_values(pairs)}<h2>Tasks</h2>'
        + table(
            ["index", "incarnation", "state", "started", "machine", "restarts", "cause / crash loop", "last event",
             "pending reason"],
            rows,
            classes,
        )
    )
    return page(f"job {key}", body, cell, replica_name)


def task_page(
    cell: Cell, key: str, index: int, cell_name: str, replica_name: str, logs: dict[str, str]
) -> str | None:
    found = find_task(cell, key, index, None)
    if not hasattr(found, "id"):
        return None
    v = views.task_view(cell, found, cell_name)  # type: ignore[arg-type]
    pairs = [
        ("task", e(f"{key}/{index}#{v['incarnation']}")),
        ("state", painted(v)),
        ("started", "yes" if v["confirmed"] else "-"),
        ("machine", e(v["machine"] or (f"- (last: {v['last_machine']})" if v["last_machine"] else "-"))),
        ("pid", e(v["pid"] or "-")),
        ("bns", e(v["bns"])),
        ("restarts", e(v["restarts"])),
        ("cause", e(v["cause"] or "-")),
        ("usage", e(format_resources(v["usage"]))),
    ]
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
    log_html = "".join(f"<h2>{e(stream)} (last {LOG_TAIL} lines)</h2><pre>{e(text) or ' '}</pre>" for stream, text in logs.items())
    body = (
        f'<p><a href="/ui">cell</a> / <a href="/ui/jobs/{e(key)}">{e(key)}</a> / task {index}</p>'
        f"<h2>Task {index} of {e(key)}</h2>{key_values(pairs)}<h2>Events (newest first)</h2>"
        + table(["when", "event", "detail"], event_rows)
        + log_html
    )
    return page(f"task {key}/{index}", body, cell, replica_name)


def install(app: FastAPI, replica: Any, proxy: LogProxy, overview: Any) -> None:
    """Add the /ui pages to a master's app; `overview()` is /v1/cell's body."""
    cell_name = replica.config.cell_name

    def missing(what: str) -> HTMLResponse:
        return HTMLResponse(f"<!doctype html><p>{e(what)}</p><p><a href='/ui'>back to the cell</a></p>", status_code=404)

    @app.get("/ui", response_class=HTMLResponse)
    async def ui_cell() -> Response:
        cell = replica.cache.cell()
        return HTMLResponse(cell_page(cell, overview(cell), replica.name))

    missing_page = {404: {"description": "no such job or task: a page that says so",
                          "content": {"text/html": {"schema": {"type": "string"}}}}}  # fmt: skip

    @app.get("/ui/jobs/{user}/{name}", response_class=HTMLResponse, responses=missing_page)
    async def ui_job(user: str, name: str) -> Response:
        html = job_page(replica.cache.cell(), f"{user}/{name}", cell_name, replica.name)
        return HTMLResponse(html) if html is not None else missing(f"no job {user}/{name}")

    @app.get("/ui/jobs/{user}/{name}/tasks/{index}", response_class=HTMLResponse, responses=missing_page)
    async def ui_task(user: str, name: str, index: int) -> Response:
        cell = replica.cache.cell()
        key = f"{user}/{name}"
        logs: dict[str, str] = {}
        task = views.latest_task(cell, key, index)
        if task is not None and cell.task_info(task.id).machine:
            for stream in ("stdout", "stderr"):
                answer = await proxy.fetch(cell, key, index, None, stream=stream, tail=LOG_TAIL, follow=False, max_s=5)
                logs[stream] = (
                    answer.body.decode(errors="replace")
                    if answer.status_code == 200
                    else f"(no logs: HTTP {answer.status_code} {answer.body.decode(errors='replace')[:300]})"
                )
        html = task_page(cell, key, index, cell_name, replica.name, logs)
        return HTMLResponse(html) if html is not None else missing(f"job {key} has no task {index}")
