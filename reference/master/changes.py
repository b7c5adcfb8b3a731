"""The watch cache's change log: the last changes to jobs, tasks and machines, by etcd revision, for watches to replay.

Every replica keeps one, filled from the same etcd watch as its cache, so a watch resumed on
any replica from revision R sees every change after R, as long as R is not older than what
the log still holds (`floor`). A reload of the cache (after a compaction) empties it: changes
before the reload cannot be replayed, and watches that were behind must list again.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from spec.model import TaskId

MAX_CHANGES = 50_000
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Change:
    revision: int
    kind: str  # "job", "task" or "machine"
    key: str  # "alice/web", "alice/web/3/1" (job/index/incarnation), or a machine's name
    value: bytes | None  # None: deleted
    prev: bytes | None  # the value before, None: it was created

    @property
    def type(self) -> str:
        if self.value is None:
            return "DELETED"
        return "ADDED" if self.prev is None else "MODIFIED"


class TooOld(Exception):
    """A revision older than the log's floor: the changes after it are no longer all here."""

    def __init__(self, revision: int, floor: int) -> None:
        super().__init__(revision, floor)
        self.revision, self.floor = revision, floor


class ChangeLog:
    """Bounded in count and bytes; the oldest changes leave first and raise the floor."""

    def __init__(self, max_changes: int = MAX_CHANGES, max_bytes: int = MAX_BYTES) -> None:
        self.max_changes, self.max_bytes = max_changes, max_bytes
        self._changes: deque[Change] = deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self.floor = 0  # a watch may resume from any revision >= floor
        self.last = 0  # the newest revision recorded (or reset to)

    def reset(self, revision: int) -> None:
        """Forget everything: the cache was read anew at `revision`."""
        with self._lock:
            self._changes.clear()
            self._bytes = 0
            self.floor = self.last = revision

    def record(self, change: Change) -> None:
        with self._lock:
            self._changes.append(change)
            self._bytes += len(change.value or b"") + len(change.prev or b"")
            self.last = max(self.last, change.revision)
            while self._changes and (len(self._changes) > self.max_changes or self._bytes > self.max_bytes):
                old = self._changes.popleft()
                self._bytes -= len(old.value or b"") + len(old.prev or b"")
                self.floor = max(self.floor, old.revision)

    def advance(self, revision: int) -> None:
        """The cache reflects `revision` (a progress notification): nothing changed up to it."""
        with self._lock:
            self.last = max(self.last, revision)

    def after(self, revision: int) -> tuple[list[Change], int]:
        """The changes after `revision`, oldest first, and the revision they bring a reader to;
        TooOld when some of them are no longer held."""
        with self._lock:
            if revision < self.floor:
                raise TooOld(revision, self.floor)
            out: list[Change] = []
            for change in reversed(self._changes):  # readers ask for the recent end
                if change.revision <= revision:
                    break
                out.append(change)
            out.reverse()
            return out, max(revision, self.last)


def between(log: ChangeLog, since: int, upto: int) -> list[Change] | None:
    """The changes after revision `since` up to `upto` (a view's revision), oldest first; None
    when the log no longer holds them all. What a reader that follows views from one to the next
    (the desired sets, the reclaimer) has to look at again."""
    if upto <= since:
        return []
    try:
        changes, _ = log.after(since)
    except TooOld:
        return None
    return [c for c in changes if c.revision <= upto]


def task_of(change: Change) -> TaskId | None:
    """The task a task change names (its key is job/index/incarnation); None for a key that
    does not parse."""
    job, _, incarnation = change.key.rpartition("/")
    job, _, index = job.rpartition("/")
    try:
        return TaskId(job, int(index), int(incarnation))
    except ValueError:
        return None
