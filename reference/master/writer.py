"""The leader's one writer: changes a Draft of the cached cell and commits its diff in fenced, batched etcd txns.

All mutations on a leader go through `Writer.mutate`, one at a time: it takes the cached
cell, lets the caller apply spec actions to a Draft, writes what changed with
`Election.fenced_txn` (so a deposed leader writes nothing), and waits until its own watch
cache shows the write before the next mutation starts. A write is acknowledged only after its
txn committed. etcd allows 128 ops per txn by default; a bigger diff is split, tasks first,
so a watcher never sees a job without its tasks' records being on their way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft
from reference.store import ops
from reference.store.client import StoreError, StoreOutcomeUnknown, StoreUnavailable
from reference.store.election import Election

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_OPS_PER_TXN = 120  # under etcd's default --max-txn-ops of 128


class NotLeader(Exception):
    """This replica does not (or no longer) lead: the write was not made."""


class WriteFailed(Exception):
    """etcd could not be reached or did not answer: the write may not have been made."""


def diff_ops(base: Cell, draft: Draft, keys: codec.Keys) -> list[ops.Op]:
    """The puts and deletes that turn `base` into `draft`, task records first."""
    new, old = draft.state, base.state
    task_ops: list[ops.Op] = []
    other: list[ops.Op] = []
    deletes: list[ops.Op] = []
    for tid, task in new.tasks.items():
        info = draft.tasks.get(tid)
        if old.tasks.get(tid) is task and base.tasks.get(tid) is info:
            continue
        task_ops.append(ops.put(keys.task(tid), codec.encode_task(task, draft.task_info(tid))))
    for tid in old.tasks:
        if tid not in new.tasks:
            deletes.append(ops.delete(keys.task(tid)))
    for key, job in new.jobs.items():
        if old.jobs.get(key) is job and base.jobs.get(key) is draft.jobs.get(key):
            continue
        other.append(ops.put(keys.job(key), codec.encode_job(job, draft.jobs[key])))
    for key in old.jobs:
        if key not in new.jobs:
            deletes.append(ops.delete(keys.job(key)))
    for name, m in new.machines.items():
        info = draft.machines.get(name)
        if old.machines.get(name) is m and base.machines.get(name) is info:
            continue
        other.append(ops.put(keys.machine(name), codec.encode_machine(m, draft.machine_info(name))))
    for name in old.machines:
        if name not in new.machines:
            deletes.append(ops.delete(keys.machine(name)))
    for qkey, amount in draft.quotas.items():
        other.append(ops.put(keys.quota(qkey), codec.encode_quota(qkey, amount)))
    return task_ops + other + deletes


def chunks(items: list[ops.Op], size: int) -> list[list[ops.Op]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Writer:
    def __init__(
        self,
        cache: WatchCache,
        election: Election,
        keys: codec.Keys,
        *,
        clock: Callable[[], float] = time.time,
        max_ops: int = MAX_OPS_PER_TXN,
        on_txn: Callable[[str, int], None] | None = None,
    ) -> None:
        self.cache = cache
        self.election = election
        self.keys = keys
        self.clock = clock
        self.max_ops = max_ops
        self._on_txn = on_txn  # (outcome, ops) for metrics
        self._lock = threading.Lock()

    def mutate(self, change: Callable[[Draft], T]) -> tuple[T, int]:
        """Run `change` on a Draft of the cell and commit what it changed.

        Returns (what `change` returned, the revision the cell is at after the write). If
        `change` raises, nothing is written. Raises NotLeader or WriteFailed.
        """
        with self._lock:
            if not self.election.is_leader:
                raise NotLeader("not the leader")
            base = self.cache.cell()
            draft = Draft(base, self.clock())
            result = change(draft)
            if not draft.changed:
                return result, base.revision
            revision = self._commit(diff_ops(base, draft, self.keys))
            if not self.cache.wait_revision(revision, 5.0):
                log.warning("watch cache did not reach revision %d in 5 s", revision)
            return result, revision

    def _commit(self, all_ops: list[ops.Op]) -> int:
        for batch in chunks(all_ops, self.max_ops):
            self._commit_batch(batch)
        try:
            return self.election.client.revision()
        except StoreError as err:
            raise WriteFailed(f"committed, but the revision could not be read: {err}") from err

    def _commit_batch(self, batch: list[ops.Op]) -> None:
        for attempt in range(3):
            try:
                ok = self.election.fenced_txn(batch)
            except StoreOutcomeUnknown as err:
                self._count("unknown", len(batch))
                if self._landed(batch):
                    return
                log.warning("txn outcome unknown (%s); it did not land; retrying", err)
                continue
            except StoreUnavailable as err:
                self._count("unavailable", len(batch))
                if attempt == 2:
                    raise WriteFailed(str(err)) from err
                time.sleep(0.2)
                continue
            except StoreError as err:
                self._count("error", len(batch))
                raise WriteFailed(str(err)) from err
            if not ok:
                self._count("fenced", len(batch))
                raise NotLeader("the leader key is no longer ours: write refused by the fence")
            self._count("committed", len(batch))
            return
        raise WriteFailed("etcd did not confirm the write")

    def _landed(self, batch: list[ops.Op]) -> bool:
        """After an unanswered txn: did it commit? Its first op's key tells (all or nothing)."""
        first = batch[0]
        try:
            if "request_put" in first:
                req = first["request_put"]
                found = self.election.client.get(ops.unb64(req["key"]))
                return found is not None and found[0] == ops.unb64(req["value"])
            req = first["request_delete_range"]
            return self.election.client.get(ops.unb64(req["key"])) is None
        except StoreError as err:
            raise WriteFailed(f"outcome unknown and etcd unreachable: {err}") from err

    def _count(self, outcome: str, n: int) -> None:
        if self._on_txn is not None:
            self._on_txn(outcome, n)
