"""A crash loop as every reader sees it: the events of a borglet's report (each exit with its
code, no `pid ?`), the BACKOFF view, Sigma's colours, `job submit`'s wait and `task logs`."""

from __future__ import annotations

import pytest

from reference.cli.views import never_started
from reference.cli.watch import StartWatch
from reference.client import Message
from reference.master import backoff, events, ui
from reference.master.cell import TaskInfo
from reference.master.reports import confirmed

RUNNING = TaskInfo(seen=True, borglet_state="RUNNING", pid=41, started_at=10.0, restarts=2)
BACKING_OFF = TaskInfo(seen=True, borglet_state="STARTING", pid=0, started_at=10.0, restarts=2, reason="exit 3",
                       last_exit="exit 3", retry_at=50.0)  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "kinds"),
    [
        # Running, then gone and waiting to restart: one exit.
        (RUNNING, BACKING_OFF, ["exited"]),
        # Backing off, then restarted and running: its exit was told last time; a restart, a start.
        (BACKING_OFF, TaskInfo(seen=True, borglet_state="RUNNING", pid=42, started_at=60.0, restarts=3,
                               last_exit="exit 3"), ["restarted", "started"]),  # fmt: skip
        # Running, then two more restarts and running again: two exits between the reports.
        (RUNNING, TaskInfo(seen=True, borglet_state="RUNNING", pid=43, started_at=70.0, restarts=4,
                           last_exit="exit 3"), ["exited", "restarted", "started"]),  # fmt: skip
        # Backing off, then restarted, ended, and backing off again: one exit, one restart.
        (BACKING_OFF, TaskInfo(seen=True, borglet_state="STARTING", started_at=60.0, restarts=3, reason="exit 3",
                               last_exit="exit 3", retry_at=70.0), ["exited", "restarted", "started"]),  # fmt: skip
    ],
)
def test_every_exit_in_a_report_is_an_event_with_its_code(old: TaskInfo, new: TaskInfo, kinds: list[str]) -> None:
    found = events.from_report(old, new, "m1")
    assert [k for k, _ in found] == kinds
    for kind, detail in found:
        assert "pid ?" not in detail
        if kind == "exited":
            assert detail.startswith("exit code 3")


def test_exits_between_two_reports_are_counted_in_one_event() -> None:
    new = TaskInfo(seen=True, borglet_state="RUNNING", pid=43, started_at=70.0, restarts=4, last_exit="exit 3")
    kind, detail = events.from_report(RUNNING, new, "m1")[0]
    assert (kind, detail) == ("exited", "exit code 3 (2 times since the last report); its borglet restarts it in place")


def test_a_start_whose_process_ended_before_any_report_has_no_pid_question_mark() -> None:
    new = TaskInfo(seen=True, borglet_state="STARTING", started_at=60.0, restarts=3, reason="exit 3", last_exit="exit 3")
    started = [d for k, d in events.from_report(BACKING_OFF, new, "m1") if k == "started"]
    assert started == ["a process on m1, ended before its borglet reported it"]


def test_a_task_waiting_out_its_borglets_back_off_is_backoff_and_not_started() -> None:
    loop = events.crash_loop("RUNNING", BACKING_OFF, now=42.0)
    assert loop is not None and not confirmed(BACKING_OFF) and confirmed(RUNNING)
    assert (loop["by"], loop["last_exit"], loop["failures"], loop["retry_in"]) == ("borglet", "exit 3", 3, 8.0)
    assert loop["text"] == "exit code 3; failure 3, next try in 8s (restart in place)"
    assert events.crash_loop("RUNNING", RUNNING, now=42.0) is None


def test_a_dead_task_waiting_for_its_next_incarnation_is_backoff() -> None:
    info = TaskInfo(failures=4, retry_at=108.0, last_exit="spawn: no program 'x'")
    loop = events.crash_loop("DEAD", info, now=100.0)
    assert loop is not None and loop["kind"] == "spawn_failed"
    assert loop["text"] == "could not start its process: spawn: no program 'x'; failure 4, next try in 8s (new incarnation)"
    # No back-off written (it stays dead, or the leader has not seen it yet): no crash loop.
    assert events.crash_loop("DEAD", TaskInfo(last_exit="exit 3"), now=100.0) is None


def test_a_death_the_leader_has_not_counted_yet_shows_the_back_off_it_will_get() -> None:
    # Incarnation 3 of an index that failed twice: placed at 99, its spawn failed at 99.5.
    history = (("PENDING", 98.0, ""), ("RUNNING", 99.0, ""), ("DEAD", 99.5, "spawn: no program 'x'"))
    info = TaskInfo(failures=2, history=history)
    loop = events.crash_loop("DEAD", info, now=100.0, restarts=True)
    assert loop is not None and (loop["by"], loop["failures"], loop["retry_at"]) == ("master", 3, 101.5)
    assert loop["last_exit"] == "spawn: no program 'x'" and loop["retry_in"] == 1.5
    # What the leader writes when it counts that death is what was shown before it did.
    assert backoff.of_death(info.failures, history, 100.0) == (3, 101.5)
    # A policy that does not restart it: it stays dead, no loop.
    assert events.crash_loop("DEAD", info, now=100.0, restarts=False) is None
    # A first failure, or one after a healthy run (60 s or more), is no loop yet.
    assert events.crash_loop("DEAD", TaskInfo(history=history), now=100.0, restarts=True) is None
    healthy = (("RUNNING", 20.0, ""), ("DEAD", 99.5, "exit 3"))
    assert events.crash_loop("DEAD", TaskInfo(failures=5, history=healthy), now=100.0, restarts=True) is None


def view(state: str, cause: str | None = None, **extra: object) -> dict:
    return {"state": state, "cause": cause, "confirmed": state == "RUNNING", "healthy": None, "crash_loop": None,
            **extra}  # fmt: skip


@pytest.mark.parametrize(
    ("v", "painted"),
    [
        (view("RUNNING"), ("RUNNING", "ok")),
        (view("RUNNING", confirmed=False), ("RUNNING", "warn")),  # placed, not started
        (view("RUNNING", healthy=False), ("RUNNING", "warn")),
        (view("RUNNING", confirmed=False, crash_loop={"text": "exit code 3"}), ("BACKOFF", "bad")),  # never green
        (view("DEAD", "finished"), ("DEAD (finished)", "done")),  # exit 0: not red
        (view("DEAD", "killed"), ("DEAD (killed)", "done")),  # killed, or scaled down: not red
        (view("DEAD", "failed"), ("DEAD (failed)", "bad")),
        (view("DEAD", "lost"), ("DEAD (lost)", "bad")),
        (view("DEAD", "failed", crash_loop={"text": "..."}), ("BACKOFF", "bad")),
        (view("PENDING"), ("PENDING", "warn")),
    ],
)
def test_sigma_paints_outcomes(v: dict, painted: tuple[str, str]) -> None:
    assert ui.outcome(v) == painted


def task(state: str, **extra: object) -> dict:
    return {"job": "u/j", "index": 0, "incarnation": 0, "state": state, "machine": "m1", "events": [], **extra}


def test_job_submit_counts_a_start_only_once_it_held() -> None:
    now = [100.0]
    w = StartWatch(1, lambda _: None, steady_s=2.0, clock=lambda: now[0])
    w.take(Message("MODIFIED", 8, {"task": task("RUNNING", confirmed=True, pid=7)}))
    assert not w.done and w.steady_at() == 102.0
    now[0] = 101.0
    loop = {"kind": "exited", "text": "exit code 3; failure 1, next try in 0s (restart in place)"}
    w.take(Message("MODIFIED", 9, {"task": task("RUNNING", confirmed=False, crash_loop=loop)}))
    assert w.done and w.failed == f"task 0 of u/j (incarnation 0) is in a crash loop: {loop['text']}"


def test_job_submit_is_done_when_the_start_held() -> None:
    now = [100.0]
    w = StartWatch(1, lambda _: None, steady_s=2.0, clock=lambda: now[0])
    w.take(Message("MODIFIED", 8, {"task": task("RUNNING", confirmed=True, pid=7)}))
    now[0] = 102.0
    assert w.done and w.failed is None


def test_job_submit_fails_on_a_task_restarted_in_place_before_it_was_seen_down() -> None:
    w = StartWatch(1, lambda _: None, steady_s=2.0)
    w.take(Message("MODIFIED", 8, {"task": task("RUNNING", confirmed=True, pid=7, restarts=2, last_exit="exit 3")}))
    assert w.failed == "task 0 of u/j (incarnation 0) failed: its process ended (exit 3), restarted in place 2 time(s)"


def test_task_logs_says_when_a_task_never_started() -> None:
    loop = {"text": "could not start its process: spawn: no program 'x'; failure 2, next try in 1s (new incarnation)"}
    never = task("DEAD", incarnation=3, crash_loop=loop, events=[{"kind": "spawn_failed", "detail": "..."}])
    assert never_started(never) == f"task u/j/0#3 never started, so it has no logs: {loop['text']}"
    ran = task("DEAD", events=[{"kind": "started", "detail": "pid 7 on m1"}, {"kind": "exited", "detail": "exit code 3"}])
    assert never_started(ran) is None


def test_a_loop_of_losses_is_told_by_its_loss_not_an_older_exit() -> None:
    lost = (1, 100.0, "lost", "machine m1 down (was on m1)")
    info = TaskInfo(failures=2, retry_at=101.0, last_exit="exit 3", events=(lost,))
    loop = events.crash_loop("DEAD", info, now=100.0)
    assert loop is not None and (loop["kind"], loop["reason"]) == ("lost", "machine m1 down (was on m1)")


def test_the_next_try_of_a_looping_index_is_still_the_loop_until_it_runs() -> None:
    trying = TaskInfo(failures=3, last_exit="exit 3", seen=True, borglet_state="QUEUED")
    loop = events.crash_loop("RUNNING", trying, now=100.0)
    assert loop is not None and loop["by"] == "retry" and loop["retry_in"] is None
    assert loop["text"] == "exit code 3; failure 3, trying again now (new incarnation)"
    assert ui.outcome(view("RUNNING", confirmed=False, crash_loop=loop, status="RUNNING")) == ("RUNNING", "bad")
    # Once its process runs, it is out of the loop (the count resets when it dies after 60 s).
    running = TaskInfo(failures=3, last_exit="exit 3", seen=True, borglet_state="RUNNING", pid=9)
    assert events.crash_loop("RUNNING", running, now=100.0) is None
    # A first failure's retry is no loop.
    assert events.crash_loop("PENDING", TaskInfo(failures=1, last_exit="exit 3"), now=100.0) is None
