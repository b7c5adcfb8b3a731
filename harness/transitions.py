"""Explains each observed task change as a short sequence of spec actions enabled in the previous observation.

Polling sees the cell at moments, not at every step, so a task may move several steps
between two polls (RUNNING -> DEAD -> PENDING -> RUNNING on another machine is a failure, a
restart and a schedule). For each task index whose newest incarnation changed, a bounded
breadth-first search runs the spec's own actions from the previous observation until the
index looks as it does now; no such path means the cell made a move the spec forbids.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from spec.actions import ACTIONS, EvictReason, Step
from spec.model import CellState, FMap, Task, TaskState

#: Task steps a path may hold (a slow step, such as a failover, can hide submit, schedule,
#: lost, restart and schedule behind one poll); steps of the environment (job and machine changes seen in
#: the new observation) are free, since each is taken at most once.
MAX_TASK_STEPS = 4
ENV_ACTIONS = frozenset({"submit", "update", "kill_job", "machine_add", "machine_remove", "machine_down", "machine_up"})


@dataclass(frozen=True)
class Verdict:
    job: str
    index: int
    before: Task | None
    after: Task
    path: tuple[Step, ...] | None  # None: no spec path explains the change

    @property
    def ok(self) -> bool:
        return self.path is not None

    def describe(self) -> str:
        b = "absent" if self.before is None else _fmt(self.before)
        if self.path is None:
            return f"{self.job}/{self.index}: {b} -> {_fmt(self.after)} has no spec path of <= {MAX_TASK_STEPS} task steps"
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


def _hybrid(before: CellState, after: CellState, job: str, index: int) -> CellState:
    """The previous observation, with every other index's tasks as they are now: their own
    moves are judged on their own, and they decide what room this index's task had."""
    tasks = {tid: t for tid, t in after.tasks.items() if (tid.job, tid.index) != (job, index)}
    tasks.update({tid: t for tid, t in before.tasks.items() if (tid.job, tid.index) == (job, index)})
    return before.with_(tasks=FMap(tasks))


def _env_steps(s: CellState, after: CellState, job: str) -> Iterator[Step]:
    cur, new = s.jobs.get(job), after.jobs.get(job)
    if cur is not None and new is None:
        yield Step("kill_job", (job,))
    if new is not None and cur is None:
        yield Step("submit", (new,))
    if new is not None and cur is not None and (cur.task_count, cur.request) != (new.task_count, new.request):
        yield Step("update", (job, new.task_count, new.request))
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
    for name in s.machines:
        if name not in after.machines:
            yield Step("machine_remove", (name,))


def _task_steps(s: CellState, job: str, index: int) -> Iterator[Step]:
    t = s.latest(job, index)
    if t is None:
        return
    if t.state is TaskState.PENDING:
        for m in s.machines:
            yield Step("schedule", (t.id, m))
        yield Step("kill", (t.id,))
    elif t.state is TaskState.RUNNING:
        for name in ("finish", "fail", "lost", "kill", "roll"):
            yield Step(name, (t.id,))
        for reason in (EvictReason.MAINTENANCE, EvictReason.RECLAMATION):
            yield Step("evict", (t.id, reason, None))
    else:
        yield Step("restart", (t.id,))


def explain(before: CellState, after: CellState, job: str, index: int) -> Verdict:
    goal = _looks(after.latest(job, index))
    start = _hybrid(before, after, job, index)
    prev = before.latest(job, index)
    queue: deque[tuple[CellState, tuple[Step, ...], int]] = deque([(start, (), 0)])
    seen = {start}
    while queue:
        s, path, n = queue.popleft()
        if path and _looks(s.latest(job, index)) == goal:
            return Verdict(job, index, prev, after.latest(job, index), path)  # type: ignore[arg-type]
        steps = [(st, False) for st in _env_steps(s, after, job)]
        if n < MAX_TASK_STEPS:
            steps += [(st, True) for st in _task_steps(s, job, index)]
        for step, counts in steps:
            nxt = ACTIONS[step.action](s, *step.args)
            if nxt is None or nxt in seen:
                continue
            seen.add(nxt)
            queue.append((nxt, path + (step,), n + counts))
    return Verdict(job, index, prev, after.latest(job, index), None)  # type: ignore[arg-type]


def explain_all(before: CellState, after: CellState) -> list[Verdict]:
    return [explain(before, after, j, i) for j, i in changed_indices(before, after)]
