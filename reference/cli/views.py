"""What the everyday commands print (a job, a task, the machines, the cell, a BNS name), built from the API's answers with the standard library alone: one text for the fast path (cli_fast.py) and the full command line.

Pairs read as `key  value` under an optional title, tables as cli_plain.render draws them;
colours and bold only when writing to a terminal (`color`), as in every listing.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence

from reference import execspec
from reference.cli.plain import STATE_COLOR, ago, dump, health_text, paint, render, started
from reference.resources import USAGE_NAMES, format_quantity, format_resources

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any

EVENT_COLOR = {
    "scheduled": "cyan", "started": "green", "healthy": "green", "finished": "green",
    "restarted": "yellow", "unhealthy": "red", "exited": "red", "signaled": "red", "oom": "red",
    "spawn_failed": "red", "backoff": "red", "evicted": "yellow", "lost": "red", "killed": "red",
}  # fmt: skip


def key_values(title: str | None, pairs: Sequence[tuple[str, str]], *, color: bool = False) -> str:
    """'  key    value' lines, the values aligned, under the title if any."""
    width = max((len(k) for k, _ in pairs), default=0)
    lines = [title] if title else []
    lines += [f"  {paint(k, 'bold', color)}{' ' * (width - len(k))}    {v}".rstrip() for k, v in pairs]
    return "\n".join(lines)


def state(text: Any, color: bool) -> str:
    value = "" if text is None else str(text)
    return paint(value, STATE_COLOR.get(value), color)


def state_counts(counts: Mapping[str, Any] | None, *, color: bool = False) -> str:
    """{'RUNNING': 3, 'PENDING': 1, 'running_confirmed': 2} -> 'PENDING 1, RUNNING 3 (2 started)'
    (in state-machine order; RUNNING is placed, "started" is what the borglets confirmed)."""
    counts = dict(counts or {})
    confirmed = counts.pop("running_confirmed", None)
    order = {"PENDING": 0, "RUNNING": 1, "DEAD": 2}
    items = [kv for kv in sorted(counts.items(), key=lambda kv: (order.get(kv[0], 9), kv[0])) if kv[1]]
    if not items:
        return "none"

    def one(name: str, n: Any) -> str:
        suffix = f" ({confirmed} started)" if name == "RUNNING" and confirmed is not None else ""
        return f"{state(name, color)} {n}{suffix}"

    return ", ".join(one(k, v) for k, v in items)


def pending_line(entry: Mapping[str, Any], *, color: bool = False) -> str:
    """{'reason': ..., 'tasks': 3, 'indices': [0, 1, 2]} -> '3 task(s) [0, 1, 2]: 0 of 4 machines fit: ...'."""
    indices = entry.get("indices") or []
    shown = ", ".join(str(i) for i in indices) + (", ..." if entry.get("tasks", 0) > len(indices) else "")
    reason = entry.get("reason")
    text = paint(reason, "yellow", color) if reason else paint("no reason yet: the scheduler has not looked at them", "dim", color)
    return f"{entry.get('tasks')} task(s) [{shown}]: {text}"


def when(timestamp: Any) -> str:
    if not isinstance(timestamp, int | float) or not timestamp:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(timestamp)) + f" ({ago(timestamp)})"


# --- one job, one task ---------------------------------------------------------------------------


def job_text(answer: Mapping[str, Any], key: str, *, color: bool = False) -> str:
    """`minborg job show`: the job, its tasks by state, and why pending ones wait."""
    spec = answer.get("job", {})
    pairs = [
        ("job", str(spec.get("key", key))),
        ("priority", str(spec.get("priority"))),
        ("tasks wanted", str(spec.get("task_count"))),
        ("tasks", state_counts(answer.get("tasks"), color=color)),
        ("request", format_resources(spec.get("request"))),
        ("command", " ".join(spec.get("command", []))),
        ("restart policy", str(spec.get("restart_policy"))),
        ("appclass", str(spec.get("appclass"))),
        ("version", str(spec.get("version"))),
        ("revision", str(answer.get("revision"))),
    ]
    if spec.get("constraints"):
        pairs.append(("constraints", json.dumps(spec["constraints"])))
    pairs += [("pending", pending_line(entry, color=color)) for entry in answer.get("pending") or []]
    pairs += [
        ("crash loop", paint(f"task {entry.get('index')}: {entry.get('text')}", "red", color))
        for entry in answer.get("crash_loops") or []
    ]
    roll = answer.get("rollout") or {}
    if roll.get("state") in ("rolling", "stopped"):  # master/rollout.py
        text = f"{roll['state']}: {roll.get('reason', '')}"
        pairs.append(("rollout", paint(text, "red", color) if roll["state"] == "stopped" else text))
    return key_values(None, pairs, color=color)


def never_started(task: Mapping[str, Any]) -> str | None:
    """Why a task incarnation has no logs, when no process of it ever started (no `started`
    event; its spawn failed, or it waits for a machine): what `task logs` says instead."""
    if any(e.get("kind") == "started" for e in task.get("events") or []):
        return None
    name = f"{task.get('job')}/{task.get('index')}#{task.get('incarnation')}"
    loop = task.get("crash_loop") or {}
    why = loop.get("text") or task.get("last_exit") or task.get("pending_reason")
    if not why:
        ends = [e for e in task.get("events") or [] if e.get("kind") in ("spawn_failed", "exited", "lost", "killed")]
        why = ends[-1].get("detail") if ends else f"it is {task.get('status') or task.get('state')}"
    return f"task {name} never started, so it has no logs: {why}"


def task_text(task: Mapping[str, Any], *, color: bool = False) -> str:
    """`minborg task show`: the task's fields, then its events."""
    address = f"{task['host']}:{task['port']}" if task.get("host") and task.get("port") else "-"
    health, tint = health_text(task.get("healthy"))
    machine = task.get("machine") or (f"- (last: {task['last_machine']})" if task.get("last_machine") else "-")
    pairs = [
        ("task", f"{task.get('job')}/{task.get('index')}#{task.get('incarnation')}"),
        ("state", state(task.get("status") or task.get("state"), color)),
        ("started", started(task)),
        ("machine", str(machine)),
        ("host:port", address),
        ("pid", str(task.get("pid") or "-")),
        ("bns", str(task.get("bns") or "-")),
        ("restarts", str(task.get("restarts", 0))),
        ("health", paint(health, tint, color)),
        ("cause", str(task.get("cause") or "-")),
        ("request", format_resources(task.get("request"))),
        ("usage", format_resources(task.get("usage"))),
        ("started at", when(task.get("started_at"))),
    ]
    if task.get("pending_reason"):
        pairs.insert(2, ("pending", paint(str(task["pending_reason"]), "yellow", color)))
    loop = task.get("crash_loop")
    if loop:
        pairs.insert(2, ("crash loop", paint(str(loop.get("text")), "red", color)))
    if task.get("last_exit"):
        pairs.append(("last exit", str(task["last_exit"])))
    rows = [
        [when(e.get("at")), paint(str(e.get("kind", "")), EVENT_COLOR.get(str(e.get("kind", ""))), color),
         str(e.get("detail", ""))]
        for e in task.get("events") or []
    ]  # fmt: skip
    return key_values(None, pairs, color=color) + "\n" + render(("when", "event", "detail"), rows, title="events")


# --- machines ----------------------------------------------------------------------------------


def share(name: str, used: Mapping[str, Any] | None, capacity: Mapping[str, Any] | None) -> str:
    """'300m/4000m': how much of one resource is taken out of the machine's capacity."""
    taken = {USAGE_NAMES.get(k, k): v for k, v in (used or {}).items()}
    return f"{format_quantity(name, taken.get(name, 0))}/{format_quantity(name, (capacity or {}).get(name, 0))}"


def machine_drain(m: Mapping[str, Any], color: bool) -> str:
    """',SchedulingDisabled (draining, 3 left)' after a drained machine's state, as kubectl marks a cordoned node."""
    if m.get("schedulable", True):
        return ""
    drain = m.get("drain") or {}
    left = drain.get("tasks_left")
    how = f" (draining, {left} left)" if left else " (drained)"
    return paint(",SchedulingDisabled" + how, "yellow", color)


def machine_rows(machines: list[dict[str, Any]], *, color: bool = False) -> tuple[list[str], list[list[str]]]:
    """`minborg machine list`: capacity, reserved, usage, state, isolation of each machine."""
    rows = []
    for m in sorted(machines, key=lambda m: m.get("name", "")):
        tasks = m.get("tasks")
        capacity, reserved, usage = m.get("capacity"), m.get("reserved"), m.get("usage") or {}
        # Requests minus reservations is what reclamation freed for non-prod work.
        requested = m.get("requested", reserved)
        others = {k: v for k, v in (capacity or {}).items() if k not in ("cpu", "ram")}
        # Hollow machines (scale tests only) run no processes: marked so none is taken for real.
        hollow = (m.get("attrs") or {}).get("hollow") == "true"
        rows.append([
            m.get("name", "") + (" " + paint("(hollow)", "dim", color) if hollow else ""),
            state(m.get("state"), color) + machine_drain(m, color),
            m.get("failure_domain") or "-",
            share("cpu", requested, capacity),
            share("cpu", reserved, capacity),
            share("ram", reserved, capacity),
            format_quantity("cpu", usage.get("cpu_milli", usage.get("cpu", "-"))),
            format_quantity("ram", usage.get("ram_bytes", usage.get("ram", "-"))),
            str(m.get("isolation") or "-"),
            str(len(tasks) if isinstance(tasks, list | dict) else tasks or 0),
            format_resources(others) if others else "",
        ])  # fmt: skip
    columns = ["machine", "state", "domain", "cpu req", "cpu resv", "ram resv", "cpu used", "ram used", "isolation", "tasks"]
    if any(row[-1] for row in rows):
        columns.append("other capacity")  # GPUs, disks, ports
    else:
        rows = [row[:-1] for row in rows]
    reasons = [str(m.get("reason") or "") for m in sorted(machines, key=lambda m: m.get("name", ""))]
    if any(reasons):  # why a machine is down, or why its borglet refuses the cell
        columns.append("reason")
        rows = [[*row, reason or "-"] for row, reason in zip(rows, reasons, strict=True)]
    return columns, rows


# --- the cell ----------------------------------------------------------------------------------


def cpu_cell(used_s: float | None, budget: float | None) -> str:
    """12.3 s of CPU, 'of 0.5 cores' when the process has a budget: '12.3s (0.5 cores)'."""
    used = "-" if used_s is None else f"{used_s:.1f}s"
    return used if budget is None else f"{used} ({budget:g} cores)"


def cell_text(
    local: Mapping[str, Any] | None, overview: Mapping[str, Any] | None, counts: Mapping[str, int] | None,
    *, color: bool = False,
) -> tuple[str, str | None]:  # fmt: skip
    """`minborg cell status`: (what goes to stdout, a warning for stderr or None)."""
    out: list[str] = []
    warning = None
    if overview is None:
        warning = f"{paint('the masters did not answer:', 'yellow', color)} {local and local.get('api_error')}"
    else:
        leader = overview.get("leader") or paint("none", "red", color)
        out.append(key_values(f"cell {overview.get('cell')}", [
            ("leader", str(leader)),
            ("etcd revision", str(overview.get("revision"))),
            *([("etcd", etcd_line(local))] if local and local.get("etcd_version") else []),
            ("machines", f"{counts['up']} up, {counts['down']} down" if counts else "-"),
            ("jobs", str(_count(overview.get("jobs")))),
            ("tasks", state_counts(overview.get("tasks"), color=color)),
            *([("sigma", f"{url.rstrip('/')}/ui")] if (url := overview.get("leader_url") or next(  # the dashboard
                (r.get("url") for r in overview.get("replicas") or []), None)) else []),
        ], color=color))  # fmt: skip
        alive = None
        if local is not None:
            alive = {p["name"]: p["alive"] for p in local["processes"] if p["role"] == "master"}
        rows = []
        for r in overview.get("replicas") or []:
            role = str(r.get("role") or "")
            row = [str(r.get("name", "")), paint(role, "green" if role == "leader" else None, color), str(r.get("url", ""))]
            if alive is not None:
                row.append("yes" if alive.get(r.get("name", ""), True) else paint("no", "red", color))
            rows.append(row)
        columns = ["replica", "role", "url"] + (["process"] if alive is not None else [])
        out.append(render(columns, rows, title="master replicas"))
    if local is not None:
        rows = [
            [p["role"], p["name"], str(p["pid"]),
             paint("running", "green", color) if p["alive"] else paint("stopped", "red", color),
             cpu_cell(p.get("cpu_s"), p.get("cpu_budget")), p.get("url") or "-"]
            for p in local["processes"]
        ]  # fmt: skip
        out.append(render(("role", "name", "pid", "process", "cpu", "url"), rows, title="processes"))
    return "\n".join(out), warning


def etcd_line(local: Mapping[str, Any]) -> str:
    """'3.6.6, TLS with client certificates' (or 'plain http' for a cell from before TLS)."""
    how = "TLS with client certificates" if local.get("etcd_tls") else "plain http"
    return f"{local.get('etcd_version')}, {how}"


def _count(value: Any) -> Any:
    return len(value) if isinstance(value, list | dict) else value


# --- one-line answers --------------------------------------------------------------------------


def resolved_line(answer: Mapping[str, Any], name: str) -> str:
    """`minborg bns resolve`: 'NAME -> host:port (task, healthy)'."""
    healthy = {True: "healthy", False: "unhealthy"}.get(answer.get("healthy"), "health unknown")
    return f"{answer.get('name', name)} -> {answer.get('host')}:{answer.get('port')} ({answer.get('task', '?')}, {healthy})"


def answer_lines(answer: Mapping[str, Any]) -> list[str]:
    """A dry run's, a what-if's or a Fauxmaster run's answer, a line per move, placement,
    pending task and preempted job, then the quota in words."""
    lines = [f"  {m['task']}: {m['from']} -> {m['to']}" for m in answer.get("moves", [])]
    for p in answer.get("placed", []):
        also = f" (preempts {', '.join(p['preempts'])})" if p.get("preempts") else ""
        lines.append(f"  {p['task']} -> {p['machine']}{also}")
    lines += [f"  {p['task']} stays PENDING: {p['reason']}" for p in answer.get("pending", [])]
    lines += [f"  preempts {v['tasks']} task(s) of {v['job']} at priority {v['priority']}" for v in answer.get("preempted", [])]
    if "quota" in answer:
        lines.append(f"  {quota_line(answer['quota'])}")
    return lines


def quota_line(q: Mapping[str, Any]) -> str:
    """The quota a dry run would use, in words: 'quota: demo's batch quota cpu=12 ram=128MiB;
    its other jobs there hold cpu=1 ram=64MiB; this job asks cpu=500m ram=32MiB'."""
    limit = format_resources(q["quota"]) if q.get("quota") is not None else "unlimited"
    return (
        f"quota: {q['user']}'s {q['band']} quota {limit}; its other jobs there hold "
        f"{format_resources(q.get('used_by_others')) if q.get('used_by_others') else 'nothing'}; "
        f"this job asks {format_resources(q.get('job'))}"
    )


def dry_run_title(key: str, answer: Mapping[str, Any]) -> str:
    return f"dry run of {key} (revision {answer.get('revision')}): nothing was written"


def would_not_fit(key: str, answer: Mapping[str, Any], task_count: int) -> str | None:
    """Why a dry run's job of `task_count` tasks would not fit (as `nomad job plan`, the exit
    code says so), or None."""
    waiting = len(answer.get("pending") or [])
    return f"{key} would not fit: {waiting} of {task_count} task(s) would stay PENDING" if waiting else None


def submitted_line(answer: Mapping[str, Any], *, color: bool = False) -> str:
    """`minborg job submit`: 'submitted demo/hello: 3 task(s) of cpu=100m ram=64MiB at priority 100 (revision 7)'."""
    spec = answer.get("job", {})
    key = spec.get("key") or f"{spec.get('user')}/{spec.get('name')}"
    return (
        f"submitted {paint(key, 'bold', color)}: {spec.get('task_count', '?')} task(s) of "
        f"{format_resources(spec.get('request'))} at priority {spec.get('priority', '?')} "
        f"(revision {answer.get('revision', '?')})"
    )


def updated_line(key: str, answer: Mapping[str, Any], *, color: bool = False) -> str:
    spec = answer.get("job", {})
    return (
        f"updated {paint(key, 'bold', color)} to version {spec.get('version', '?')}: "
        f"{spec.get('task_count', '?')} task(s) of {format_resources(spec.get('request'))} "
        f"(revision {answer.get('revision', '?')})"
    )


def killed_line(key: str, answer: Mapping[str, Any], *, color: bool = False) -> str:
    return f"killed {paint(key, 'bold', color)}: {answer.get('killed', '?')} task(s)"


def exec_answer(answer: dict[str, Any], as_json: bool, timeout_s: float) -> int:
    """Print an exec's answer (its stdout and stderr, or its JSON); the exit code to exit with:
    the command's, or timeout(1)'s 124 when it was killed at its limit. Both command lines'."""
    if as_json:
        print(dump(answer, "json"))
    else:
        sys.stdout.write(answer.get("stdout", ""))
        sys.stdout.flush()
        sys.stderr.write(answer.get("stderr", ""))
        sys.stderr.flush()
    if answer.get("timed_out"):
        print(f"error: the command ran past its {timeout_s:g} s limit and was killed", file=sys.stderr)
        return execspec.TIMED_OUT_EXIT
    return int(answer.get("exit_code", 1))
