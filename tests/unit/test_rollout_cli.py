"""`job run`, `job plan`: what they print of a new version, and how they follow its rollout (sleep injected)."""

from __future__ import annotations

from reference.cli.rollout import follow_rollout, plan_text

PLAN = {"replaced": [0, 1], "in_place": [], "added": [2], "removed": []}


def answer(**kw):
    return {"job": "demo/web", "version": 3, "unchanged": False, "created": False, "dry_run": False,
            "changed": ["command", "task_count"], "plan": PLAN, "max_unavailable": 1,
            "file": {"command": ["sleep", "2"], "task_count": 3}, **kw}  # fmt: skip


def test_plan_text_shows_each_field_old_and_new_and_each_task():
    text = plan_text(answer(), {"command": ["sleep", "1"], "task_count": 2})
    assert text.splitlines() == [
        "demo/web: version 2 -> 3",
        "  ~ command: ['sleep', '1'] -> ['sleep', '2']",
        "  ~ task_count: 2 -> 3",
        "  replaced (rolling): task(s) 0, 1",
        "  added: task(s) 2",
        "  at most 1 task(s) down at once",
    ]
    assert plan_text(answer(unchanged=True, version=2), None) == "demo/web: unchanged (version 2)"
    assert "(dry run: nothing written)" in plan_text(answer(dry_run=True), None)


def rollouts(*states):
    reads = iter([{"rollout": r} for r in states])
    return lambda: next(reads)


def test_follow_rollout_until_complete_saying_each_change():
    said, slept = [], []
    read = rollouts(
        {"state": "rolling", "version": 3, "stale": [0, 1], "down": [0]},
        {"state": "rolling", "version": 3, "stale": [0, 1], "down": [0]},  # unchanged: not said again
        {"state": "rolling", "version": 3, "stale": [1], "down": [1]},
        {"state": "complete", "version": 3, "stale": [], "down": [1]},  # the last one not up yet
        {"state": "complete", "version": 3, "stale": [], "down": []},
    )
    assert follow_rollout(read, said.append, 60, sleep=slept.append, clock=lambda: 0.0) == "complete"
    assert len(said) == 4 and len(slept) == 4
    assert said[0] == "rollout of version 3: rolling, 2 to replace, 1 down"


def test_follow_rollout_stops_with_the_reason_or_times_out():
    said = []
    stopped = {"state": "stopped", "version": 4, "stale": [1, 2], "down": [0], "reason": "task 0 of version 4 fails (exit 127)"}
    assert follow_rollout(rollouts(stopped), said.append, 60, sleep=lambda s: None, clock=lambda: 0.0) == "stopped"
    assert said[-1].endswith("task 0 of version 4 fails (exit 127)")
    clock = iter([0.0, 0.0, 100.0])
    rolling = {"state": "rolling", "version": 4, "stale": [1], "down": []}
    assert follow_rollout(rollouts(rolling, rolling), said.append, 60, sleep=lambda s: None, clock=lambda: next(clock)) == "timeout"


def test_plan_text_says_where_a_dry_run_would_put_each_task():
    where = [
        {"index": 0, "task": "demo/web/0#1", "was_on": "m1", "machine": "m2", "reason": ""},
        {"index": 1, "task": "demo/web/1#1", "was_on": "m2", "machine": None, "reason": "0 of 2 machines fit"},
        {"index": 2, "task": "demo/web/2#0", "was_on": None, "machine": "m0", "reason": ""},
    ]
    lines = plan_text(answer(dry_run=True, placements=where), None).splitlines()
    assert lines[-4:] == [
        "  where they would go:",
        "    task 0: m1 -> m2",
        "    task 1: m2 -> waits: 0 of 2 machines fit",
        "    task 2: (added) -> m0",
    ]
    new = plan_text(answer(created=True, version=0, plan={**PLAN, "replaced": []}, placements=where[2:]), None)
    assert new.splitlines() == ["demo/web: new job, 1 task(s) to start", "  where they would go:", "    task 2: (added) -> m0"]
    assert "where" not in plan_text(answer(), None)  # not a dry run: no placements


def test_plan_text_says_when_the_autoscalers_count_is_kept():
    assert plan_text(answer(unchanged=True, version=2, task_count_kept=5), None) == (
        "demo/web: unchanged (version 2; task_count 5 kept, the autoscaler's)"
    )
    assert "task_count 5 kept" in plan_text(answer(task_count_kept=5), None)
