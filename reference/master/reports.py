"""Pure mapping between the cell and a borglet: the desired set a machine is sent, and its reply turned into spec steps.

A reply's task states map to the spec's actions:

    FINISHED                    -> finish
    FAILED (lost_on_restart)    -> lost       (the borglet lost it while it was down)
    FAILED (anything else)      -> fail       (it gave up restarting it in place)
    KILLED (memory_pressure)    -> evict, reason reclamation
    KILLED (anything else)      -> lost       (killed by the machine, not by the cell)
    absent, though seen before  -> lost       (the borglet no longer knows it)
    QUEUED / STARTING / RUNNING -> no step; port, health, restarts and usage are recorded

A restart in place by the borglet is not a state change: only `restarts` moves.

Hold-back: a new incarnation (or a new placement) of a task index is not sent to any borglet
while another process of the same index is still reported live by the borglet of an up
machine. The spec already counts the new one as RUNNING (assigned); the hold only delays
its process until the old one is confirmed gone, so two never run at once. A down machine's
reports do not hold anything back: the machine was declared lost and its tasks with it. A
removed machine's do, until its processes are reported stopped (`departed_live`).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from reference.master import work
from reference.master.cell import Cell, Draft, TaskInfo, borglet_task_id
from spec.actions import EvictReason
from spec.model import TaskId, TaskState
from spec.taskid import parse_task_id


@dataclass
class Outcome:
    steps: list[tuple[str, tuple[Any, ...], str]] = field(default_factory=list)
    infos: dict[TaskId, TaskInfo] = field(default_factory=dict)  # facts worth writing now
    usage: dict[TaskId, tuple[tuple[str, int], ...]] = field(default_factory=dict)


def bns_name(tid: TaskId, cell: str) -> str:
    user, name = tid.job.split("/", 1)
    return f"{tid.index}.{name}.{user}.{cell}.minborg"


Memo = dict[TaskId, tuple[Any, Any, int, dict[str, Any]]]


def desired_set(
    cell: Cell, machine: str, cell_name: str, memo: Memo | None = None
) -> tuple[list[dict[str, Any]], set[TaskId]]:
    """The tasks a machine's borglet should run: every task RUNNING there in the cell state.

    `memo` (task id -> the task, job and placement an entry was built from, and the entry)
    lets a caller that asks every turn reuse the entries of tasks that did not change: cell
    values are immutable, so the same objects mean the same entry. Entries must not be mutated.
    """
    out: list[dict[str, Any]] = []
    ids: set[TaskId] = set()
    for task in cell.state.running_on(machine):
        ji = cell.jobs.get(task.id.job)
        if ji is None:
            continue
        info = cell.task_info(task.id)
        ids.add(task.id)
        if memo is not None:
            hit = memo.get(task.id)
            # A task record rewritten with the same values (its borglet's facts changed, not
            # the task) is a new object that compares equal: its entry stands.
            if entry_stands(hit, ji, info, task):
                if hit[0] is not task:
                    memo[task.id] = (task, ji, info.placement, hit[3])
                out.append(hit[3])
                continue
        entry = _desired_entry(task, ji, info, cell_name)
        job = cell.state.jobs.get(task.id.job)
        alloc = None if job is None else cell.state.alloc_for(job, task.id.index)
        if alloc is not None:
            # The task's cgroup goes beneath its alloc's (an alloc cannot change while a job names its set).
            entry["alloc"] = {"name": alloc.name, "cpu": alloc.resources.get("cpu"), "ram": alloc.resources.get("ram")}
        if memo is not None:
            memo[task.id] = (task, ji, info.placement, entry)
        out.append(entry)
    out.sort(key=lambda d: d["task_id"])
    work.add("desired_sets")
    work.add("desired_entries", len(out))
    return out, ids


def entry_stands(hit: Any, ji: Any, info: TaskInfo, task: Any) -> bool:
    """Whether a memo's `hit` for a task (the task, job file and placement its entry was built
    from, and the entry) still gives the task's entry, now of job file `ji`, facts `info` and
    record `task`."""
    return hit is not None and hit[1] is ji and hit[2] == info.placement and same_entry(hit[0], task)


def same_entry(was: Any, now: Any) -> bool:
    """Whether two records of one task, of the same job file and placement, make the same
    desired entry: they differ at most in what no entry carries (its reservation, the reason it
    went down, ...). An entry is built from the task's id, state, machine, request and priority."""
    return was is now or (
        was.state is now.state and was.machine == now.machine and was.request == now.request
        and was.priority == now.priority and was.id == now.id
    )  # fmt: skip


def _desired_entry(task: Any, ji: Any, info: TaskInfo, cell_name: str) -> dict[str, Any]:
    return {
        "task_id": borglet_task_id(task.id, info),
        "job": task.id.job,
        "index": task.id.index,
        "incarnation": task.id.incarnation,
        "bns": bns_name(task.id, cell_name),
        **_job_part(ji),
        "port": 0,
        "request": {"cpu": task.request.get("cpu"), "ram": task.request.get("ram")},
        "priority": task.priority,
    }


_JOB_PARTS: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(JobInfo) -> (it, its part of an entry)


def _job_part(ji: Any) -> dict[str, Any]:
    """What every entry of one job file says alike, built once per JobInfo object (cell values
    are immutable; the object is kept beside its id so a reused id is not mistaken for it).
    Shared between entries, which are never mutated below their top level."""
    kept = _JOB_PARTS.get(id(ji))
    if kept is not None and kept[0] is ji:
        return kept[1]
    spec = ji.spec
    part = {
        "command": list(spec.command),
        "env": dict(spec.env),
        "cwd": spec.cwd,
        "restart_policy": spec.restart_policy.value,
        "health_check": spec.health_check.model_dump() if spec.health_check else None,
        **({"image": spec.image} if spec.image else {}),
        "pids_max": spec.pids_max,
    }
    if len(_JOB_PARTS) >= 4096:
        _JOB_PARTS.clear()
    _JOB_PARTS[id(ji)] = (ji, part)
    return part


# A borglet state whose process may be alive: a queued task may start at any moment.
LIVE_STATES = frozenset({"QUEUED", "STARTING", "RUNNING"})
# A borglet state that confirms the task's process was started (see `confirmed`).
STARTED_STATES = frozenset({"STARTING", "RUNNING"})


def confirmed(info: TaskInfo) -> bool:
    """Whether a RUNNING task's borglet has reported it past its queue: its process exists, or
    is restarting in place. RUNNING in the cell means placed; this is the start users see.
    A process that ended and waits out its borglet's back-off (STARTING, no pid, a reason)
    is not started: a crash loop does not count as running."""
    if info.borglet_state == "STARTING" and not info.pid and info.reason:
        return False
    return info.seen and info.borglet_state in STARTED_STATES

IndexKey = tuple[str, int]  # (job key, task index)


def ready_ids(reply: dict[str, Any]) -> frozenset[str]:
    """The borglet task ids (one placement of a task each) that a borglet's reply says are
    running and have run READY_AFTER_S: its word for the rollout (rollout.is_up). Read from the
    whole reply, whatever sync it answers: a word is the borglet's, not the sync's."""
    tasks = reply.get("tasks")
    return frozenset(
        t["task_id"] for t in (tasks if isinstance(tasks, list) else ())
        if isinstance(t, dict) and isinstance(t.get("task_id"), str) and t.get("state") == "RUNNING" and t.get("ready") is True
    )  # fmt: skip


@functools.lru_cache(maxsize=1 << 16)
def parse_borglet_task_id(task_id: str) -> tuple[str, int, int] | None:
    """'user/job/3#1@2' -> ('user/job', 3, 1); None for an id this master did not make
    (spec.taskid.parse_task_id refuses it). Cached: every rebuild of the desired sets parses
    every reported id again."""
    try:
        return parse_task_id(task_id)[:3]
    except ValueError:
        return None


def first_of_its_index(task_id: str) -> bool:
    """Whether a borglet task id is the first process its task index ever had: incarnation 0
    (the cell keeps every index's newest incarnation, dead or not, so an index that ran before
    gets a higher one) at its first placement. No machine can run another process of that
    index, so a machine that has not reported yet cannot block it: a cell of thousands of
    machines starts a new job before its new leader has heard from every one."""
    try:
        parsed = parse_task_id(task_id)
    except ValueError:
        return False
    return parsed.incarnation == 0 and parsed.placement is not None and parsed.placement <= 1


@dataclass(frozen=True)
class Hold:
    """A task id kept out of its machine's desired set while `blocker` still runs on `machine`."""

    task_id: str
    blocker: str
    machine: str

    def describe(self) -> str:
        if not self.blocker:
            return f"waiting for machine {self.machine} to report"
        parsed = parse_borglet_task_id(self.blocker)
        what = f"incarnation {parsed[2]}" if parsed else self.blocker
        return f"waiting for {what} to stop"


def live_by_index(
    reported: Mapping[str, Mapping[str, str]], up: Iterable[str]
) -> dict[IndexKey, list[tuple[str, str]]]:
    """(job, index) -> [(machine, task id)] of processes reported live by up machines.

    reported: machine -> {borglet task id: state} from each machine's last reply.
    """
    out: dict[IndexKey, list[tuple[str, str]]] = {}
    for machine in set(up):
        work.add("hold_checks", len(reported.get(machine, ())))
        for task_id, state in reported.get(machine, {}).items():
            if state in LIVE_STATES and (parsed := parse_borglet_task_id(task_id)) is not None:
                out.setdefault((parsed[0], parsed[1]), []).append((machine, task_id))
    # Each list in (machine, task id) order; most hold one process, and need no sort.
    for processes in out.values():
        if len(processes) > 1:
            processes.sort()
    return out


def departed_live(
    reported: Mapping[str, Mapping[str, str]],
    in_cell: Collection[str],
    sent: Mapping[str, Collection[str]] | None = None,
) -> dict[str, dict[str, str]]:
    """Machines no longer in the cell that may still run a process, with what they may run.

    A removed machine's tasks were evicted in the same write that removed it, but its borglet
    runs their processes until told otherwise, and may yet start one it was sent and has not
    reported: it is still synced, with nothing desired, and those processes hold back new
    incarnations of their indices elsewhere, until it reports them stopped or stays silent
    long enough for any to have stopped (then, as a down machine, it holds nothing back).
    Returns machine -> {borglet task id: state}, a sent one not yet reported as QUEUED.
    """
    out: dict[str, dict[str, str]] = {}
    for m in sorted(set(reported) | set(sent or {})):
        if m in in_cell:
            continue
        states = with_sent(reported.get(m, {}), (sent or {}).get(m, ()))
        if any(s in LIVE_STATES for s in states.values()):
            out[m] = states
    return out


def with_sent(reported: Mapping[str, str], sent: Collection[str]) -> Mapping[str, str]:
    """A machine's last report with the task ids of the last sync sent to it that the report
    does not show counted as QUEUED: a sync in flight, or one whose reply is not in yet, may
    start them at any moment, so they hold back other processes of their indices as if reported
    (the report itself when nothing sent is missing from it)."""
    missing = [tid for tid in sent if tid not in reported]
    if not missing:
        return reported
    states = dict(reported)
    for tid in missing:
        states[tid] = "QUEUED"
    return states


def hold_back(
    desired: list[dict[str, Any]],
    live: Mapping[IndexKey, list[tuple[str, str]]],
    released: set[str],
    unreported: list[str] | None = None,
) -> tuple[list[dict[str, Any]], list[Hold]]:
    """Split a desired set into what may be sent now and what must wait.

    A task already released (sent before, or reported by its borglet) is always kept: taking
    it out again would make its borglet kill a process that runs legitimately. Any other task
    waits while a different process of its index is live on an up machine, or while an up
    machine has not reported at all yet (a new leader does not know what runs there), unless
    it is its index's first process (`first_of_its_index`): then nothing can run elsewhere.
    """
    keep: list[dict[str, Any]] = []
    held: list[Hold] = []
    work.add("hold_checks", len(desired))
    for d in desired:
        tid = str(d["task_id"])
        others = [(m, o) for m, o in live.get((str(d["job"]), int(d["index"])), ()) if o != tid]
        waits_for_reports = bool(unreported) and not first_of_its_index(tid)
        if tid in released or not (others or waits_for_reports):
            keep.append(d)
        elif others:
            held.append(Hold(tid, others[0][1], others[0][0]))
        else:
            held.append(Hold(tid, "", sorted(unreported or [""])[0]))
    return keep, held


def show_holds(d: Draft, holds: Iterable[Hold]) -> None:
    """Write why each held task waits on the task (its borglet state), unless it runs already."""
    for h in holds:
        parsed = parse_borglet_task_id(h.task_id)
        if parsed is None:
            continue
        tid = TaskId(*parsed)
        task, info = d.state.tasks.get(tid), d.task_info(tid)
        if task is None or task.state is not TaskState.RUNNING or info.seen:
            continue
        if borglet_task_id(tid, info) == h.task_id:
            d.set_task_info(tid, replace(info, borglet_state=h.describe()))


# The largest usage figure the cell keeps: a record holds a whole number up to 64 bits exactly.
USAGE_MAX = 2**63 - 1


def usage_items(raw: Any) -> tuple[tuple[str, int], ...]:
    """A reported usage (name -> amount) as the cell keeps it: whole numbers from 0 to
    USAGE_MAX, names sorted. An amount that is no finite number is left out and one out of
    bounds is held at the bound, so no borglet's report, however odd, makes a master fail or
    keep what its record cannot store exactly (a larger integer reads back as a float)."""
    if not isinstance(raw, Mapping):
        return ()
    out: dict[str, int] = {}
    for name, amount in raw.items():
        try:
            n = int(amount)
        except (TypeError, ValueError, OverflowError):  # a string, NaN, an infinity
            continue
        out[str(name)] = min(max(n, 0), USAGE_MAX)
    return tuple(sorted(out.items()))


def map_reply(cell: Cell, machine: str, reply: dict[str, Any], sent: set[TaskId]) -> Outcome:
    """Steps and facts from a borglet's reply to a sync that listed the tasks in `sent`.

    Every poll of a machine maps its whole reply, so a task whose facts did not change costs
    a comparison of the reported values with the cell's, not a new TaskInfo."""
    reported = {t.get("task_id"): t for t in reply.get("tasks", []) if isinstance(t, dict)}
    out = Outcome()
    tasks = cell.state.tasks
    for tid in sorted(sent, key=str):
        task = tasks.get(tid)
        if task is None or task.state is not TaskState.RUNNING or task.machine != machine:
            continue  # changed since the sync was sent
        info = cell.task_info(tid)
        r = reported.get(borglet_task_id(tid, info))
        if r is None:
            if info.seen:
                out.steps.append(("lost", (tid,), "unknown to its borglet"))
            continue
        state, reason = str(r.get("state", "")), str(r.get("reason") or "")
        if state == "FINISHED":
            out.steps.append(("finish", (tid,), "exit 0"))
        elif state == "FAILED":
            if reason == "lost_on_restart":
                out.steps.append(("lost", (tid,), reason))
            else:
                out.steps.append(("fail", (tid,), reason or "failed"))
        elif state == "KILLED":
            if reason == "memory_pressure":
                out.steps.append(("evict", (tid, EvictReason.RECLAMATION), reason))
            else:
                out.steps.append(("lost", (tid,), f"killed on the machine: {reason or '?'}"))
        usage = usage_items(r.get("usage"))
        out.usage[tid] = usage
        port, healthy, restarts = int(r.get("port") or 0), r.get("healthy"), int(r.get("restarts") or 0)
        started_at = float(r.get("started_at") or 0.0)
        if _worth_writing(info, port, healthy, restarts, state, started_at):
            out.infos[tid] = replace(
                info,
                port=port,
                healthy=healthy,
                restarts=restarts,
                borglet_state=state,
                started_at=started_at,
                pid=int(r.get("pid") or 0),
                seen=True,
                reason=reason,
                usage=usage,
                last_exit=str(r.get("last_exit") or info.last_exit),  # kept from an earlier incarnation
                retry_at=float(r.get("restart_at") or 0.0) if state == "STARTING" else 0.0,
            )
    return out


def news(cur: TaskInfo, new: TaskInfo) -> bool:
    """Whether `new`, facts mapped from a reply, says anything worth writing over `cur`, the
    task's info when the write is made. The reply was mapped on the cache's view, which can be
    a write behind: two polls of a task that went QUEUED both differ from its unreported info,
    and without this check the second wrote the QUEUED task's port alone."""
    return _worth_writing(cur, new.port, new.healthy, new.restarts, new.borglet_state, new.started_at)


def _worth_writing(info: TaskInfo, port: int, healthy: Any, restarts: int, state: str, started_at: float) -> bool:
    return _facts(info) != (info.port if state == "QUEUED" else port, healthy, restarts, state, True, started_at)


def _facts(info: TaskInfo) -> tuple[Any, ...]:
    """The facts clients act on (BNS, health, restarts, the start): a change to any is written
    at once; usage, the pid and the reason alone can wait for the next write. So can the port
    of a task still QUEUED: its borglet picks the port just before it spawns the process, and
    nothing answers on it until the task runs (a poll in between wrote about 6,000 records of a
    10,000-task start for nothing a client could use)."""
    return (info.port, info.healthy, info.restarts, info.borglet_state, info.seen, info.started_at)
