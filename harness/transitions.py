"""Explains each observed task change as a short sequence of spec actions enabled in the previous observation.

Polling sees the cell at moments, not at every step, so a task may move several steps
between two polls (RUNNING -> DEAD -> PENDING -> RUNNING on another machine is a failure, a
restart and a schedule). For each task index whose newest incarnation changed, a bounded
breadth-first search runs the spec's own actions from the previous observation until the
index looks as it does now; no such path means the cell made a move the spec forbids.

Three kinds of change are judged apart from task indices: machines that appeared, went down,
came back or left (`machine_changes`), reservations of tasks that kept running in one
placement (`reservation_changes`), and allocs created or deleted (`alloc_changes`): each is
one spec step, checked against the spec's guard and effect.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from spec.actions import (
    ACTIONS,
    EvictReason,
    Step,
    alloc_create,
    alloc_delete,
    drain,
    drain_move,
    machine_add,
    machine_down,
    machine_remove,
    machine_up,
    reserve,
    roll,
    uncordon,
)
from spec.fmap import FMap
from spec.model import CellState, Job, Resources, Task, TaskId, TaskState

#: Task steps a path may hold (a slow step, such as a failover or a borglet restarted under a
#: placement, can hide two losses with their restarts and placements behind one poll); steps of the environment (job and machine changes seen in
#: the new observation) are free, since each is taken at most once.
MAX_TASK_STEPS = 6
#: States one search may visit: far more than any path of MAX_TASK_STEPS needs on a small cell.
MAX_STATES = 5000
def roll_of_one_index(s: CellState, task_id: TaskId) -> CellState | None:
    """The spec's roll without its budget guard: an index is explained alone, beside the other
    indices as they are now (`_hybrid`), so the budget, a bound across indices, is not judged
    here but by the invariant disruptions_within_budget on every observed state."""
    job = s.jobs.get(task_id.job)
    if job is None:
        return None
    free = s.with_(jobs=s.jobs.set(job.key, replace(job, max_unavailable=1 << 30)))
    nxt = roll(free, task_id)
    return None if nxt is None else nxt.with_(jobs=s.jobs)


def drain_move_of_one_index(s: CellState, task_id: TaskId) -> CellState | None:
    """The spec's drain_move without its budget guard, for the reason `roll_of_one_index`
    gives: the budget is judged on every observed state (disruptions_within_budget)."""
    job = s.jobs.get(task_id.job)
    if job is None:
        return None
    free = s.with_(jobs=s.jobs.set(job.key, replace(job, max_unavailable=1 << 30)))
    nxt = drain_move(free, task_id)
    return None if nxt is None else nxt.with_(jobs=s.jobs)


#: The actions an explanation replays: the spec's, with `roll` and `drain_move` judged per index.
EXPLAINING = {**ACTIONS, "roll": roll_of_one_index, "drain_move": drain_move_of_one_index}

#: Machine steps: counted once per poll from the machines list (`machine_changes`), not per index.
MACHINE_ACTIONS = frozenset({"machine_add", "machine_remove", "machine_down", "machine_up", "drain", "uncordon"})
ENV_ACTIONS = frozenset({"submit", "update", "kill_job"}) | MACHINE_ACTIONS


@dataclass(frozen=True)
class Verdict:
    job: str
    index: int
    before: Task | None
    after: Task
    path: tuple[Step, ...] | None  # None: no spec path explains the change
    gave_up: bool = False  # the search met its bound before it found a path
    why: str = ""  # what the spec's guards said, when no path was found

    @property
    def ok(self) -> bool:
        return self.path is not None

    def describe(self) -> str:
        b = "absent" if self.before is None else _fmt(self.before)
        if self.path is None and self.gave_up:
            return f"{self.job}/{self.index}: {b} -> {_fmt(self.after)} found no spec path in {MAX_STATES} states"
        if self.path is None:
            return f"{self.job}/{self.index}: {b} -> {_fmt(self.after)} has no spec path of <= {MAX_TASK_STEPS} task steps{self.why}"
        return f"{self.job}/{self.index}: {b} -> {_fmt(self.after)} via " + ", ".join(map(str, self.path))


def _fmt(t: Task) -> str:
    where = f"@{t.machine}" if t.machine else ""
    cause = f"({t.cause.value})" if t.cause else ""
    return f"#{t.id.incarnation} {t.state.value}{where}{cause}"


def _looks(t: Task | None) -> tuple[object, ...] | None:
    return None if t is None else (t.id.incarnation, t.state, t.machine, t.cause)


def changed_indices(before: CellState, after: CellState) -> list[tuple[str, int]]:
    keys = {(t.job, t.index) for t in after.tasks.values()}
    return sorted(k for k in keys if _looks(before.latest(*k)) != _looks(after.latest(*k)))


def _hybrid(before: CellState, after: CellState, job: str, index: int, replaced: frozenset[TaskId] = frozenset()) -> CellState:
    """The previous observation, with every other index's tasks (and every other job) as they
    are now: their own moves are judged on their own, and they decide what room this index's
    task had. `replaced`: tasks placed again between the polls (evicted, then placed where
    they were), which may have left for a while."""
    tasks = {
        tid: _least_room(None if tid in replaced else before.tasks.get(tid), t)
        for tid, t in after.tasks.items() if (tid.job, tid.index) != (job, index)
    }  # fmt: skip
    tasks.update({tid: t for tid, t in before.tasks.items() if (tid.job, tid.index) == (job, index)})
    # Other jobs as they are now too: one killed since the last poll may have made the quota
    # room this job's submit or update needed.
    jobs = {k: j for k, j in after.jobs.items() if k != job}
    if job in before.jobs:
        jobs[job] = before.jobs[job]
    # Allocs as they take the least room: those in both polls, and the job's own set's (its
    # submit and placements need them) whenever seen.
    own = {j.alloc for j in (before.jobs.get(job), after.jobs.get(job)) if j is not None and j.alloc is not None}
    allocs = {n: a for n, a in before.allocs.items() if n in after.allocs or a.set in own}
    allocs.update({n: a for n, a in after.allocs.items() if a.set in own})
    return before.with_(tasks=FMap(tasks), jobs=FMap(jobs), quotas=after.quotas, allocs=FMap(allocs))


def _least_room(old: Task | None, t: Task) -> Task:
    """Another task as it takes the least room: a poll does not say in which order moves
    between two polls came, so this index's task may have been placed before the other was
    placed where it is now and after it left where it was (then it is PENDING) or after the
    other's reservation shrank (the lower of its two reservations). The invariants still judge the
    cell as it is now, whatever the order."""
    if t.state is TaskState.RUNNING and (old is None or old.state is not TaskState.RUNNING or old.machine != t.machine):
        return replace(t, state=TaskState.PENDING, machine=None, reservation=None)  # placed since: nowhere yet
    if old is None or old.state is not TaskState.RUNNING or t.state is not TaskState.RUNNING:
        return t
    if old.machine != t.machine or old.request != t.request or old.reserved == t.reserved:
        return t
    a, b = old.reserved, t.reserved
    low = Resources.of({k: min(a.get(k), b.get(k)) for k in a.names() | b.names()})
    return replace(t, reservation=None if low == t.request else low)


def _env_steps(s: CellState, after: CellState, job: str, known: Mapping[str, Job], index: int | None = None) -> Iterator[Step]:
    cur, new = s.jobs.get(job), after.jobs.get(job)
    if cur is not None and new is None:
        yield Step("kill_job", (job,))
    if new is not None and cur is None:
        yield Step("submit", (new,))
        wider = _submitted_wider(new, after)
        if wider is not None:
            yield Step("submit", (wider,))  # submitted, then resized down, between two polls
        if new.version > 0:
            # Submitted, then changed, before any poll saw it: submitted as an earlier version
            # (of another template, so a task placed before the change is rolled by it).
            yield Step("submit", (replace(new, version=0, template=f"{new.template}~before"),))
    if new is None and cur is None and job in known:
        yield Step("submit", (known[job],))  # submitted and killed between two polls
    ref = new if new is not None else known.get(job)  # updated, then killed since the last poll
    if ref is not None and cur is not None and replace(cur, version=0) != replace(ref, version=0):
        yield Step("update", (job, None, None, ref))  # any field: the whole job as it is now
    if ref is not None and cur is not None and ref.version > cur.version + 1:
        # Versions no poll saw came in between: each, of another template, lets an index be
        # rolled once more between two polls (version by version, as many as the versions
        # between); one of fewer tasks, then the count back, kills this index and starts it
        # anew (a resize down and up, its new incarnation after one a user killed).
        between = replace(ref, template=f"{ref.template}~between{cur.version}")
        if cur.template != between.template:
            yield Step("update", (job, None, None, between))
        if index is not None and index < cur.task_count and index < ref.task_count:
            yield Step("update", (job, index, None, None))
    if new is not None and cur is not None and cur.version > new.version:
        yield Step("kill_job", (job,))  # killed and submitted again since the last poll
    for name, m in after.machines.items():
        old = s.machines.get(name)
        if old is None:
            yield Step("machine_add", (m,))
        elif old.up and not m.up:
            yield Step("machine_down", (name,))
        elif m.up and not old.up:
            yield Step("machine_up", (name,))
        if old is not None and old.schedulable != m.schedulable:
            yield Step("drain" if old.schedulable else "uncordon", (name,))
    for name in s.machines:
        if name not in after.machines:
            yield Step("machine_remove", (name,))


def _submitted_wider(job: Job, after: CellState) -> Job | None:
    """The job as first submitted with as many tasks as the indices it shows now, when that
    is more than it has now: an index beyond its count was killed by a resize that came
    before any poll saw the job (None: no index lies beyond)."""
    top = max((tid.index for tid in after.tasks if tid.job == job.key), default=-1)
    return replace(job, task_count=top + 1) if top + 1 > job.task_count else None


def _task_steps(
    s: CellState, job: str, index: int, goal: str | None = None, first: str | None = None, evicts: bool = True
) -> Iterator[Step]:
    """The task steps enabled for the index's newest task; `goal` (the machine it is seen on
    now) is tried first, and so is `first`, the way a RUNNING task ended that the cell names;
    `evicts`: False leaves evictions out (the cell names a drain's move instead)."""
    t = s.latest(job, index)
    if t is None:
        return
    if t.state is TaskState.PENDING:
        for m in sorted(s.machines, key=lambda name: name != goal):
            if s.machines[m].up:
                yield Step("schedule", (t.id, m))
        yield Step("kill", (t.id,))
    elif t.state is TaskState.RUNNING:
        ends = ("finish", "fail", "lost", "kill", "roll", "drain_move")
        for name in sorted(ends, key=lambda a: a != first) if first else ends:
            yield Step(name, (t.id,))
        for reason in (EvictReason.MAINTENANCE, EvictReason.RECLAMATION) if evicts else ():
            yield Step("evict", (t.id, reason, None))
    else:
        yield Step("restart", (t.id,))


def _key(s: CellState, job: str) -> tuple[object, ...]:
    """What a search step can change: the job, its tasks and the machines (every other job's
    tasks stay as they are now), so states equal in these are one state of the search."""
    return (s.jobs.get(job), s.machines, frozenset(t for t in s.tasks.values() if t.id.job == job))


def explain(
    before: CellState, after: CellState, job: str, index: int,
    known: Mapping[str, Job] | None = None, first: str | None = None, replaced: frozenset[TaskId] = frozenset(),
    evicts: bool = True,
) -> Verdict:
    """`known`: jobs as last submitted or updated, for a job that came and went (or was
    updated and killed) between the polls: the observation no longer lists it, but its tasks
    are there. `first`: how the cell says the index's last incarnation ended ("lost" when
    the newest one's history reads "restart after lost"): when a poll saw neither the end nor
    the restart, several endings explain the new incarnation alike, and the one the cell
    names is the one counted. `evicts`: False searches without evictions (a drain's move and
    a maintenance eviction look alike from outside; the cell's history tells them apart)."""
    goal = _looks(after.latest(job, index))
    now = after.latest(job, index)
    goal_machine = now.machine if now is not None else None
    start = _hybrid(before, after, job, index, replaced)
    prev = before.latest(job, index)
    queue: deque[tuple[CellState, tuple[Step, ...], int]] = deque([(start, (), 0)])
    seen = {_key(start, job)}
    while queue:
        if len(seen) > MAX_STATES:
            return Verdict(job, index, prev, after.latest(job, index), None, gave_up=True)  # type: ignore[arg-type]
        s, path, n = queue.popleft()
        if path and _looks(s.latest(job, index)) == goal:
            return Verdict(job, index, prev, after.latest(job, index), path)  # type: ignore[arg-type]
        steps = [(st, False) for st in _env_steps(s, after, job, known or {}, index)]
        if n < MAX_TASK_STEPS:
            steps += [(st, True) for st in _task_steps(s, job, index, goal_machine, first, evicts)]
        for step, counts in steps:
            nxt = EXPLAINING[step.action](s, *step.args)
            if nxt is None:
                continue
            key = _key(nxt, job)
            if key in seen:
                continue
            seen.add(key)
            queue.append((nxt, path + (step,), n + counts))
    return Verdict(job, index, prev, after.latest(job, index), None, why=_why(start, after, job, index))  # type: ignore[arg-type]


def _why(start: CellState, after: CellState, job: str, index: int) -> str:
    """The facts a failed search turned on: the job's quota room and the goal machine's room."""
    now = after.latest(job, index)
    j = after.jobs.get(job) or start.jobs.get(job)
    parts = []
    if j is not None:
        q = start.quota_for(j.user, j.band)
        if q is not None:
            parts.append(f"{j.user}'s {j.band.value} quota {q}, used {start.quota_used(j.user, j.band, excluding=job)} by others")
    if now is not None and now.machine and now.machine in start.machines:
        m = start.machines[now.machine]
        parts.append(
            f"{m.name} up={m.up} capacity {m.capacity}, reserved {start.machine_reserved(m.name)}, "
            f"committed for prod {start.machine_committed_for_prod(m.name)}, task request {now.request} priority {now.priority}"
        )
    return " (" + "; ".join(parts) + ")" if parts else ""


#: The restart reasons the cell writes into a new incarnation's history, and the ending each names.
RESTART_AFTER = {"restart after lost": "lost", "restart after failed": "fail", "restart after finished": "finish"}


def explain_all(
    before: CellState, after: CellState, known: Mapping[str, Job] | None = None,
    histories: Mapping[TaskId, list[dict[str, object]]] | None = None, replaced: frozenset[TaskId] = frozenset(),
) -> list[Verdict]:
    """Every changed index explained; `histories` (task id -> its view's history) name how
    an incarnation the polls did not see end ended."""
    out = []
    for j, i in changed_indices(before, after):
        now = after.latest(j, i)
        reasons = [h.get("reason") for h in (histories or {}).get(now.id, [])] if now is not None else []
        first = next((RESTART_AFTER[r] for r in reversed(reasons) if r in RESTART_AFTER), None)  # type: ignore[index]
        moved = _moved_by_drain(reasons, before, now)
        v = explain(before, after, j, i, known, first, replaced, evicts=not moved)
        if moved and not v.ok:  # an eviction too since the move: search again with them
            v = explain(before, after, j, i, known, first, replaced)
        out.append(v)
    return out


def _moved_by_drain(reasons: list[object], before: CellState, now: Task | None) -> bool:
    """Whether the cell says a drain moved this incarnation off its machine since the last
    poll (its history's newest drain reason is a move, not an eviction at the deadline)."""
    old = None if now is None else before.tasks.get(now.id)
    if old is None or old.state is not TaskState.RUNNING:
        return False
    drains = [r for r in reasons if isinstance(r, str) and r.startswith("drain of ")]
    return bool(drains) and "deadline passed" not in drains[-1]


@dataclass(frozen=True)
class Change:
    """A machine or reservation change seen between two polls, as a spec step and what is wrong with it."""

    step: Step
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def machine_changes(before: CellState, after: CellState) -> list[Change]:
    """The machine steps that explain how the machines list changed.

    Each is judged on the previous machines with the tasks as they are now: the cell takes
    a machine's task steps (its tasks lost, drained) in the same write as the machine's own.
    """
    now = before.with_(tasks=after.tasks)
    out: list[Change] = []
    for name, m in sorted(after.machines.items()):
        old = before.machines.get(name)
        if old is None:
            step = Step("machine_add", (m,))
            out.append(Change(step, None if machine_add(now, m) is not None else f"{name} was added twice"))
            if not m.up:  # added, then declared down before this poll
                out.append(_down(machine_add(now, m) or now, after, name))
        elif old.up and not m.up:
            out.append(_down(now, after, name))
        elif m.up and not old.up:
            ok = machine_up(now, name) is not None
            out.append(Change(Step("machine_up", (name,)), None if ok else f"{name} came up but was not down"))
        if old is not None:
            out += _cordon_changes(before, after, name)
    for name in sorted(before.machines):
        if name not in after.machines:
            ok = machine_remove(now, name) is not None
            running = ", ".join(str(t.id) for t in after.running_on(name))
            problem = None if ok else f"{name} was removed though it still runs {running or 'an alloc'}"
            out.append(Change(Step("machine_remove", (name,)), problem))
    return out


def _cordon_changes(before: CellState, after: CellState, name: str) -> list[Change]:
    """drain or uncordon where the machine's schedulable flag moved; and a machine drained in
    both polls took no new task (a task RUNNING there now that was not RUNNING there before:
    the spec's schedule refuses an unschedulable machine)."""
    old, m = before.machines[name], after.machines[name]
    out: list[Change] = []
    if old.schedulable and not m.schedulable:
        out.append(Change(Step("drain", (name,)), None if drain(before, name) is not None else f"{name} was drained twice"))
    elif m.schedulable and not old.schedulable:
        ok = uncordon(before, name) is not None
        out.append(Change(Step("uncordon", (name,)), None if ok else f"{name} was uncordoned but was not drained"))
    elif not m.schedulable:
        was = {tid for tid, t in before.tasks.items() if t.state is TaskState.RUNNING and t.machine == name}
        new = [t.id for t in after.running_on(name) if t.id not in was]
        if new:
            out.append(Change(Step("schedule", (new[0], name)), f"{new[0]} was placed on {name}, drained in both polls"))
    return out


def alloc_changes(before: CellState, after: CellState) -> list[Change]:
    """The alloc steps that explain how the allocs changed: each new alloc created (on the
    machines as seen in either poll, beside the tasks as they are now, the least room), then
    each gone alloc deleted (with the jobs as they are now: its set's jobs are killed in the
    same write)."""
    # A machine up, or schedulable, in either poll: the alloc may have come before it went
    # down or was drained (each judged on its own, machine_changes).
    up = {
        n: replace(m, up=m.up or (n in before.machines and before.machines[n].up),
                   schedulable=m.schedulable or (n in before.machines and before.machines[n].schedulable))
        for n, m in after.machines.items()
    }  # fmt: skip
    gone = [n for n in sorted(before.allocs) if n not in after.allocs]
    s = before.with_(machines=FMap({**before.machines, **up}), tasks=after.tasks, jobs=after.jobs,
                     allocs=before.allocs.edit({}, gone))  # fmt: skip
    out: list[Change] = []
    for name, a in sorted(after.allocs.items()):
        if name in before.allocs:
            continue
        nxt = alloc_create(s, a)
        out.append(Change(Step("alloc_create", (a,)), None if nxt is not None else
                          f"alloc {name} on {a.machine} ({a.resources}) is no spec alloc_create: the machine is not up and schedulable, "
                          f"another alloc of its set is there, or {a.resources} does not fit beside {s.machine_reserved(a.machine)}"))  # fmt: skip
        s = nxt or s
    back = s.with_(allocs=FMap({**s.allocs, **{n: before.allocs[n] for n in gone}}))
    for name in gone:
        nxt = alloc_delete(back, name)
        out.append(Change(Step("alloc_delete", (name,)), None if nxt is not None else
                          f"alloc {name} was deleted though job(s) naming its set remain"))  # fmt: skip
        back = nxt or back
    return out


def _down(s: CellState, after: CellState, name: str) -> Change:
    """machine_down: the machine was up, and none of its tasks runs there any more."""
    step = Step("machine_down", (name,))
    if machine_down(s, name) is None:
        return Change(step, f"{name} went down but was not up")
    running = after.running_on(name)
    if running:
        return Change(step, f"{name} is down but {running[0].id} is still RUNNING there (the spec loses it)")
    return Change(step)


def reservation_changes(before: CellState, after: CellState, replaced: frozenset[TaskId] = frozenset()) -> list[Change]:
    """A `reserve` step for each task RUNNING in one placement in both polls whose reservation
    changed; `replaced` names tasks placed again between the polls (their reservation starts
    over at the request, which is the schedule's doing, not a reserve)."""
    out: list[Change] = []
    for tid, t in sorted(after.tasks.items(), key=lambda kv: str(kv[0])):
        old = before.tasks.get(tid)
        if old is None or tid in replaced or t.state is not TaskState.RUNNING or old.state is not TaskState.RUNNING:
            continue
        if old.machine != t.machine or old.request != t.request or old.reserved == t.reserved:
            continue
        step = Step("reserve", (tid, t.reserved))
        if reserve(_hybrid(before, after, tid.job, tid.index), tid, t.reserved) is None:
            out.append(Change(step, f"{tid}: reservation {old.reserved} -> {t.reserved} on {t.machine} is no spec reserve "
                                    f"(it must stay within the request {t.request} and the machine's capacity)"))
        else:
            out.append(Change(step))
    return out
