"""What the command line prints while it watches: a submitted job's tasks until they all run, job changes, and the cell's events."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

from reference.cellfile import ClientError
from reference.cli.http import Message
from reference.cli.output import is_data, one_unit, render

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fast path's start; the fast path follows events through cli_http.PlainCell, without httpx
    from typing import Any

    from reference.client import CellClient


class StartWatch:
    """Follows a job's tasks after its submission: says when each is placed, confirmed started
    by its borglet, or pending (and why), and decides when the wait is over.

    Done when every index below `task_count` runs with its start confirmed, or finished;
    failed as soon as one index's latest incarnation died for another reason than a kill, or
    is in a crash loop (its process ended and waits out a restart back-off), or was restarted
    in place before the wait saw it run.
    (A plain class: the fast path's `events` imports this module, and dataclasses costs it.)"""

    def __init__(
        self, task_count: int, say: Callable[[str], None], steady_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.task_count, self.say = task_count, say
        # A started task counts once it has stayed started this long: a process that exits at
        # once is reported started by a borglet that polled it alive, then in a crash loop.
        self.steady_s, self.clock = steady_s, clock
        self.started: dict[tuple[int, int], float] = {}  # (index, incarnation) -> first seen started
        self.tasks: dict[int, dict[str, Any]] = {}
        self._said: set[tuple[int, int, str]] = set()
        self.failed: str | None = None

    def _once(self, task: dict[str, Any], what: str, text: str) -> None:
        key = (int(task["index"]), int(task["incarnation"]), what)
        if key not in self._said:
            self._said.add(key)
            self.say(text)

    def take(self, message: Message) -> None:
        task = message.data.get("task")
        if not isinstance(task, dict) or message.event == "DELETED":
            return
        index, inc = int(task.get("index", 0)), int(task.get("incarnation", 0))
        known = self.tasks.get(index)
        if known is not None and int(known.get("incarnation", 0)) > inc:
            return  # an older incarnation's change, replayed
        self.tasks[index] = task
        state, name = task.get("state"), f"task {index}"
        whose = f"task {index} of {task['job']}" if task.get("job") else name
        loop = task.get("crash_loop")
        if isinstance(loop, dict):  # its process ended and waits out a restart back-off
            self._once(task, "crash_loop", f"{name} {loop.get('kind') or 'exited'}: {loop.get('text')}")
            self.failed = f"{whose} (incarnation {inc}) is in a crash loop: {loop.get('text')}"
            return
        if state == "RUNNING" and task.get("restarts") and task.get("last_exit"):
            # Restarted in place before the wait saw it run: it failed at least once.
            what = f"its process ended ({task['last_exit']}), restarted in place {task['restarts']} time(s)"
            self._once(task, "restarted", f"{name} failed: {what}")
            self.failed = f"{whose} (incarnation {inc}) failed: {what}"
            return
        if state == "PENDING" and task.get("pending_reason"):
            self._once(task, "pending:" + task["pending_reason"], f"{name} pending: {task['pending_reason']}")
        elif state == "RUNNING":
            self._once(task, "placed", f"{name} placed on {task.get('machine')}")
            if task.get("confirmed"):
                self.started.setdefault((index, inc), self.clock())
                pid = f" (pid {task['pid']})" if task.get("pid") else ""
                self._once(task, "started", f"{name} started on {task.get('machine')}{pid}")
        elif state == "DEAD":
            cause = task.get("cause")
            last = (task.get("events") or [{}])[-1]
            detail = last.get("detail") or cause
            if cause == "finished":
                self._once(task, "finished", f"{name} finished")
            elif cause != "killed":
                self._once(task, "dead", f"{name} {last.get('kind') or cause}: {detail}")
                self.failed = f"{whose} (incarnation {inc}) {cause}: {detail}"

    def steady_at(self) -> float | None:
        """When every task will have been started `steady_s` (or finished), if nothing else
        changes; None while some task has not started."""
        at = -float("inf")
        for index in range(self.task_count):
            t = self.tasks.get(index)
            if t is None:
                return None
            if t.get("state") == "DEAD" and t.get("cause") == "finished":
                continue
            if t.get("state") != "RUNNING" or not t.get("confirmed"):
                return None
            at = max(at, self.started.get((index, int(t.get("incarnation", 0))), self.clock()) + self.steady_s)
        return at

    @property
    def done(self) -> bool:
        if self.failed is not None:
            return True
        at = self.steady_at()
        return at is not None and self.clock() >= at


def wait_for_start(
    cell: CellClient, key: str, since: int, watcher: StartWatch, timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> str:  # fmt: skip
    """Watch the job's tasks from `since` until `watcher` is done or the time is up: returns
    "done", "failed", "timeout", or "unsupported" (the stream carried no message at all)."""
    deadline = clock() + timeout_s
    cursor = since
    while clock() < deadline:
        got = False
        # Once every task started, the stream is asked again when they will have stayed up.
        steady = watcher.steady_at()
        wait = deadline - clock() if steady is None else min(deadline - clock(), steady - clock())
        for message in cell.watch(f"/v1/jobs/{key}/tasks", since=cursor, timeout_s=max(1.0, wait)):
            got = True
            cursor = max(cursor, message.revision)
            watcher.take(message)
            if watcher.done:
                return "failed" if watcher.failed else "done"
        if watcher.done:
            return "failed" if watcher.failed else "done"
        if not got:
            return "unsupported"
    return "timeout"


def job_line(message: Message) -> str:
    job = message.data.get("job") or {}
    return (
        f"{message.revision:>8}  {message.event:<8}  {job.get('key', '?'):<24}  priority={job.get('priority')}  "
        f"tasks={job.get('task_count')}  version={job.get('version')}"
    )


def task_line(message: Message) -> str:
    """One change of a job's tasks under `task list -w`: revision, change, index#incarnation, state, where."""
    t = message.data.get("task") or {}
    where = t.get("machine") or t.get("pending_reason") or "-"
    state = t.get("status") or t.get("state") or "?"
    return f"{message.revision:>8}  {message.event:<8}  {t.get('index', '?')}#{t.get('incarnation', '?'):<6}  {state:<9}  {where}"


def machine_line(message: Message) -> str:
    """One change of the machines under `machine list -w`: revision, change, name, state, tasks."""
    m = message.data.get("machine") or {}
    tasks = m.get("tasks")
    count = len(tasks) if isinstance(tasks, list | dict) else tasks
    reason = f"  {m['reason']}" if m.get("reason") else ""
    return f"{message.revision:>8}  {message.event:<8}  {m.get('name', '?'):<20}  {m.get('state', '-'):<5}  tasks={count if count is not None else '-'}{reason}"


EVENT_HEADER = f"{'time':<8}  {'revision':>8}  {'subject':<28}  {'event':<12}  detail"


def event_line(message: Message, at: Any = None) -> str:
    """One event as a row under EVENT_HEADER; `at` stands for the event's own time when it has none."""
    d = message.data
    at = d.get("at", at)
    clock = time.strftime("%H:%M:%S", time.localtime(at)) if isinstance(at, int | float) else f"{'-':<8}"
    if message.event == "task":
        return f"{clock}  {message.revision:>8}  {d.get('task', '?'):<28}  {d.get('kind', ''):<12}  {d.get('detail', '')}"
    subject = d.get("job") or d.get("machine") or "?"
    return f"{clock}  {message.revision:>8}  {message.event + ' ' + subject:<28}  {d.get('kind', '')}"


def event_lines(output: str) -> Callable[[Message], str]:
    """How `minborg events` prints each event: as JSON, one object a line, for -o json or yaml;
    else rows under a header. Job and machine events carry no time of their own: one written
    in the same etcd revision as a task event is shown at that event's time, others as `-`."""
    if output in ("json", "yaml"):  # a stream: one compact JSON object a line either way
        return lambda m: json.dumps(one_unit({"event": m.event, "revision": m.revision, **m.data}), sort_keys=True)
    if is_data(output):  # -o name (the subject) or a template, one line an event
        return lambda m: render({"event": m.event, "revision": m.revision, **m.data}, output)
    times: dict[int, Any] = {}
    header = [EVENT_HEADER]  # said once, above the first row

    def line(message: Message) -> str:
        if isinstance(message.data.get("at"), int | float):
            times[message.revision] = message.data["at"]
        row = event_line(message, times.get(message.revision))
        if header:
            return f"{header.pop()}\n{row}"
        return row

    return line


def follow(
    cell: CellClient, path: str, *, since: int | None, for_s: float, line: Callable[[Message], str],
    say: Callable[[str], None], follow: bool = True, clock: Callable[[], float] = time.monotonic, tail: int = 0,
    **params: Any,
) -> int:  # fmt: skip
    """Print each message of a watch (bookmarks aside) until `for_s` seconds pass, reconnecting
    from the last revision seen; without `follow`, stop once the replay is printed. A `since`
    older than the replica's log starts from the oldest change it holds. `tail` (the events
    watch): of the first replay, only its newest this many (0: all); a reconnection misses
    nothing. Returns how many were printed."""
    deadline = clock() + for_s
    printed = 0
    cursor = since
    replayed = False  # a replay came (a message or its bookmark): no tail from then on
    while clock() < deadline:
        try:
            first = {"tail": tail} if tail and not replayed else {}
            stream: Iterable[Message] = cell.watch(
                path, since=cursor, timeout_s=max(1.0, deadline - clock()) if follow else 1.0, **params, **first
            )
            for message in stream:
                cursor = message.revision if cursor is None else max(cursor, message.revision)
                replayed = True
                if message.event == "bookmark":
                    if not follow:
                        return printed
                    continue
                if message.event == "error":
                    raise ClientError(410, message.data.get("error", "the watch fell behind"))
                say(line(message))
                printed += 1
        except ClientError as err:
            item = err.detail[0] if isinstance(err.detail, list) and err.detail else err.detail
            floor = item.get("floor") if isinstance(item, dict) else None
            if err.status == 410 and isinstance(floor, int) and cursor is not None and cursor < floor:
                cursor = floor
                continue
            raise
        if not follow:
            return printed
    return printed
