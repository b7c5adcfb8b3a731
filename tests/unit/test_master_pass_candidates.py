"""The leader's pass acts on a work set instead of scanning every task: over random cells and
changes, the work set equals the full scan, and restarts and rolls chosen from it are the
ones a scan of every task chose."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from reference.master import rollout
from reference.master.cell import Cell, Draft
from reference.master.leader import Term, TokenBucket, pass_has_work, pass_work
from spec.actions import restart_allowed
from spec.fmap import FMap
from spec.model import (
    CellState,
    DeathCause,
    Job,
    Machine,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)

REQS = (Resources.of(cpu=100, ram=100), Resources.of(cpu=50, ram=100))


def random_cell(rng: random.Random) -> CellState:
    jobs = {}
    for i in range(4):
        if rng.random() < 0.75:  # the others were killed: their tasks stay DEAD
            job = Job("u", f"j{i}", 100, rng.randrange(4), rng.choice(REQS),
                      restart_policy=rng.choice(list(RestartPolicy)))  # fmt: skip
            jobs[job.key] = job
    tasks = {}
    for _ in range(rng.randrange(12)):
        tid = TaskId(f"u/j{rng.randrange(4)}", rng.randrange(3), rng.randrange(3))
        state = rng.choice(list(TaskState))
        tasks[tid] = Task(
            tid,
            state,
            machine="m0" if state is TaskState.RUNNING else None,
            priority=100,
            request=rng.choice(REQS),
            cause=rng.choice(list(DeathCause)) if state is TaskState.DEAD else None,
        )
    m = Machine("m0", Resources.of(cpu=10**6, ram=10**9))
    return CellState(machines=FMap({"m0": m}), jobs=FMap(jobs), tasks=FMap(tasks))


def scan_work(state: CellState) -> set[TaskId]:
    """The rule spelled out over every task, as the pass checked it before the work set."""
    out = set()
    for tid, t in state.tasks.items():
        job = state.jobs.get(tid.job)
        newest = max(o.incarnation for o in state.tasks if (o.job, o.index) == (tid.job, tid.index))
        if t.state is TaskState.PENDING:
            out.add(tid)
        elif job is None:
            continue
        elif t.state is TaskState.RUNNING and t.request != job.request:
            out.add(tid)
        elif (
            t.state is TaskState.DEAD
            and newest == tid.incarnation
            and tid.index < job.task_count
            and restart_allowed(job.restart_policy, t.cause)
        ):
            out.add(tid)
    return out


class Scanning:
    """The pass's restarts and rolls as they were: a scan of every task for each."""

    def __init__(self, rate: float) -> None:
        self.restarts, self.rolls = TokenBucket(rate), TokenBucket(rate)

    def restart_dead(self, d: Draft) -> None:
        latest: dict[tuple[str, int], int] = {}
        for tid in d.state.tasks:
            k = (tid.job, tid.index)
            latest[k] = max(latest.get(k, -1), tid.incarnation)
        candidates = []
        for tid, t in d.state.tasks.items():
            job = d.state.jobs.get(tid.job)
            if (
                t.state is TaskState.DEAD
                and job is not None
                and latest[(tid.job, tid.index)] == tid.incarnation
                and tid.index < job.task_count
                and restart_allowed(job.restart_policy, t.cause)
            ):
                candidates.append(tid)
        for tid in sorted(candidates, key=str)[: self.restarts.take(len(candidates))]:
            d.step("restart", tid)

    def roll(self, d: Draft) -> None:
        # Which stale tasks a rollout replaces is master/rollout.py's; here it sees every task.
        rollout.roll(d, set(d.state.tasks), self.rolls.take, said_ready)


class FromWork:
    """Just what Term's restarts and rolls use of it."""

    def __init__(self, rate: float) -> None:
        self.restarts, self.rolls = TokenBucket(rate), TokenBucket(rate)
        self.poller = SimpleNamespace(ready=said_ready)  # the borglets' word, the same on both sides


def said_ready(machine: str | None, borglet_id: str) -> bool | None:
    """A word for some machines and tasks, none for others (the estimate then)."""
    if machine is None or machine.endswith("1"):
        return None
    return "/0#" in borglet_id or "/2#" in borglet_id


@pytest.mark.parametrize("seed", range(300))
def test_the_work_set_equals_the_scan(seed: int) -> None:
    state = random_cell(random.Random(seed))
    assert pass_work(state) == scan_work(state)
    assert pass_has_work(state) == bool(scan_work(state))


@pytest.mark.parametrize("rate", [1.0, 3.0, 100.0])
@pytest.mark.parametrize("seed", range(100))
def test_restarts_and_rolls_from_the_work_set_are_the_scans(seed: int, rate: float) -> None:
    state = random_cell(random.Random(seed))
    base = Cell(state, work=frozenset(pass_work(state)))
    old, new = Draft(base, 0.0), Draft(base, 0.0)
    scanning, term = Scanning(rate), FromWork(rate)
    scanning.restart_dead(old)
    scanning.roll(old)
    candidates = set(base.work or ())
    Term._restart_dead(term, new, candidates)  # type: ignore[arg-type]
    Term._roll(term, new, candidates | new.touched)  # type: ignore[arg-type]
    assert new.state == old.state
    # From the acting set (the work set less the queue) the same: the PENDING tasks of the
    # work set are none of a restart's or a roll's.
    acting = {t for t in base.work or () if state.tasks[t].state is not TaskState.PENDING}
    third, fresh = Draft(base, 0.0), FromWork(rate)
    Term._restart_dead(fresh, third, set(acting))  # type: ignore[arg-type]
    Term._roll(fresh, third, acting | third.touched)  # type: ignore[arg-type]
    assert third.state == old.state


def test_a_draft_knows_the_tasks_its_steps_touched() -> None:
    job = Job("u", "j", 100, 2, REQS[0], restart_policy=RestartPolicy.ALWAYS)
    dead = Task(TaskId(job.key, 0), TaskState.DEAD, None, 100, REQS[0], DeathCause.FAILED)
    state = CellState(jobs=FMap({job.key: job}), tasks=FMap({dead.id: dead}))
    d = Draft(Cell(state), 0.0)
    assert d.step("restart", dead.id)
    # The new incarnation, and the DEAD one it replaced in the state.
    assert d.touched == {TaskId(job.key, 0, 1), dead.id}
    assert d.step("machine_add", Machine("m0", Resources.of(cpu=1000, ram=1000)))
    assert d.touched == {TaskId(job.key, 0, 1), dead.id}
