"""The history checker on hand-made histories: lost writes, stale reads, concurrency, unknown writes, double runs."""

from __future__ import annotations

from pathlib import Path

from harness.history import History, check, linearizable


def op(h: History, kind: str, key: str, value, t0: float, t1: float, outcome: str = "ok", result=None) -> int:
    i = h.invoke(kind, key, value, at=t0)
    h.complete(i, outcome, result, at=t1)
    return i


def test_sequential_history_is_accepted() -> None:
    h = History()
    op(h, "submit", "u/j", {"task_count": 2}, 0, 1)
    op(h, "read", "u/j", None, 2, 3, result={"task_count": 2, "extra": "x"})
    op(h, "update", "u/j", {"task_count": 3}, 4, 5)
    op(h, "read", "u/j", None, 6, 7, result={"task_count": 3})
    op(h, "kill", "u/j", None, 8, 9)
    op(h, "read", "u/j", None, 10, 11, result=None)
    assert check(h).ok


def test_lost_write_is_found() -> None:
    h = History()
    op(h, "submit", "u/j", {"task_count": 2}, 0, 1)
    op(h, "update", "u/j", {"task_count": 5}, 2, 3)
    op(h, "read", "u/j", None, 4, 5, result={"task_count": 2})
    res = check(h)
    assert not res.ok
    assert [w.op for w in res.lost_writes] == ["update"]
    assert res.nonlinearizable_keys == ["u/j"]


def test_acknowledged_kill_lost_is_found() -> None:
    h = History()
    op(h, "submit", "u/j", {"task_count": 1}, 0, 1)
    op(h, "kill", "u/j", None, 2, 3)
    op(h, "read", "u/j", None, 4, 5, result={"task_count": 1})
    res = check(h)
    assert [w.op for w in res.lost_writes] == ["kill"]


def test_stale_read_is_found() -> None:
    # The read begins after the update completed and no other write is in flight, yet it
    # returns the old value, while an earlier read already saw the new one.
    h = History()
    op(h, "submit", "u/j", {"task_count": 1}, 0, 1)
    op(h, "update", "u/j", {"task_count": 2}, 2, 6)
    op(h, "read", "u/j", None, 3, 4, result={"task_count": 2})
    op(h, "read", "u/j", None, 4.5, 5, result={"task_count": 1})
    res = check(h)
    assert res.nonlinearizable_keys == ["u/j"]
    assert not res.lost_writes  # the write had not completed when the stale read began


def test_legal_concurrent_history_is_accepted() -> None:
    # Two reads overlap an update: one sees the old value, one the new; the old-value read
    # ends before the new-value read begins, so a linearization exists.
    h = History()
    op(h, "submit", "u/j", {"task_count": 1}, 0, 1)
    op(h, "update", "u/j", {"task_count": 2}, 2, 10)
    op(h, "read", "u/j", None, 3, 4, result={"task_count": 1})
    op(h, "read", "u/j", None, 5, 6, result={"task_count": 2})
    op(h, "read", "u/j", None, 7, 8, result={"task_count": 2})
    assert check(h).ok


def test_concurrent_submits_one_wins() -> None:
    h = History()
    op(h, "submit", "u/j", {"task_count": 1}, 0, 3)
    op(h, "submit", "u/j", {"task_count": 2}, 1, 2, outcome="failed")
    op(h, "read", "u/j", None, 4, 5, result={"task_count": 1})
    assert check(h).ok


def test_unknown_write_allowed_either_way() -> None:
    for seen in (1, 4):
        h = History()
        op(h, "submit", "u/j", {"task_count": 1}, 0, 1)
        op(h, "update", "u/j", {"task_count": 4}, 2, 3, outcome="unknown")
        op(h, "read", "u/j", None, 5, 6, result={"task_count": seen})
        op(h, "read", "u/j", None, 7, 8, result={"task_count": seen})
        assert check(h).ok, seen


def test_unknown_write_cannot_flicker() -> None:
    h = History()
    op(h, "submit", "u/j", {"task_count": 1}, 0, 1)
    op(h, "update", "u/j", {"task_count": 4}, 2, 3, outcome="unknown")
    op(h, "read", "u/j", None, 5, 6, result={"task_count": 4})
    op(h, "read", "u/j", None, 7, 8, result={"task_count": 1})
    assert check(h).nonlinearizable_keys == ["u/j"]


def test_failed_write_did_not_happen() -> None:
    h = History()
    op(h, "submit", "u/j", {"task_count": 1}, 0, 1)
    op(h, "update", "u/j", {"task_count": 9}, 2, 3, outcome="failed")
    op(h, "read", "u/j", None, 5, 6, result={"task_count": 9})
    assert not check(h).ok


def test_keys_are_independent_and_search_is_memoized() -> None:
    h = History()
    for k in range(3):
        op(h, "submit", f"u/j{k}", {"task_count": 1}, 0, 100)
    for i in range(12):  # many concurrent reads: memoization keeps this fast
        op(h, "read", "u/j0", None, 1 + i, 100, result={"task_count": 1})
    assert check(h).ok
    assert linearizable(h.ops[:1]) is True


def test_jsonl_round_trip(tmp_path: Path) -> None:
    h = History()
    op(h, "submit", "u/j", {"task_count": 1}, 0, 1)
    op(h, "read", "u/j", None, 2, 3, result={"task_count": 1})
    h.to_jsonl(tmp_path / "h.jsonl")
    back = History.from_jsonl(tmp_path / "h.jsonl")
    assert [(o.op, o.key, o.value, o.outcome, o.result) for o in back.ops] == [
        (o.op, o.key, o.value, o.outcome, o.result) for o in h.ops
    ]


def reports(machine: str, task_id: str, ts: list[float], state: str = "RUNNING") -> list[dict]:
    return [{"t": t, "machine": machine, "task_id": task_id, "state": state} for t in ts]


def test_double_run_is_found() -> None:
    samples = reports("m0", "u/j/0#0@1", [0, 1, 2, 3]) + reports("m1", "u/j/0#1@1", [2, 3, 4])
    res = check(History(), task_reports=samples)
    assert not res.ok and len(res.double_running) == 1
    assert res.double_running[0]["index"] == 0


def test_a_double_run_is_told_with_its_index_timeline_and_windows() -> None:
    samples = (
        reports("m0", "u/j/0#0@1", [0, 1, 2, 3])
        + reports("m1", "u/j/0#0@2", [2, 3, 4])
        + reports("m1", "u/j/1#0@1", [2])  # another index: not part of the story
    )
    res = check(History(), task_reports=samples, lost_windows=[("m0", -5.0, 1.0), ("m2", 0.0, 9.0)])
    told = "\n".join(res.details)
    assert "seen 3.000-3.000 m0 u/j/0#0@1 RUNNING" in told
    assert "seen 2.000-2.000 m1 u/j/0#0@2 RUNNING" in told
    assert "lost window m0 -5.000-1.000" in told
    assert "u/j/1#0@1" not in told and "m2" not in told


def test_double_run_inside_lost_window_is_allowed() -> None:
    samples = reports("m0", "u/j/0#0@1", [0, 1, 2, 3]) + reports("m1", "u/j/0#1@1", [2, 3, 4])
    res = check(History(), task_reports=samples, lost_windows=[("m0", 1.5, 3.5)])
    assert res.ok


def test_sequential_incarnations_and_dead_reports_are_fine() -> None:
    samples = (
        reports("m0", "u/j/0#0@1", [0, 1])
        + reports("m0", "u/j/0#0@1", [2, 3], state="KILLED")
        + reports("m1", "u/j/0#1@1", [2, 3])
        + reports("m1", "u/j/1#0@1", [0, 3])
    )
    assert check(History(), task_reports=samples).ok


def windows(machine: str, task_id: str, ws: list[tuple[float, float]]) -> list[dict]:
    return [{"t0": a, "t1": b, "machine": machine, "task_id": task_id, "state": "RUNNING"} for a, b in ws]


def test_borglets_read_one_after_the_other_prove_no_overlap() -> None:
    # One poll reads m0 during [1.0, 1.1], then m1 during [1.1, 1.2]: the old placement may
    # have stopped between the two reads, before the new one started.
    samples = windows("m0", "u/j/0#0@1", [(0.0, 0.1), (1.0, 1.1)]) + windows("m1", "u/j/0#0@2", [(1.1, 1.2), (2.1, 2.2)])
    assert check(History(), task_reports=samples).ok


def test_overlap_of_sure_spans_is_found() -> None:
    # m0's process was surely live over [0.1, 2.0]; m1's over [1.2, 3.0]: they meet on [1.2, 2.0].
    samples = windows("m0", "u/j/0#0@1", [(0.0, 0.1), (2.0, 2.1)]) + windows("m1", "u/j/0#0@2", [(1.1, 1.2), (3.0, 3.1)])
    found = check(History(), task_reports=samples).double_running
    assert [f["overlap"] for f in found] == [(1.2, 2.0)]


def test_a_single_read_inside_the_others_sure_span_is_an_overlap() -> None:
    samples = windows("m0", "u/j/0#0@1", [(0.0, 0.1), (3.0, 3.1)]) + windows("m1", "u/j/0#1@1", [(1.0, 1.1)])
    found = check(History(), task_reports=samples).double_running
    assert [f["overlap"] for f in found] == [(1.0, 1.1)]


def test_one_reply_showing_two_processes_of_an_index_is_an_overlap() -> None:
    samples = windows("m0", "u/j/0#0@1", [(1.0, 1.1)]) + windows("m0", "u/j/0#1@1", [(1.0, 1.1)])
    found = check(History(), task_reports=samples).double_running
    assert [f["overlap"] for f in found] == [(1.0, 1.1)]
    # the same two seen by two borglets in one poll, one read after the other: not proven
    apart = windows("m0", "u/j/0#0@1", [(1.0, 1.1)]) + windows("m1", "u/j/0#1@1", [(1.1, 1.2)])
    assert check(History(), task_reports=apart).ok
