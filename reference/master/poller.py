"""The leader's borglet poller: decides each machine's sync, when it is due, and sends it through the link shards (what the shards report is `shardreports`').

Every replica's link shard (linkshard.py) polls its share of the machines and sends the
leader what changed (`accept`), including the machines that stopped answering and for how
many polls; a machine is down only when no replica that can vouch for it reaches it
(`reach.judge`: the owner's miss hands it to the other replicas' shards first). The leader
sends no reads of its own: a machine is known from its shard's first report.

The leader decides every sync, numbers it and sends it through the shard that carries the
machine (`Link.relay`), one request per shard and chunk. Its answer is an acknowledgement
(and the base of the next delta): the shard that relayed it takes the borglet's answer as its
latest read of the machine and reports it with its other changes, so what the borglet runs
reaches the leader once, by the shards' reports (`ShardReports.accept`). Syncs go out when a desired set
changed (a placement, a kill, so a task starts without waiting), while a machine blocks a
held task, after a refusal, and every `sync_every` seconds. A sync that is not answered is
sent again, whole, at the next turn, and does not count against the machine, whose liveness
is the shard's polls' to tell. A refusal other than a newer epoch is an answer: the machine
is alive.

A new incarnation is held back (`reports.hold_back`) while an older process of its index is
still live on an up machine; the machine running the old one is synced every
`pollclock.HOLD_POLL_S` meanwhile, so the new one starts about that long after the old one is
gone. When each machine is due is `pollclock`'s to say.

Every sync carries this leader's epoch, a sequence number (one counter per leader, so a borglet
applies only syncs newer than the last it applied: one given up on after a timeout and
delivered late is refused) and the revision of the view it was computed at. What a sync's
body is (a delta or the whole set), what its answer means, whether a report is taken, and
how it merges into the cell are `intake`'s pure functions; this module holds the threads,
the locks and the clock.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

from reference.master import desired as desired_sets
from reference.master import intake, pollclock, reports, shards, work
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft, MachineInfo, borglet_task_id
from reference.master.intake import Answer, Said
from reference.master.shardreports import MachineSync, ShardReports
from reference.master.writer import NotLeader, WriteFailed, Writer
from spec.model import TaskId

log = logging.getLogger(__name__)

TURN_MIN_GAP_S = 0.05  # turns start at least this far apart, however many replies wake them
RELAY_CHUNK = 64  # syncs carried by one request to a shard
SYNC_EVERY_POLLS = 10  # a machine whose set is unchanged is synced this rarely


class Link(Protocol):
    """How the leader reaches the borglets through the link shards."""

    def owner(self, machine: str) -> str:
        """The replica whose shard polls `machine`."""
        ...

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send each {"machine", "address", "body"} as a sync through `owner`'s shard; one
        {"machine", "status", "body"} per item, status 0 when the borglet did not answer. The
        body of a 200 is the acknowledgement (the fence of the sync applied); the whole report
        only for a machine the shard does not poll (`LinkShard.relay`)."""
        ...


class Poller(ShardReports):
    """The sending side of the leader's poller: decides each machine's sync, when it is due, and sends it through the shard that carries the machine."""

    def __init__(
        self,
        cache: WatchCache,
        writer: Writer,
        *,
        cell_name: str,
        master_name: str,
        epoch: int,
        interval: float = 1.0,
        down_after: int = 3,
        on_poll: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        link: Link,
        sync_every: float | None = None,
    ) -> None:
        super().__init__(cache, writer, epoch=epoch, interval=interval, down_after=down_after, on_poll=on_poll, clock=clock)
        self.link = link
        self.sync_every = sync_every if sync_every is not None else interval * SYNC_EVERY_POLLS
        self.cell_name = cell_name
        self.master_name = master_name
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="poll")
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self._addresses: dict[str, str] = {}  # machine -> its borglet's address, kept after its removal
        self._seq = 0  # syncs sent by this leader, the last one's number
        # Every machine's desired set, kept from the changed keys of each view; what is sent
        # (the plan: the set less held tasks) and its signature; the view and reports they are of.
        self._desired = desired_sets.DesiredSets(cell_name)
        self._plan: dict[str, tuple[list[dict[str, Any]], set[TaskId]]] = {}
        self._signatures: dict[str, frozenset[str]] = {}
        self._plans_key: Any = None
        self._held: dict[str, list[reports.Hold]] = {}  # machine -> its held tasks
        self._unsent: set[str] = set()  # machines whose plan keeps a task not yet released
        # Of those, the ones whose sync was in flight at a refresh and that were not planned
        # again then: each is planned again in `_send_due`, just before its next sync goes.
        self._stale: set[str] = set()
        # The last refresh's removed machines that may still run a process, and its first up
        # machine not yet reported: what a plan made between refreshes holds back against.
        self._departed_live: Mapping[str, Mapping[str, str]] = {}
        self._first_unreported: str | None = None
        self._blocking: set[str] = set()  # machines whose processes block a hold
        self._gone: set[str] = set()  # removed machines that may still run a process
        self._departed_names: set[str] = set()
        # When each machine's next regular sync is due (a heap, with the time queued for each).
        self._due: list[tuple[float, str]] = []
        self._queued: dict[str, float] = {}
        self._rebuild_after = -math.inf  # no rebuild of the desired sets before this (pollclock.next_rebuild)
        self.refusals: dict[str, int] = {}  # refusal reason -> count
        self.holds: dict[str, reports.Hold] = {}  # task id -> why it is held, as of the last turn

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def nudge(self) -> None:
        """Look at the desired sets now (the cell changed)."""
        self._wake.set()

    # --- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            began = self.clock()
            try:
                self._turn()
            except Exception:  # one bad turn must not end the polling of the cell
                log.exception("poller turn failed")
            self._wake.wait(0.1)
            self._wake.clear()
            # Replies wake the loop; with many machines they would make a turn of each one.
            self._stop.wait(max(0.0, TURN_MIN_GAP_S - (self.clock() - began)))

    def _turn(self) -> None:
        cell = self.cache.cell()
        now = self.clock()
        with self._lock:
            key = (cell.revision, self._reported_version)
        if key != self._plans_key and now >= self._rebuild_after:
            # What each machine is sent depends on the view and on what the machines reported
            # alone: brought up to date when either changed, from what changed, and paced.
            cpu = time.thread_time()
            self._refresh(cell)
            self._plans_key = key
            took = self.clock() - now
            self._rebuild_after = pollclock.next_rebuild(now, took, time.thread_time() - cpu)
        self._send_due(cell, now)

    def _send_due(self, cell: Cell, now: float) -> None:
        """Sync the machines whose plan changed, whose sync is due, or that block a hold: the
        machines looked at are these, not every machine of the cell."""
        blocking = self._blocking
        with self._lock:
            while self._due and self._due[0][0] <= now:
                at, name = heapq.heappop(self._due)
                if self._queued.get(name) == at:
                    del self._queued[name]
                self._pending.add(name)
            names = self._pending | blocking
            self._pending = set()
        work.add("sync_checks", len(names))
        relayed: dict[str, list[tuple[Any, ...]]] = {}
        replanned = False
        for name in sorted(names):
            if name not in self._plan:
                continue  # no longer synced (removed, and nothing of it may run)
            address = cell.machines.get(name, MachineInfo()).address or self._addresses.get(name, "")
            with self._lock:
                if name not in self._reported:
                    continue  # its shard's first report makes it known
                st = self._machines.setdefault(name, MachineSync())
                if st.inflight:
                    continue  # `_poll_through` looks at it again once it is answered
                if name in self._stale:
                    # Its plan keeps a task not yet released and was made before the reports
                    # since: held back against them now, before the task is sent.
                    self._replan(cell, name, self._departed_live, self._first_unreported)
                    replanned = True
                    if name not in self._plan:
                        continue
                desired, ids = self._plan[name]
                signature = self._signatures[name]
                # The signatures compared last: equal sets cost a walk of each.
                if not pollclock.sync_due(st.schedule, now, name in blocking) and signature == st.signature:
                    self._queue(name, st)
                    continue
                if (
                    signature == st.signature and name not in blocking and name in cell.state.machines
                    and st.holds(signature)
                ):  # fmt: skip
                    # Its regular sync came due, but its borglet's latest report names the sync
                    # that gave it this very set: sending it again would change nothing.
                    st.schedule = pollclock.sync_skipped(st.schedule, now, self.sync_every)
                    self._queue(name, st)
                    work.add("syncs_skipped")
                    continue
                self._sites_sent(name, st.signature, signature)
                st.inflight, st.signature = True, signature
                st.schedule = pollclock.sync_sent(st.schedule, now, self.sync_every)
                self._queue(name, st)
                self._released.update(signature)
            if self._stop.is_set():
                return
            relayed.setdefault(self._carrier(name), []).append((name, address, desired, signature, ids, cell.revision))
        if replanned:
            self._settle_holds()
        for owner, items in relayed.items():
            for i in range(0, len(items), RELAY_CHUNK):
                self._pool.submit(self._poll_through, owner, items[i : i + RELAY_CHUNK])

    def _queue(self, name: str, st: MachineSync) -> None:
        """Remember when `name`'s next regular sync is due (under the lock)."""
        at = st.schedule.next_at
        if self._queued.get(name) != at:
            self._queued[name] = at
            heapq.heappush(self._due, (at, name))

    def _refresh(self, cell: Cell) -> None:
        """Bring the plans (desired sets less held tasks) to `cell` and the last reports: the
        machines the view's changes touched (`desired.DesiredSets`), those with a held task or
        a kept one not yet released (unless their sync is in flight: those are planned again
        just before their next sync, in `_send_due`), and the removed ones still synced."""
        touched = self._desired.update(cell, getattr(self.cache, "changes", None), getattr(self.cache, "reloads", 0))
        machines = cell.state.machines
        full = touched is None
        # What the poller keeps of each machine follows every write of its record; its plan,
        # only the writes that changed its set.
        names: Iterable[str] = machines if touched is None else touched | self._desired.machines_changed
        for name in names:
            info = cell.machines.get(name)
            if info is not None and info.address:
                self._addresses[name] = info.address
        with self._lock:
            if full:
                self._unreported = {n for n, m in machines.items() if m.up and n not in self._reported}
                self._gone = {n for n in (*self._reported, *self._machines) if n not in machines}
                wanted = {d["task_id"] for desired, _ in self._desired.sets.values() for d in desired}
                self._released &= wanted | {t for r in self._reported.values() for t in r}
            else:
                for name in names:
                    m = machines.get(name)
                    if m is not None and m.up and name not in self._reported:
                        self._unreported.add(name)
                    else:
                        self._unreported.discard(name)
                    if m is None:
                        self._gone.add(name)
                    else:
                        self._gone.discard(name)
                self._released.difference_update(self._desired.dropped)
            sent = {n: st.signature for n in self._gone if (st := self._machines.get(n)) is not None}
            departed = reports.departed_live(
                {n: self._reported[n] for n in self._gone if n in self._reported}, machines, sent
            )
            departed = {n: v for n, v in departed.items() if n in self._addresses}
            self._gone = {n for n in self._gone if n in self._reported or sent.get(n)}
            first_unreported = min(self._unreported) if self._unreported else None
            self._departed_live, self._first_unreported = departed, first_unreported
            if full:
                redo = {*self._desired.sets, *self._plan, *departed}
            else:
                # A machine whose sync is in flight cannot be sent its plan before the answer:
                # planning it at every refresh until then (thousands of machines in a fill
                # whose relays are slow) is work that changes nothing. `_send_due` plans it
                # once its turn to be sent comes.
                redo = set(touched or ()) | set(self._held) | (self._unsent - self._in_flight(self._unsent)) | set(departed)
                redo |= self._departed_names
            self._departed_names = set(departed)
            for name in redo:
                self._replan(cell, name, departed, first_unreported)
            self._stale |= self._in_flight(self._unsent)
        self._settle_holds()

    def _in_flight(self, names: Iterable[str]) -> set[str]:
        """Those of `names` whose sync is in flight (under the lock)."""
        return {n for n in names if (st := self._machines.get(n)) is not None and st.inflight}

    def _settle_holds(self) -> None:
        """The held tasks of every plan: new holds shown, the machines that block them noted."""
        with self._lock:
            holds = {h.task_id: h for held in self._held.values() for h in held}
        self._note_holds(holds)
        self._blocking = {h.machine for h in holds.values()}

    def _replan(
        self, cell: Cell, name: str, departed: Mapping[str, Mapping[str, str]], first_unreported: str | None
    ) -> None:
        """Compute `name`'s plan: its desired set with held tasks taken out (`reports.hold_back`),
        looking only at the processes of the indices it may hold (under the lock)."""
        self._held.pop(name, None)
        self._unsent.discard(name)
        self._stale.discard(name)
        entry = ([], set()) if name in departed else self._desired.sets.get(name)
        if entry is None:
            self._plan.pop(name, None)
            self._signatures.pop(name, None)
            return
        desired, ids = entry
        released = {tid for d in desired if (tid := d["task_id"]) in self._released or _seen(cell, d)}
        work.add("hold_checks", len(desired))
        if len(released) < len(desired):
            keys = {(str(d["job"]), int(d["index"])) for d in desired if d["task_id"] not in released}
            live = self._live(keys, cell.state.machines, departed)
            desired, held = reports.hold_back(desired, live, released, [first_unreported] if first_unreported else [])
            if held:
                self._held[name] = held
                held_ids = {h.task_id for h in held}
                ids = {t for t in ids if borglet_task_id(t, cell.task_info(t)) not in held_ids}
            if any(d["task_id"] not in released for d in desired):
                self._unsent.add(name)
        signature = frozenset(d["task_id"] for d in desired)
        if self._signatures.get(name) != signature:
            self._pending.add(name)
        self._plan[name], self._signatures[name] = (desired, ids), signature

    def _live(
        self, keys: Iterable[reports.IndexKey], machines: Mapping[str, Any], departed: Mapping[str, Any]
    ) -> dict[reports.IndexKey, list[tuple[str, str]]]:
        """(job, index) -> [(machine, task id)] of the processes of `keys` that may be live, as
        `reports.live_by_index` over up and removed machines' reports and the syncs sent to
        them, read from the sites of each index (under the lock)."""
        out: dict[reports.IndexKey, list[tuple[str, str]]] = {}
        for key in keys:
            for machine, tids in self._sites.get(key, {}).items():
                m = machines.get(machine)
                if (m is None and machine not in departed) or (m is not None and not m.up):
                    continue
                reported = self._reported.get(machine, {})
                st = self._machines.get(machine)
                for tid in tids:
                    work.add("hold_checks")
                    state = reported.get(tid) or ("QUEUED" if st is not None and tid in st.signature else "")
                    if state in reports.LIVE_STATES:
                        out.setdefault(key, []).append((machine, tid))
            if len(out.get(key, ())) > 1:
                out[key].sort()
        return out

    def _note_holds(self, holds: dict[str, reports.Hold]) -> None:
        """Count new holds and show them on their tasks (one write per hold, not per turn)."""
        new = [h for tid, h in holds.items() if tid not in self.holds]
        self.holds = holds
        if not new:
            return
        for h in new:
            log.info("holding %s back: %s still runs on %s", h.task_id, h.blocker, h.machine)
            if self._on_poll is not None:
                self._on_poll("hold")
        if not self._stop.is_set():
            self._pool.submit(self._show_holds, new)

    def _show_holds(self, holds: list[reports.Hold]) -> None:
        def change(d: Draft) -> None:
            reports.show_holds(d, holds)

        try:
            self.writer.mutate(change)
        except (NotLeader, WriteFailed) as err:
            log.info("holds not recorded: %s", err)
        except Exception:
            log.exception("recording holds failed")

    def _poll_through(self, owner: str, items: list[tuple[Any, ...]]) -> None:
        """Sync several machines through the shard of `owner`, in one request.

        An answer is an acknowledgement: what the borglet runs reaches the leader once, in the
        report of the shard that relayed the sync (`ShardReports.accept`), so no answer is
        written here and each machine is free for its next sync as soon as its answer is read.
        (When the answers carried the facts too, each was written again beside the shard's
        report of the same state, and checked against it for staleness a second time.)"""
        try:
            sent = []
            for name, address, desired, signature, ids, revision in items:
                seq, body = self._prepare(name, desired, signature, ids, revision)
                sent.append({"machine": name, "address": address, "body": body, "seq": seq})
            try:
                answers = {str(a.get("machine")): a for a in self.link.relay(owner, sent)}
            except Exception:
                log.exception("relay through %s failed", owner)
                answers = {}
            for (name, address, _desired, signature, ids, _revision), item in zip(items, sent, strict=True):
                said = answers.get(name) or {}
                answer = self._settle(name, address, item["seq"], signature, int(said.get("status") or 0),
                                      said.get("body"), str(said.get("body") or said.get("error") or ""))  # fmt: skip
                self._handle(name, answer, ids)
        finally:
            with self._lock:
                for name, *_ in items:
                    self._machines[name].inflight = False
                    self._pending.add(name)
            self._wake.set()

    def _carrier(self, name: str) -> str:
        """The replica whose shard carries `name`'s syncs: its owner, or one that reaches it while the owner does not."""
        owner = self.link.owner(name)
        leader = shards.leader_name(self.cache.cell().leader)
        with self._lock:
            return self._sightings.carrier(name, owner, self.clock(), leader)

    def _handle(self, name: str, answer: Answer, ids: set[TaskId]) -> None:
        """Act on a sync's answer. An acknowledgement changes nothing in the cell: the machine's
        facts come in its shard's report. Only a removed machine, which no shard polls, is
        answered with its whole report, read here for the processes it may still run."""
        try:
            if answer.said is Said.REPLY:
                reply = answer.reply or {}
                if "tasks" in reply and name not in self.cache.cell().state.machines:
                    self._answer(name, reply, ids)  # writes nothing: the machine is not in the cell
                return
            if answer.said is Said.REFUSED:
                with self._lock:
                    st = self._machines[name]
                    st.schedule = pollclock.refused(st.schedule, self.clock())
            elif name not in self.cache.cell().state.machines:
                self._departed_missed(name)  # a removed machine is polled by no shard: its silence counts here
            else:
                # Not a missed poll: the shard's reads tell whether the machine lives. The next
                # turn sends the whole set again.
                with self._lock:
                    st = self._machines[name]
                    st.schedule = replace(
                        st.schedule, next_at=min(st.schedule.next_at, self.clock() + self.interval)
                    )
        except (NotLeader, WriteFailed) as err:
            log.info("poll of %s not recorded: %s", name, err)
        except Exception:
            log.exception("poll of %s failed", name)

    def _prepare(
        self, name: str, desired: list[dict[str, Any]], ids: frozenset[str], tasks: set[TaskId], revision: int
    ) -> tuple[int, dict[str, Any]]:
        """The next sync of `name`: its sequence number and body (`intake.sync_body`); `tasks`,
        its tasks as the cell names them, are kept for the reports that will name it."""
        if self._on_poll is not None:
            self._on_poll("sent")
        with self._lock:
            self._seq += 1
            seq = self._seq
            st = self._machines[name]
            st.sent(seq, frozenset(tasks))
            base, base_seq = st.acked, st.acked_seq
            st.acked = None  # unknown until this one is answered
        body = intake.sync_body(
            master=self.master_name, epoch=self.epoch, seq=seq, revision=revision,
            desired=desired, ids=ids, base=base, base_seq=base_seq,
        )  # fmt: skip
        return seq, body

    def _settle(
        self, name: str, address: str, seq: int, ids: frozenset[str], status: int, body: Any, text: str
    ) -> Answer:
        """Read the borglet's answer to sync `seq` (`intake.read_answer`, status 0: none) and
        record what it says of the borglet: a refusal counted, a distrust on the machine, an
        acknowledged sync as the base of the next delta."""
        answer = intake.read_answer(status, body, text)
        if answer.said in (Said.REFUSED, Said.LATER_TERM):
            self.refusals[answer.reason] = self.refusals.get(answer.reason, 0) + 1
            if self._on_poll is not None:
                self._on_poll(f"refused_{answer.reason}")
        if answer.said is Said.LATER_TERM:
            log.warning("borglet at %s has seen a newer leader epoch: %s", address, text)
        elif answer.said is Said.REFUSED:
            log.info("sync %d to %s refused (%s): %s", seq, name, answer.reason, text)
        elif answer.said is Said.DISTRUSTED:
            # Alive but refusing this cell's signature (its clock, another key): the reason goes
            # on the machine record once, not a warning a second without it.
            try:
                self._note_refusal(name, answer.reason)
            except (NotLeader, WriteFailed) as err:
                log.info("refusal of %s not recorded: %s", name, err)
        elif answer.said is Said.REPLY:
            with self._lock:
                st = self._machines[name]
                st.acked, st.acked_seq = ids, seq
        elif status == 0:
            log.debug("sync to %s failed: %s", address, text)
        else:
            log.warning("borglet at %s answered %d: %s", address, status, text[:200])
        return answer


def _seen(cell: Cell, d: dict[str, Any]) -> bool:
    """Whether the cell shows the task of entry `d` reported by its borglet: released."""
    return cell.task_info(TaskId(str(d["job"]), int(d["index"]), int(d["incarnation"]))).seen
