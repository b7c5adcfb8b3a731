"""The master's restart back-off: its arithmetic (a table a reader can check by hand) and the
leader's `restart_dead` waiting it out, counting failures across incarnations and resetting
after a healthy run."""

from __future__ import annotations

import pytest

from reference.master import backoff
from reference.master.cell import Cell, Draft, TaskInfo
from reference.master.leader import restart_dead
from spec.fmap import FMap
from spec.model import CellState, DeathCause, Job, Resources, RestartPolicy, Task, TaskId, TaskState

REQ = Resources.of(cpu=100, ram=100)


@pytest.mark.parametrize(
    ("failures", "delay"),
    [
        (0, 0.0),  # no failure: no wait
        (1, 0.0),  # the first (a lost machine, a crash after a healthy run): restarted at once
        (2, 1.0),  # the second in a row: INITIAL_S
        (3, 2.0),  # 1 * 2
        (4, 4.0),  # 1 * 2 * 2
        (7, 32.0),  # 1 * 2**5
        (8, 60.0),  # 64 > CAP_S
        (1000, 60.0),  # the exponent is capped before it can overflow
    ],
)
def test_the_delay_doubles_from_1_s_to_its_cap_after_a_first_failure(failures: int, delay: float) -> None:
    assert backoff.delay(failures) == delay


@pytest.mark.parametrize(
    ("previous", "ran_for", "failures"),
    [
        (0, 0.0, 1),  # a first failure; 0 s: its process never started
        (3, 0.0, 4),  # one more in a row
        (3, 59.9, 4),  # short of RESET_AFTER_S: still in a row
        (3, 60.0, 1),  # a healthy run: the count starts again
        (-1, 0.0, 1),  # a count below 0 (a record not written by this code) counts as none
    ],
)
def test_failures_count_in_a_row_until_a_healthy_run(previous: int, ran_for: float, failures: int) -> None:
    assert backoff.failures_after(previous, ran_for) == failures


@pytest.mark.parametrize(
    ("previous", "started_at", "died_at", "expected"),
    [
        (0, 0.0, 100.0, (1, 100.0)),  # never started: failure 1, tried again at once
        (1, 0.0, 100.0, (2, 101.0)),  # never started again: failure 2, 1 s later
        (2, 95.0, 100.0, (3, 102.0)),  # ran 5 s: failure 3, 2 s later
        (5, 30.0, 100.0, (1, 100.0)),  # ran 70 s: healthy, back to failure 1
    ],
)
def test_retry_at(previous: int, started_at: float, died_at: float, expected: tuple[int, float]) -> None:
    assert backoff.retry_at(previous, started_at, died_at) == expected


@pytest.mark.parametrize(
    ("window", "restarts"),
    [(0.0, 1), (0.9, 1), (1.0, 2), (2.9, 2), (3.0, 3), (20.0, 5), (31.0, 6), (60.0, 6), (63.0, 7), (123.0, 8)],
)
def test_most_restarts_sums_the_delays(window: float, restarts: int) -> None:
    # New incarnations at 0, 1, 3 (1+2), 7, 15, 31, 63, 123 (63+60) s after the first death.
    assert backoff.most_restarts(window) == restarts


def dead_cell(info: TaskInfo, cause: DeathCause = DeathCause.FAILED) -> tuple[Cell, TaskId]:
    job = Job("u", "j", 100, 1, REQ, restart_policy=RestartPolicy.ON_FAILURE)
    dead = Task(TaskId(job.key, 0, 2), TaskState.DEAD, None, 100, REQ, cause)
    state = CellState(jobs=FMap({job.key: job}), tasks=FMap({dead.id: dead}))
    return Cell(state, tasks={dead.id: info}), dead.id


def run_pass(cell: Cell, now: float) -> tuple[Cell, int]:
    d = Draft(cell, now)
    n = restart_dead(d, set(cell.state.tasks), lambda want: want)
    return Cell(d.state, tasks=dict(d.tasks)), n


def test_a_death_is_restarted_only_after_its_back_off() -> None:
    # Placed at 100, died failing at 102 (2 s run), after 3 failures in a row before it.
    history = (("RUNNING", 100.0, "scheduled"), ("DEAD", 102.0, "spawn: no program 'x'"))
    ended = ((1, 102.0, "spawn_failed", "could not start its process: spawn: no program 'x'"),)
    cell, tid = dead_cell(TaskInfo(failures=3, history=history, events=ended))
    cell, n = run_pass(cell, 102.5)
    info = cell.task_info(tid)
    # failure 4: 4 s after its death
    assert n == 0 and (info.failures, info.retry_at) == (4, 106.0)
    assert info.last_exit == "spawn: no program 'x'"  # its fail step's reason
    assert info.events[-1][2:] == ("backoff", "next incarnation in 4s (failure 4 in a row)")
    cell, n = run_pass(cell, 105.9)
    assert n == 0 and cell.task_info(tid).retry_at == 106.0  # written once, not moved
    cell, n = run_pass(cell, 106.0)
    newer = TaskId(tid.job, 0, 3)
    assert n == 1 and cell.state.tasks[newer].state is TaskState.PENDING and tid not in cell.state.tasks
    assert cell.task_info(newer).failures == 4 and cell.task_info(newer).retry_at == 0.0
    # Its restart event names how the dead one ended, not the wait.
    assert "spawn: no program" in cell.task_info(newer).events[-1][3]


def test_a_healthy_run_resets_the_count() -> None:
    history = (("RUNNING", 100.0, "scheduled"), ("DEAD", 400.0, "lost"))
    cell, tid = dead_cell(TaskInfo(failures=6, history=history), DeathCause.LOST)
    # Ran 300 s: failure 1 again, restarted at once, with no back-off event.
    cell, n = run_pass(cell, 400.0)
    newer = TaskId(tid.job, 0, 3)
    assert n == 1 and cell.task_info(newer).failures == 1
    assert [e[2] for e in cell.task_info(newer).events] == ["restarted"]


def test_a_rate_limited_first_failure_is_counted_once() -> None:
    # The Fauxmaster's clock starts at 0: a death at 0 with no wait is still marked counted.
    cell, tid = dead_cell(TaskInfo(history=(("DEAD", 0.0, "exit 3"),)))
    for _ in range(3):
        d = Draft(cell, 0.0)
        assert restart_dead(d, set(cell.state.tasks), lambda want: 0) == 0  # no token
        cell = Cell(d.state, tasks=dict(d.tasks))
    assert cell.task_info(tid).failures == 1 and cell.task_info(tid).retry_at > 0


def test_a_task_that_stays_dead_gets_no_back_off() -> None:
    cell, tid = dead_cell(TaskInfo(), DeathCause.KILLED)
    cell, n = run_pass(cell, 10.0)
    assert n == 0 and cell.task_info(tid).retry_at == 0.0 and cell.task_info(tid).events == ()
