"""The writer's txns of task records go to etcd together, the rest after them: a job's record is
sent only once every txn of its tasks has ended, a failure in any of them fails the change (every
txn ended first), and a txn whose answer was lost leaves the revision to be read from the store."""

from __future__ import annotations

import threading
import time

import pytest

from reference.master import codec
from reference.master.writer import NotLeader, WriteFailed, Writer, leading_task_txns
from reference.store import ops
from reference.store.client import StoreOutcomeUnknown

KEYS = codec.Keys("c1")


class Client:
    """The store client, as the writer asks it after a lost answer."""

    def __init__(self, election: Election) -> None:
        self.election = election

    def revision(self) -> int:
        return self.election.revision

    def get(self, key: bytes) -> tuple[bytes, int] | None:
        return (b"v", self.election.revision) if key.decode() in self.election.landed else None


class Election:
    """Records each txn's first key, when it began and ended, and how many were in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        self.log: list[tuple[str, str]] = []  # ("begin" | "end", first key)
        self.revision = 10
        self.fail_key: str | None = None  # the txn starting with this key fails
        self.fail_with: Exception = WriteFailed("a key moved")
        self.lost_key: str | None = None  # this txn lands, its answer is lost
        self.is_leader, self.candidate_name, self.lease_id, self.fencing_token = True, "m0", 1, 1
        self.poisoned: list[str] = []
        self.landed: set[str] = set()
        self.client = Client(self)

    def poison(self, marker: str, lease_id: int) -> bool:
        self.poisoned.append(marker)
        return True

    def fenced_commit(self, batch: list[ops.Op], extra_compares: list = ()) -> int | None:  # type: ignore[assignment]
        first = ops.unb64(batch[0]["request_put"]["key"]).decode()
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.log.append(("begin", first))
        time.sleep(0.05)
        with self.lock:
            self.in_flight -= 1
            self.log.append(("end", first))
            if first == self.fail_key:
                raise self.fail_with
            self.revision += 1
            self.landed.add(first)
            if first == self.lost_key:
                self.lost_key = None  # the retry's read finds it landed
                raise StoreOutcomeUnknown("the answer was lost")
            return self.revision


def submission(tasks: int) -> tuple[list[ops.Op], int]:
    """A job's submission as `diff_ops` orders it: its task records by key, then its job."""
    puts = [ops.put(f"{KEYS.tasks}alice/web/{i:05d}/0", b"t") for i in range(tasks)]
    return [*puts, ops.put(KEYS.job("alice/web"), b"j")], len(puts)


def the_writer(election: Election, pipeline: int = 8) -> Writer:
    cache = type("Cache", (), {"cell": lambda self: None, "wait_revision": lambda self, r, t: True})()
    return Writer(cache, election, KEYS, max_ops=10, pipeline=pipeline)  # type: ignore[arg-type]


def test_task_txns_go_together_and_the_job_follows_them_all() -> None:
    election = Election()
    all_ops, task_puts = submission(60)  # six txns of tasks, then the job's
    revision = the_writer(election)._commit(all_ops, task_puts=task_puts)
    assert election.most_in_flight > 1
    job_begins = election.log.index(("begin", KEYS.job("alice/web")))
    assert [kind for kind, _ in election.log[:job_begins]].count("end") == 6  # every task txn ended first
    assert revision == election.revision == 17
    # One at a time when the pipeline is 1, as before.
    one = Election()
    the_writer(one, pipeline=1)._commit(all_ops, task_puts=task_puts)
    assert one.most_in_flight == 1


def test_a_failed_task_txn_fails_the_change_after_every_txn_ended_and_the_job_is_not_sent() -> None:
    for error in (WriteFailed("a key moved"), NotLeader("fenced")):
        election = Election()
        election.fail_key, election.fail_with = f"{KEYS.tasks}alice/web/00020/0", error
        all_ops, task_puts = submission(60)
        with pytest.raises(type(error)):
            the_writer(election)._commit(all_ops, task_puts=task_puts)
        assert election.in_flight == 0
        assert ("begin", KEYS.job("alice/web")) not in election.log


def test_a_task_txn_without_its_answer_leaves_the_revision_to_the_store() -> None:
    election = Election()
    election.lost_key = f"{KEYS.tasks}alice/web/00010/0"
    all_ops, task_puts = submission(60)
    revision = the_writer(election)._commit(all_ops, task_puts=task_puts)
    assert election.poisoned  # its marker, before it was found landed
    assert revision == election.revision  # read from the store, not the highest answered


def test_only_leading_txns_of_task_puts_go_together_never_the_last() -> None:
    batches = [[ops.put("a", "1")] * 10] * 3 + [[ops.put("j", "1")] * 4]
    assert leading_task_txns(batches, 30) == 3
    assert leading_task_txns(batches, 25) == 2  # the third holds other records too
    assert leading_task_txns(batches[:3], 30) == 2  # a change of task records only: its last follows
    assert leading_task_txns(batches, 0) == 0
