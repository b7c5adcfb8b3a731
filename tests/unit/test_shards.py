"""Link shards' pure core: the assignment of machines to replicas and reports sent as changes."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from reference.master import shards

MACHINES = [f"m{i:04d}" for i in range(2000)]


def test_every_machine_is_owned_exactly_once() -> None:
    share = shards.assign(MACHINES, ["a", "b", "c"])
    assert set(share) == {"a", "b", "c"}
    owned = [m for s in share.values() for m in s]
    assert sorted(owned) == sorted(MACHINES)
    assert len(owned) == len(set(owned))


def test_the_assignment_is_stable_and_ignores_the_order_of_replicas() -> None:
    assert shards.assign(MACHINES, ["a", "b", "c"]) == shards.assign(MACHINES, ["c", "a", "b"])
    assert shards.owner("m0007", ["a", "b"]) == shards.owner("m0007", ["b", "a"])


def test_shares_are_balanced() -> None:
    for replicas in (["r1", "r2", "r3"], ["r1", "r2", "r3", "r4", "r5"]):
        sizes = [len(s) for s in shards.assign(MACHINES, replicas).values()]
        fair = len(MACHINES) / len(replicas)
        assert min(sizes) > 0.8 * fair and max(sizes) < 1.2 * fair, sizes


def test_a_replica_leaving_moves_only_its_own_machines() -> None:
    before = shards.assign(MACHINES, ["r1", "r2", "r3", "r4", "r5"])
    after = shards.assign(MACHINES, ["r1", "r2", "r4", "r5"])
    for r in ("r1", "r2", "r4", "r5"):
        assert before[r] <= after[r]  # nobody loses a machine
    moved = sum(len(after[r] - before[r]) for r in after)
    assert moved == len(before["r3"])


def test_a_replica_joining_takes_about_its_share_from_each() -> None:
    before = shards.assign(MACHINES, ["r1", "r2", "r3"])
    after = shards.assign(MACHINES, ["r1", "r2", "r3", "r4"])
    for r in ("r1", "r2", "r3"):
        assert after[r] <= before[r]  # machines only move to the newcomer
    assert 0.2 * len(MACHINES) < len(after["r4"]) < 0.3 * len(MACHINES)


def test_no_replica_no_owner() -> None:
    assert shards.owner("m1", []) is None
    assert shards.assign(["m1"], []) == {}


def _task(tid: str, state: str = "RUNNING", **kw: object) -> dict[str, object]:
    return {"task_id": tid, "state": state, **kw}


def test_an_unchanged_report_diffs_to_nothing() -> None:
    r = {"machine": "m1", "fence": {"epoch": 3, "seq": 9}, "tasks": [_task("a"), _task("b")]}
    assert shards.diff(r, dict(r)) == {}
    assert shards.same(r, {**r, "tasks": [_task("b"), _task("a")]})


def test_a_change_carries_only_what_changed() -> None:
    before = {"machine": "m1", "usage": {"cpu": 10}, "tasks": [_task(str(i)) for i in range(100)]}
    after = {
        "machine": "m1",
        "usage": {"cpu": 12},
        "tasks": [_task(str(i)) for i in range(1, 100) if i != 50] + [_task("50", "FINISHED"), _task("new")],
    }
    change = shards.diff(before, after)
    assert change == {
        "tasks": [_task("50", "FINISHED"), _task("new")],
        "removed": ["0"],
        "fields": {"usage": {"cpu": 12}},
    }
    assert shards.size(change) == 4
    assert shards.same(shards.apply(before, change), after)


_tasks = st.lists(
    st.builds(
        _task,
        st.sampled_from([f"t{i}" for i in range(12)]),
        st.sampled_from(["QUEUED", "STARTING", "RUNNING", "FINISHED", "KILLED"]),
    ),
    max_size=12,
    unique_by=lambda t: t["task_id"],
)
_reports = st.fixed_dictionaries(
    {"tasks": _tasks},
    optional={"usage": st.dictionaries(st.sampled_from(["cpu", "ram"]), st.integers(0, 9)), "epoch": st.integers(0, 3)},
)


@settings(max_examples=300, deadline=None)
@given(_reports, _reports)
def test_applying_the_difference_gives_the_new_report(before: dict, after: dict) -> None:
    rebuilt = shards.apply(before, shards.diff(before, after))
    assert shards.same(rebuilt, after)
    assert set(rebuilt) == set(after) | {"tasks"}


def test_a_chain_of_changes_rebuilds_every_report() -> None:
    rng = random.Random(7)
    held = sent = {"tasks": []}
    for _ in range(200):
        tasks = {t["task_id"]: t for t in sent["tasks"]}
        for _ in range(rng.randint(0, 3)):
            tid = f"t{rng.randint(0, 20)}"
            if rng.random() < 0.3:
                tasks.pop(tid, None)
            else:
                tasks[tid] = _task(tid, rng.choice(["STARTING", "RUNNING", "FINISHED"]))
        new = {"tasks": list(tasks.values()), "usage": {"cpu": rng.randint(0, 5)}}
        held = shards.apply(held, shards.diff(sent, new))
        sent = new
        assert shards.same(held, new)


def test_the_leader_is_no_poller_while_another_replica_is_there() -> None:
    assert shards.pollers(["r3", "r1", "r2"], "r2") == ["r1", "r3"]
    assert shards.pollers(["r2"], "r2") == ["r2"]  # a lone leader polls the cell
    assert shards.pollers(["r1", "r2"], None) == ["r1", "r2"]
    shares = shards.assign(MACHINES, ["a", "b", "c"], leader="b")
    assert shares["b"] == frozenset() and shares["a"] | shares["c"] == frozenset(MACHINES)
    # The followers keep the machines they owned: only the leader's move (rendezvous).
    before = shards.assign(MACHINES, ["a", "b", "c"])
    assert before["a"] <= shares["a"] and before["c"] <= shares["c"]
    assert all(shards.owner(m, ["a", "b", "c"], "b") != "b" for m in MACHINES)
    assert shards.leader_name("b=http://127.0.0.1:1") == "b" and shards.leader_name("") == ""
