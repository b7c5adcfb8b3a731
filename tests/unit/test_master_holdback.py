"""The hold-back rule: a new process of a task index waits until every other one is gone from up machines."""

from __future__ import annotations

from typing import Any

import pytest

from reference.master.cell import Cell
from reference.master.metrics import MasterMetrics
from reference.master.reports import (
    Hold,
    first_of_its_index,
    hold_back,
    live_by_index,
    parse_borglet_task_id,
)


def spec(task_id: str) -> dict[str, Any]:
    job, index, inc = parse_borglet_task_id(task_id) or ("", 0, 0)
    return {"task_id": task_id, "job": job, "index": index, "incarnation": inc}


def test_parse_borglet_task_id() -> None:
    assert parse_borglet_task_id("bob/c8-1/2#1@1") == ("bob/c8-1", 2, 1)
    assert parse_borglet_task_id("a/b/0#12@0") == ("a/b", 0, 12)
    assert parse_borglet_task_id("t#0") is None  # not a cell task id
    assert parse_borglet_task_id("a/b/x#1@0") is None


def test_old_incarnation_live_on_same_machine_holds_the_new_one() -> None:
    live = live_by_index({"m1": {"bob/j/2#1@1": "RUNNING"}}, ["m1"])
    keep, held = hold_back([spec("bob/j/2#2@1")], live, set())
    assert keep == []
    assert held == [Hold("bob/j/2#2@1", "bob/j/2#1@1", "m1")]
    assert held[0].describe() == "waiting for incarnation 1 to stop"


def test_old_incarnation_live_on_another_machine_holds_the_new_one() -> None:
    live = live_by_index({"m1": {"bob/j/4#0@0": "STARTING"}, "m2": {}}, ["m1", "m2"])
    keep, held = hold_back([spec("bob/j/4#1@0")], live, set())
    assert keep == [] and [h.machine for h in held] == ["m1"]


def test_other_placement_of_the_same_incarnation_also_holds() -> None:
    live = live_by_index({"m1": {"bob/j/0#3@1": "RUNNING"}}, ["m1"])
    _, held = hold_back([spec("bob/j/0#3@2")], live, set())
    assert held and held[0].describe() == "waiting for incarnation 3 to stop"


def test_ended_old_incarnation_releases_the_new_one() -> None:
    for state in ("FINISHED", "FAILED", "KILLED"):
        live = live_by_index({"m1": {"bob/j/2#1@1": state}}, ["m1"])
        keep, held = hold_back([spec("bob/j/2#2@1")], live, set())
        assert held == [] and [d["task_id"] for d in keep] == ["bob/j/2#2@1"], state


def test_forgotten_old_incarnation_releases_the_new_one() -> None:
    live = live_by_index({"m1": {}}, ["m1"])
    keep, held = hold_back([spec("bob/j/2#2@1")], live, set())
    assert held == [] and len(keep) == 1


def test_a_down_machine_holds_nothing_back() -> None:
    # Its tasks were declared lost: the lost window excuses the overlap.
    live = live_by_index({"m1": {"bob/j/2#1@0": "RUNNING"}, "m2": {}}, ["m2"])
    keep, held = hold_back([spec("bob/j/2#2@0")], live, set())
    assert held == [] and len(keep) == 1


def test_a_released_task_is_never_taken_back() -> None:
    # m1 came back up still running the old one; the new one already runs on m2 and must
    # not be killed by dropping it from m2's desired set.
    live = live_by_index({"m1": {"bob/j/2#1@0": "RUNNING"}, "m2": {"bob/j/2#2@0": "RUNNING"}}, ["m1", "m2"])
    keep, held = hold_back([spec("bob/j/2#2@0")], live, {"bob/j/2#2@0"})
    assert held == [] and len(keep) == 1


def test_other_indices_and_jobs_are_not_held() -> None:
    live = live_by_index({"m1": {"bob/j/2#1@0": "RUNNING"}}, ["m1"])
    desired = [spec("bob/j/3#0@0"), spec("bob/k/2#0@0"), spec("bob/j/2#2@0")]
    keep, held = hold_back(desired, live, set())
    assert [d["task_id"] for d in keep] == ["bob/j/3#0@0", "bob/k/2#0@0"]
    assert [h.task_id for h in held] == ["bob/j/2#2@0"]


def test_the_task_itself_does_not_hold_itself() -> None:
    live = live_by_index({"m1": {"bob/j/2#2@0": "RUNNING"}}, ["m1"])
    keep, held = hold_back([spec("bob/j/2#2@0")], live, set())
    assert held == [] and len(keep) == 1


def test_an_unreported_up_machine_holds_new_tasks_but_not_released_ones() -> None:
    # A new leader has not heard from m2 yet: the old incarnation may still run there.
    live = live_by_index({"m1": {}}, ["m1", "m2"])
    desired = [spec("bob/j/0#1@0"), spec("bob/j/1#0@0")]
    keep, held = hold_back(desired, live, {"bob/j/1#0@0"}, ["m2"])
    assert [d["task_id"] for d in keep] == ["bob/j/1#0@0"]
    assert held == [Hold("bob/j/0#1@0", "", "m2")]
    assert held[0].describe() == "waiting for machine m2 to report"


def test_an_unreported_machine_does_not_hold_an_index_first_process() -> None:
    # bob/j/5#0@1 is index 5's first incarnation at its first placement: no machine can run
    # another process of it. #0@2 (placed again) and #1@1 (an incarnation before it) may have one.
    live = live_by_index({"m1": {}}, ["m1", "m2"])
    desired = [spec("bob/j/5#0@1"), spec("bob/j/6#0@2"), spec("bob/j/7#1@1")]
    keep, held = hold_back(desired, live, set(), ["m2"])
    assert [d["task_id"] for d in keep] == ["bob/j/5#0@1"]
    assert [h.task_id for h in held] == ["bob/j/6#0@2", "bob/j/7#1@1"]


@pytest.mark.parametrize(
    ("task_id", "first"),
    [("a/b/0#0@1", True), ("a/b/0#0@0", True), ("a/b/0#0@2", False), ("a/b/0#1@1", False), ("junk", False)],
)
def test_first_of_its_index(task_id: str, first: bool) -> None:
    assert first_of_its_index(task_id) is first


def test_holds_are_counted_apart_from_polls() -> None:
    metrics = MasterMetrics(lambda: Cell())
    metrics.on_poll("sent")
    metrics.on_poll("hold")
    metrics.on_poll("hold")
    text = metrics.render().decode()
    assert "minborg_incarnation_holds_total 2.0" in text
    assert "minborg_borglet_polls_total 1.0" in text


# --- Holds as tables: what a hold says, which processes are live, what is held ---------------------


@pytest.mark.parametrize(
    ("hold", "text"),
    [
        (Hold("alice/web/0#1@0", "", "m3"), "waiting for machine m3 to report"),
        (Hold("alice/web/0#1@0", "alice/web/0#0@2", "m1"), "waiting for incarnation 0 to stop"),
        (Hold("alice/web/0#1@0", "foreign-id", "m1"), "waiting for foreign-id to stop"),
    ],
)
def test_hold_describe(hold, text):
    assert hold.describe() == text


def test_live_by_index_counts_live_parseable_ids_of_up_machines_only():
    reported = {
        "m1": {"alice/web/0#0@0": "RUNNING", "alice/web/1#0@0": "FINISHED", "junk": "RUNNING"},
        "m2": {"alice/web/0#1@0": "STARTING"},
        "m3": {"alice/web/1#1@0": "RUNNING"},  # m3 is down
    }
    assert live_by_index(reported, ["m2", "m1"]) == {
        ("alice/web", 0): [("m1", "alice/web/0#0@0"), ("m2", "alice/web/0#1@0")],
    }


def _d(task_id: str) -> dict:
    job, index, _ = parse_borglet_task_id(task_id)  # type: ignore[misc]
    return {"task_id": task_id, "job": job, "index": index}


NEW = "alice/web/0#1@0"


OLD_LIVE = {("alice/web", 0): [("m1", "alice/web/0#0@0")]}


@pytest.mark.parametrize(
    ("live", "released", "unreported", "kept", "held"),
    [
        ({}, set(), None, [NEW], []),  # nothing else live, every machine reported: send it
        ({}, set(), [], [NEW], []),  # an empty list of unreported machines is the same
        ({("alice/web", 0): [("m2", NEW)]}, set(), None, [NEW], []),  # only itself is live
        (OLD_LIVE, set(), None, [], [Hold(NEW, "alice/web/0#0@0", "m1")]),  # wait for the old one
        (OLD_LIVE, {NEW}, None, [NEW], []),  # already released: never taken back
        ({}, set(), ["m9", "m4"], [], [Hold(NEW, "", "m4")]),  # first unreported machine, sorted
        ({}, {NEW}, ["m4"], [NEW], []),
        (OLD_LIVE, set(), ["m4"], [], [Hold(NEW, "alice/web/0#0@0", "m1")]),  # the live one first
    ],
)
def test_hold_back(live, released, unreported, kept, held):
    keep, holds = hold_back([_d(NEW)], live, released, unreported)
    assert [d["task_id"] for d in keep] == kept
    assert holds == held


def test_a_task_sent_but_not_yet_reported_holds_a_new_incarnation_elsewhere() -> None:
    """The leader sent machine m1 a sync with incarnation 1; before m1's reply is in, the job is
    updated and incarnation 2 placed on m2: m1 may start incarnation 1 at any moment, so
    incarnation 2 waits (a conformance run saw both run for 0.5 s when it did not)."""
    from reference.master.reports import with_sent

    reported = {"m1": {}, "m2": {}}
    sent = {"m1": frozenset({"bob/j/2#1@1"}), "m2": frozenset()}
    known = {m: with_sent(r, sent[m]) for m, r in reported.items()}
    keep, held = hold_back([spec("bob/j/2#2@1")], live_by_index(known, ["m1", "m2"]), set())
    assert keep == [] and held == [Hold("bob/j/2#2@1", "bob/j/2#1@1", "m1")]
    # once m1 reports it ended, incarnation 2 goes
    ended = {"m1": with_sent({"bob/j/2#1@1": "KILLED"}, sent["m1"]), "m2": {}}
    keep, held = hold_back([spec("bob/j/2#2@1")], live_by_index(ended, ["m1", "m2"]), set())
    assert held == [] and len(keep) == 1


def test_with_sent_keeps_what_the_report_says_and_adds_only_what_it_lacks() -> None:
    from reference.master.reports import with_sent

    report = {"a/b/0#0@1": "RUNNING", "a/b/1#0@1": "FINISHED"}
    assert with_sent(report, ()) is report
    assert with_sent(report, {"a/b/1#0@1", "a/b/2#0@1"}) == {**report, "a/b/2#0@1": "QUEUED"}
