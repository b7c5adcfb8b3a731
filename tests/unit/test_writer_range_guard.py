"""The writer's guard: one range compare per run of a submitted job's task records, not one per key.

A 10,000-task job is written in several txns, each guarded so that nothing written after the
view it was diffed against is overwritten. Key by key, that doubles the txn (a compare per
put); a run of one job's task records is guarded by one compare over its span instead. These
tests hold the guard to what it must keep: it refuses a write over anything newer (a key of
the run, or a record between two of them), it never refuses a change because of its own
earlier txns, and it goes back to key-by-key compares whenever the view may not hold this
writer's last commit.
"""

from __future__ import annotations

import pytest

from reference.master.cell import Draft
from reference.master.mutations import submit_job
from reference.master.writer import WriteFailed, Writer, chunks, diff_ops, fresh_folders, guard
from reference.store import ops
from spec.model import Machine, Resources, TaskId
from tests.unit.master_cells import T0, placed_cell
from tests.unit.test_master_writer_ghost import KEYS, Cache, Election, Store

TASKS = KEYS.tasks.encode()


def job(name: str, count: int) -> dict[str, object]:
    return {"name": name, "user": "alice", "task_count": count, "request": {"cpu": "1m"}, "command": ["sleep", "100"]}


def spans(compares: list[ops.Compare]) -> list[tuple[bytes, bytes | None]]:
    return [(ops.unb64(c["key"]), ops.unb64(c["range_end"]) if "range_end" in c else None) for c in compares]


def put(key: str) -> ops.Op:
    return ops.put(key, b"v")


def test_a_run_of_one_jobs_task_records_is_one_compare() -> None:
    batch = [put(f"{KEYS.tasks}alice/web/{i}/0") for i in (0, 1, 10, 2)]
    batch += [put(f"{KEYS.tasks}alice/webx/0/0"), put(f"{KEYS.tasks}alice/webx/1/0")]
    batch += [put(KEYS.job("alice/web")), ops.delete(f"{KEYS.tasks}alice/web/7/0"), ops.delete(f"{KEYS.tasks}alice/web/8/0")]
    fresh = {f"{KEYS.tasks}alice/web/".encode(), f"{KEYS.tasks}alice/webx/".encode()}
    got = spans(guard(batch, 41, TASKS, fresh))
    assert got == [
        (f"{KEYS.tasks}alice/web/0/0".encode(), f"{KEYS.tasks}alice/web/2/0\0".encode()),
        # "webx" is another job: its own run, not the tail of "web"'s
        (f"{KEYS.tasks}alice/webx/0/0".encode(), f"{KEYS.tasks}alice/webx/1/0\0".encode()),
        (KEYS.job("alice/web").encode(), None),
        # deletes are guarded key by key: a span of them could hold a record an earlier txn of
        # the same change wrote
        (f"{KEYS.tasks}alice/web/7/0".encode(), None),
        (f"{KEYS.tasks}alice/web/8/0".encode(), None),
    ]
    assert all(c["result"] == "LESS" and c["mod_revision"] == "42" for c in guard(batch, 41, TASKS, fresh))
    key_by_key = [(ops.unb64(next(iter(op.values()))["key"]), None) for op in batch]
    assert spans(guard(batch, 41, TASKS, ())) == key_by_key
    # A job with records already (not in `fresh`): its puts are guarded one by one.
    assert spans(guard(batch, 41, TASKS, {f"{KEYS.tasks}alice/webx/".encode()}))[:4] == key_by_key[:4]


def test_only_a_job_without_records_in_the_view_gets_range_compares() -> None:
    """etcd reads every key of a span: placements of 1,000 tasks of a 10,000-task job, whose
    keys interleave by index ("0", "1", "10", "100", "1000", ...), span nearly all of the job's
    records, so a range compare would read ten times the keys the txn writes."""
    cell = placed_cell()  # alice/web has records
    assert fresh_folders(cell, [T0], KEYS) == frozenset()
    assert fresh_folders(cell, [T0, TaskId("bob/new", 0, 0)], KEYS) == {f"{KEYS.tasks}bob/new/".encode()}


def test_a_large_jobs_txns_write_disjoint_runs_in_key_order() -> None:
    """diff_ops orders task records by key, so the txns of one change never overlap: the span
    of a later txn cannot hold a record an earlier one wrote (with index order, 0..119 then
    120..239, the second txn's span "120".."239" would hold "13", written by the first)."""
    store = Store()
    d = Draft(store.view, 1.0)
    submit_job(d, job("big", 500))
    all_ops = diff_ops(store.view, d, KEYS)
    task_keys = [ops.unb64(op["request_put"]["key"]) for op in all_ops if "request_put" in op and ops.unb64(op["request_put"]["key"]).startswith(TASKS)]
    assert len(task_keys) == 500 and task_keys == sorted(task_keys)
    batches = chunks(all_ops, 120)
    ranges = [s for b in batches for s in spans(guard(b, 1, TASKS, {f"{KEYS.tasks}alice/big/".encode()})) if s[1] is not None]
    assert len(ranges) == len(batches)  # one compare per txn for the whole job
    for (_, a1), (b0, _) in zip(ranges, ranges[1:], strict=False):
        assert a1 <= b0, "two txns' spans overlap"
    for first, end in ranges:
        inside = [k for k in task_keys if first <= k < end]
        assert inside == task_keys[task_keys.index(first) : task_keys.index(first) + len(inside)]


def writer(store: Store, max_ops: int = 120) -> tuple[Writer, Election]:
    election = Election(store)
    return Writer(Cache(store), election, KEYS, max_ops=max_ops), election  # type: ignore[arg-type]


def counted(election: Election) -> list[list[ops.Compare]]:
    """The compares of every txn `election` commits from now on."""
    seen: list[list[ops.Compare]] = []
    commit = election.fenced_commit

    def fenced_commit(batch, extra_compares=()):  # type: ignore[no-untyped-def]
        seen.append(list(extra_compares))
        return commit(batch, extra_compares)

    election.fenced_commit = fenced_commit  # type: ignore[method-assign]
    return seen


def add_machine(d: Draft) -> None:
    assert d.step("machine_add", Machine("m1", Resources.of(cpu=1000, ram=2**30)))


def test_a_job_of_many_txns_commits_with_a_compare_per_txn_once_the_view_is_current() -> None:
    store = Store()
    w, election = writer(store)
    w.mutate(add_machine)  # the first commit of a term: key by key, then its revision is known
    txns = counted(election)
    w.mutate(lambda d: submit_job(d, job("big", 600)))
    assert sum(1 for k in store.kv if k.startswith(TASKS + b"alice/big/")) == 600
    assert len(txns) == 6 and all(len(c) <= 3 for c in txns), [len(c) for c in txns]  # run + job key + marker


def test_a_record_written_behind_the_view_inside_a_run_fails_the_write() -> None:
    """A record between two the change writes (here another incarnation of an index), written
    after the view by no path of this writer: the run's compare refuses the txn. (Key by key,
    only the change's own keys would be looked at.)"""
    store = Store()
    w, election = writer(store)
    w.mutate(add_machine)
    big = job("big", 30)
    w.mutate(lambda d: submit_job(d, big))  # the view of this fake store shows machines only
    stray = f"{KEYS.tasks}alice/big/15/1".encode()
    with store.lock:  # the view stays at the writer's last commit, so runs are on
        store.revision += 1
        store.kv[stray] = (b"stray", store.revision)
    before = dict(store.kv)
    with pytest.raises(WriteFailed, match="did not confirm"):
        w.mutate(lambda d: submit_job(d, big))  # the same 30 records again, over the stray one's span
    assert store.kv == before and election.is_leader


def test_a_view_behind_the_writers_last_commit_is_guarded_key_by_key() -> None:
    """The watch cache may lag the writer's own last commit (it waits at most 5 s): a span
    would then hold records that commit wrote, and refuse a good write. Key by key instead."""
    store = Store()
    w, election = writer(store)
    w.mutate(add_machine)
    w.mutate(lambda d: submit_job(d, job("a", 10)))
    stale = store.view
    w.mutate(lambda d: submit_job(d, job("b", 10)))
    w.cache = type("Behind", (), {"cell": lambda self: stale, "wait_revision": lambda self, r, t: True,
                             "expect": lambda self, writes: None})()  # type: ignore[assignment]
    txns = counted(election)
    w.mutate(lambda d: submit_job(d, job("c", 10)))
    assert len(txns) == 1 and len(txns[0]) >= 10 + 1 + 1  # ten records, the job, the marker
    assert all("range_end" not in c for c in txns[0])


def test_a_new_term_guards_its_first_commit_key_by_key() -> None:
    store = Store()
    w, election = writer(store)
    w.mutate(add_machine)
    election.fencing_token = 8  # leadership lost and won again: an earlier leader wrote meanwhile
    txns = counted(election)
    w.mutate(lambda d: submit_job(d, job("a", 10)))
    assert all("range_end" not in c for c in txns[0])
    txns.clear()
    w.mutate(lambda d: submit_job(d, job("b", 10)))
    assert any("range_end" in c for c in txns[0])
