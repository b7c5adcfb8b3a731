"""The watch cache: every replica's in-memory copy of the whole cell, kept by an etcd prefix watch.

A prefix read gives the cell at a revision; a watch from the next revision applies every
change in order. If the watch falls behind a compaction, the cache reads the prefix again and
starts a new watch. `cell()` returns an immutable `Cell` stamped with the revision it reflects;
unchanged machines, jobs and tasks keep their identity between views, which is what lets the
writer diff cheaply.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from reference.master import codec
from reference.master.cell import Cell, JobInfo, MachineInfo, TaskInfo
from reference.store import ops
from reference.store.client import StoreClient, StoreError
from reference.store.watch import PrefixWatch
from spec.model import CellState, FMap, Job, Machine, QuotaKey, Resources, Task, TaskId

log = logging.getLogger(__name__)


class WatchCache:
    def __init__(self, client: StoreClient, keys: codec.Keys, *, idle_timeout: float = 5.0) -> None:
        self.client = client
        self.keys = keys
        # A watch silent this long is reconnected to the next member; with a progress
        # notification a second, a short value moves off a hung member before reads are refused.
        self.idle_timeout = idle_timeout
        # When etcd was last heard (a read, an event or a progress notification), on the
        # monotonic clock: the cache is at least that fresh. None until the first read.
        self._heard_at: float | None = None
        self._machines: dict[str, tuple[Machine, MachineInfo]] = {}
        self._jobs: dict[str, tuple[Job, JobInfo]] = {}
        self._tasks: dict[TaskId, tuple[Task, TaskInfo]] = {}
        self._quotas: dict[QuotaKey, Resources] = {}
        self._leader = ""
        self._replicas: dict[str, str] = {}
        self._raw: dict[bytes, bytes] = {}  # key -> value as stored, for the writer's checks
        self._revision = 0
        self._view: Cell | None = None
        self._cond = threading.Condition()
        self._watch: PrefixWatch | None = None
        self._stopped = threading.Event()
        self._listeners: list[Callable[[int], None]] = []
        self.reloads = 0

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Read the cell and follow it; retries the first read until etcd answers or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._reload()
                return
            except StoreError as err:
                if time.monotonic() > deadline:
                    raise
                log.warning("watch cache: first read failed (%s); retrying", err)
                time.sleep(0.5)

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()

    def on_change(self, listener: Callable[[int], None]) -> None:
        """Call `listener(revision)` after each applied batch of changes (from the watch thread)."""
        self._listeners.append(listener)

    @property
    def healthy(self) -> bool:
        return self._watch is not None and self._watch.running

    # --- reads ---------------------------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def heard_at(self) -> float | None:
        """The monotonic time of the last message from etcd, None if there was none yet."""
        return self._heard_at

    def cell(self) -> Cell:
        with self._cond:
            if self._view is None:
                self._view = Cell(
                    state=CellState(
                        machines=FMap({k: m for k, (m, _) in self._machines.items()}),
                        jobs=FMap({k: j for k, (j, _) in self._jobs.items()}),
                        tasks=FMap({k: t for k, (t, _) in self._tasks.items()}),
                        quotas=FMap(self._quotas),
                    ),
                    machines={k: i for k, (_, i) in self._machines.items()},
                    jobs={k: i for k, (_, i) in self._jobs.items()},
                    tasks={k: i for k, (_, i) in self._tasks.items()},
                    revision=self._revision,
                    leader=self._leader,
                    replicas=dict(self._replicas),
                )
            return self._view

    def raw(self, key: str) -> bytes | None:
        with self._cond:
            return self._raw.get(key.encode())

    def wait_revision(self, revision: int, timeout: float) -> bool:
        """Block until the cache reflects `revision` (or later); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._revision < revision:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def catch_up(self, timeout: float) -> bool:
        """Wait until the cache holds everything etcd had committed when this was called."""
        return self.wait_revision(self.client.revision(), timeout)

    # --- applying changes ----------------------------------------------------------------------

    def _reload(self) -> None:
        asked = time.monotonic()  # the read reflects etcd no earlier than when it was sent
        kvs, revision = self.client.get_prefix(self.keys.root)
        with self._cond:
            self._heard_at = asked
            self._machines.clear()
            self._jobs.clear()
            self._tasks.clear()
            self._quotas.clear()
            self._replicas.clear()
            self._raw.clear()
            self._leader = ""
            for key, value, _ in kvs:
                self._put(key, value)
            self._revision = revision
            self._view = None
            self._cond.notify_all()
        self.reloads += 1
        self._watch = self.client.watch_prefix(
            self.keys.root,
            revision + 1,
            self._on_events,
            on_compacted=self._on_compacted,
            idle_timeout=self.idle_timeout,
        )

    def _on_compacted(self, compact_revision: int) -> None:
        log.warning("watch cache: compacted at %d; reading the cell again", compact_revision)

        def again() -> None:
            while not self._stopped.is_set():
                try:
                    self._reload()
                    return
                except StoreError as err:
                    log.warning("watch cache: reload failed (%s); retrying", err)
                    time.sleep(0.5)

        threading.Thread(target=again, name="cache-reload", daemon=True).start()

    def _on_events(self, events: list[ops.WatchEvent], revision: int) -> None:
        with self._cond:
            # Events and progress notifications alike prove the watch still hears etcd.
            self._heard_at = time.monotonic()
            for e in events:
                if e.kind == "PUT":
                    self._put(e.key, e.value)
                else:
                    self._delete(e.key)
            changed = bool(events)
            if changed or revision > self._revision:
                self._revision = max(self._revision, revision)
                if changed:
                    self._view = None
                elif self._view is not None:
                    self._view = _restamp(self._view, self._revision)
                self._cond.notify_all()
        if changed:
            for listener in self._listeners:
                try:
                    listener(self._revision)
                except Exception:  # a listener's bug must not stop the cache
                    log.exception("watch cache listener failed")

    def _put(self, key: bytes, value: bytes) -> None:
        self._raw[key] = value
        k = key.decode()
        try:
            if k == self.keys.leader:
                self._leader = value.decode()
            elif k.startswith(self.keys.replicas):
                doc = codec.loads(value)
                self._replicas[doc["name"]] = doc["url"]
            elif k.startswith(self.keys.machines):
                m, mi = codec.decode_machine(value)
                self._machines[m.name] = (m, mi)
            elif k.startswith(self.keys.jobs):
                j, ji = codec.decode_job(value)
                self._jobs[j.key] = (j, ji)
            elif k.startswith(self.keys.tasks):
                t, ti = codec.decode_task(value)
                self._tasks[t.id] = (t, ti)
            elif k.startswith(self.keys.quotas):
                q, amount = codec.decode_quota(value)
                self._quotas[q] = amount
        except (codec.SchemaError, KeyError, ValueError) as err:
            log.error("watch cache: cannot read %s: %s", k, err)

    def _delete(self, key: bytes) -> None:
        self._raw.pop(key, None)
        k = key.decode()
        if k == self.keys.leader:
            self._leader = ""
        elif k.startswith(self.keys.replicas):
            self._replicas.pop(k[len(self.keys.replicas) :], None)
        elif k.startswith(self.keys.machines):
            self._machines.pop(k[len(self.keys.machines) :], None)
        elif k.startswith(self.keys.jobs):
            self._jobs.pop(k[len(self.keys.jobs) :], None)
        elif k.startswith(self.keys.tasks):
            user, name, index, inc = k[len(self.keys.tasks) :].split("/")
            self._tasks.pop(TaskId(f"{user}/{name}", int(index), int(inc)), None)
        elif k.startswith(self.keys.quotas):
            from spec.model import Band

            user, band = k[len(self.keys.quotas) :].split("/")
            self._quotas.pop(QuotaKey(user, Band(band)), None)


def _restamp(view: Cell, revision: int) -> Cell:
    """The same cell, known to be current up to a later revision (a progress notification)."""
    from dataclasses import replace

    return replace(view, revision=revision)
