"""A link shard's book, table by table: what a read, a sync's answer, a new term and the leader's answers do to a machine's record, and what a batch takes from the records."""

from __future__ import annotations

from typing import Any

import pytest

from reference.master import shardbook
from reference.master.borgletreads import Refused
from reference.master.shardbook import Polled

A = {"tasks": [{"task_id": "a", "state": "RUNNING"}]}
B = {"tasks": [{"task_id": "a", "state": "DEAD"}]}


def _sent() -> dict[str, int]:
    return {"whole": 0, "changes": 0, "unchanged": 0, "entries": 0}


@pytest.mark.parametrize(
    ("before", "reply", "dirty", "misses", "refused", "latest"),
    [
        # a silence is a miss, and the answer after it goes whole
        (Polled(report=A, latest=A), None, True, 1, "", None),
        (Polled(misses=2), None, True, 3, "", None),
        # a report the leader was sent, read again: nothing new
        (Polled(report=A, latest=A), A, False, 0, "", A),
        # the same report after misses: news (the machine is back)
        (Polled(report=A, latest=A, misses=1), dict(A), True, 0, "", A),
        (Polled(report=A, latest=A), B, True, 0, "", B),
        # a first read: news, the leader holds nothing
        (Polled(), A, True, 0, "", A),
        # a refusal is an answer, news when its reason changes
        (Polled(report=A, latest=A), Refused(403, "other cell"), True, 0, "other cell", None),
        (Polled(refused="other cell"), Refused(403, "other cell"), False, 0, "other cell", None),
        (Polled(refused="other cell", misses=1), Refused(401, "other cell"), True, 0, "other cell", None),
    ],
)
def test_a_read_changes_the_record(
    before: Polled, reply: dict[str, Any] | Refused | None, dirty: bool, misses: int, refused: str, latest: Any
) -> None:
    shardbook.take_read(before, reply)
    assert (before.dirty, before.misses, before.refused, before.latest) == (dirty, misses, refused, latest)
    if reply is None or isinstance(reply, Refused):
        assert before.report is None  # the next answer goes whole


def test_a_sync_answer_is_the_latest_read_and_outdates_reads_begun_before() -> None:
    p = Polled(report=A, latest=A, misses=2, refused="", synced=4)
    shardbook.take_sync(p, B)
    assert (p.synced, p.dirty, p.misses, p.latest) == (5, True, 0, B)
    q = Polled(report=A, latest=A)
    shardbook.take_sync(q, dict(A))
    assert (q.synced, q.dirty) == (1, False)  # what the leader already holds


def test_a_new_term_sends_everything_whole_and_only_news_is_dirty() -> None:
    read, missed, never = Polled(report=A, latest=A), Polled(misses=1), Polled()
    shardbook.new_term([read, missed, never])
    assert [p.report for p in (read, missed, never)] == [None, None, None]
    assert [p.dirty for p in (read, missed, never)] == [True, True, False]


def test_a_batch_takes_whole_reports_changes_misses_and_refusals() -> None:
    machines = {
        "new": Polled(latest=A, dirty=True),
        "changed": Polled(report=A, latest=B, version=3, dirty=True),
        "same": Polled(report=A, latest=dict(A), version=2, dirty=True),
        "quiet": Polled(report=A, latest=A, version=1),
        "gone": Polled(misses=2, dirty=True),
        "refusing": Polled(refused="other cell", dirty=True),
    }
    sent = _sent()
    reports, missed, refused = shardbook.batch_entries(machines, sent, limit=100)
    assert reports["new"] == {"version": 1, "report": A}
    assert reports["changed"]["version"] == 4 and reports["changed"]["base"] == 3
    assert set(reports) == {"new", "changed"}
    assert (missed, refused) == ({"gone": 2}, {"refusing": "other cell"})
    assert sent == {"whole": 1, "changes": 1, "unchanged": 1, "entries": sent["entries"]} and sent["entries"] > 0
    assert not any(p.dirty for p in machines.values())
    assert machines["changed"].report is B and machines["same"].version == 2
    assert shardbook.batch_entries(machines, sent, limit=100) == ({}, {}, {})


def test_a_batch_stops_at_its_limit_and_leaves_the_rest_for_the_next() -> None:
    machines = {f"m{i}": Polled(latest=A, dirty=True) for i in range(5)}
    reports, _, _ = shardbook.batch_entries(machines, _sent(), limit=2)
    assert sorted(reports) == ["m0", "m1"]
    reports, _, _ = shardbook.batch_entries(machines, _sent(), limit=10)
    assert sorted(reports) == ["m2", "m3", "m4"]


def test_whole_again_marks_only_machines_kept() -> None:
    machines = {"m1": Polled(report=A, latest=A)}
    shardbook.whole_again(machines, ["m1", "unknown"])
    assert (machines["m1"].report, machines["m1"].dirty) == (None, True)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], {"count": 0}),
        ([0.5], {"count": 1, "p50": 0.5, "p95": 0.5, "p99": 0.5, "max": 0.5}),
        ([float(i) for i in range(1, 101)], {"count": 100, "p50": 50.0, "p95": 95.0, "p99": 99.0, "max": 100.0}),
    ],
)
def test_percentiles_by_nearest_rank(values: list[float], expected: dict[str, float]) -> None:
    assert shardbook.percentiles(values) == expected


class _View:
    """A cell view with what `share` reads: replicas, machines' addresses, the machines in state."""

    def __init__(self, replicas: list[str], machines: dict[str, str], in_state: list[str], leader: str = "") -> None:
        self.replicas = {r: f"http://{r}" for r in replicas}
        self.leader = f"{leader}=http://{leader}" if leader else ""
        self.machines = {m: type("Info", (), {"address": a})() for m, a in machines.items()}
        self.state = type("State", (), {"machines": dict.fromkeys(in_state)})()


def test_a_share_is_the_machines_owned_and_those_handed_over_still_in_the_cell() -> None:
    names = [f"m{i}" for i in range(40)]
    view = _View(["r1", "r2"], {m: f"http://b/{m}" for m in names} | {"bare": ""}, [*names, "bare"])
    mine = shardbook.share(view, "r1", {})
    theirs = shardbook.share(view, "r2", {})
    assert set(mine) | set(theirs) == set(names) and not set(mine) & set(theirs)  # one owner each, "bare" none
    handed = next(iter(theirs))
    with_extra = shardbook.share(view, "r1", {handed: "http://via", "removed": "http://x"})
    assert with_extra == mine | {handed: "http://via"}
    # a replica not registered yet counts itself among the members
    assert shardbook.members(["r2"], "r1") == ["r1", "r2"]


def test_the_leader_owns_no_machine_while_another_replica_polls() -> None:
    # The elected master is the one writer: its core goes to the writes, not to a share of polls.
    names = [f"m{i}" for i in range(60)]
    view = _View(["r1", "r2", "r3"], {m: f"http://b/{m}" for m in names}, names, leader="r2")
    shares = {r: shardbook.share(view, r, {}) for r in ("r1", "r2", "r3")}
    assert shares["r2"] == {}
    assert set(shares["r1"]) | set(shares["r3"]) == set(names) and not set(shares["r1"]) & set(shares["r3"])
    assert shares["r1"] and shares["r3"]
    # ... but polls what is handed to it (reach.py: an owner that misses a machine hands it to all).
    assert shardbook.share(view, "r2", {"m3": "http://via"}) == {"m3": "http://via"}
    # A lone leader polls its whole cell.
    alone = _View(["r2"], {m: f"http://b/{m}" for m in names}, names, leader="r2")
    assert set(shardbook.share(alone, "r2", {})) == set(names)
    # A follower's view without a leader (between terms) shares among every replica.
    between = _View(["r1", "r2", "r3"], {m: f"http://b/{m}" for m in names}, names)
    assert sum(len(shardbook.share(between, r, {})) for r in ("r1", "r2", "r3")) == len(names)
    assert shardbook.share(between, "r2", {})
