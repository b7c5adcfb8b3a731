"""The leader's borglet poller: sends each machine its desired set, reads back task states, marks silent machines down.

Each machine is synced every `interval` seconds, and at once when its desired set changes
(a placement, a kill), so a task starts without waiting for the next poll. A machine that
misses `down_after` polls in a row is marked down through the spec (`machine_down`: its tasks
are lost and restarted elsewhere by policy); one that answers again is marked up.

A new incarnation is held back (`reports.hold_back`) while an older process of its index is
still live on an up machine; the machine running the old one is polled every
`pollclock.HOLD_POLL_S` meanwhile, so the new one starts about that long after the old one is
gone. A machine this poller has no reply from yet is first read (GET /v1/state) rather than
synced, so a new leader learns what runs there before it sends, or takes away, anything.
When each machine is due, and when it is down, is `pollclock`'s to say.

Every sync carries this leader's epoch, a sequence number (one counter per leader, so a borglet
applies only syncs newer than the last it applied: one given up on after a timeout and
delivered late is refused) and the revision of the view it was computed at. A machine with
many tasks is sent only what changed since the last sync it acknowledged; after a timeout or
a refusal the next sync carries the whole set again. A refusal other than a newer epoch is an
answer, not a missed poll: the machine is alive.

With link shards (`link`, the default of a replica; see linkshard.py) the poller sends no
reads of its own: every replica's shard polls its share of the machines and sends the
leader what changed (`accept`), including the machines that stopped answering and for how
many polls; a machine is down only when no replica that can vouch for it reaches it
(`reach.judge`: the owner's miss hands it to the other replicas' shards first). The leader still decides every sync, numbers it and sends it through the shard
that owns the machine (`Link.relay`), one request per shard and chunk; a sync that is not
answered is sent again, whole, at the next turn, and does not count against the machine,
whose liveness is the shard's polls' to tell. Syncs then go out when a desired set changed,
while a machine blocks a held task, after a refusal, and every `sync_every` seconds.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol

import httpx

from reference import channel, fastjson
from reference.master import pollclock, reach, reports, shards
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft, MachineInfo, borglet_task_id
from reference.master.linkshard import refusal_reason
from reference.master.writer import NotLeader, WriteFailed, Writer
from spec.model import TaskId, TaskState

log = logging.getLogger(__name__)

DELTA_MIN_TASKS = 64  # a machine with at least this many desired tasks gets deltas
TURN_MIN_GAP_S = 0.05  # turns start at least this far apart, however many replies wake them
RELAY_CHUNK = 64  # syncs carried by one request to a shard
SYNC_EVERY_POLLS = 10  # with link shards: a machine whose set is unchanged is synced this rarely
SWEEP_EVERY_S = 30.0  # how often the leader forgets the sightings of removed machines and gone replicas


class Link(Protocol):
    """How the leader reaches the borglets through the link shards."""

    def owner(self, machine: str) -> str:
        """The replica whose shard polls `machine`."""
        ...

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send each {"machine", "address", "body"} as a sync through `owner`'s shard; one
        {"machine", "status", "body"} per item, status 0 when the borglet did not answer."""
        ...


# How long a removed machine that still ran processes may stay silent before they are taken
# as stopped: longer than a borglet's kill of its tasks on exit (3 s of grace, 2 s more).
DEPARTED_SILENT_S = 10.0


@dataclass
class _Machine:
    schedule: pollclock.Schedule = pollclock.Schedule()
    signature: frozenset[str] = frozenset()
    inflight: bool = False
    # The seq and task ids of the last sync the borglet acknowledged: the base of a delta.
    acked_seq: int = 0
    acked: frozenset[str] | None = None
    acked_ids: frozenset[TaskId] = frozenset()  # the same sync's tasks, as the cell names them


class Poller:
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
        link: Link | None = None,
        sync_every: float | None = None,
        auth: httpx.Auth | None = None,  # signs each request (reference/channel.py)
    ) -> None:
        self.cache = cache
        self.link = link
        self.sync_every = (
            sync_every if sync_every is not None else (interval * SYNC_EVERY_POLLS if link is not None else interval)
        )
        self.writer = writer
        self.cell_name = cell_name
        self.master_name = master_name
        self.epoch = epoch
        self.interval = interval
        self.down_after = down_after
        self._on_poll = on_poll
        self.clock = clock
        self._machines: dict[str, _Machine] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="poll")
        self._http = httpx.Client(timeout=httpx.Timeout(max(0.5, min(interval, 2.0)), connect=0.5), auth=auth)
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self.usage: dict[TaskId, tuple[tuple[str, int], ...]] = {}
        # machine -> {borglet task id: state} from its last reply: what really runs there.
        self._reported: dict[str, dict[str, str]] = {}
        self._addresses: dict[str, str] = {}  # machine -> its borglet's address, kept after its removal
        self._silent_since: dict[str, float] = {}  # removed machine -> its first unanswered poll since an answer
        self._released: set[str] = set()  # borglet task ids sent at least once
        self._seq = 0  # syncs sent by this leader, the last one's number
        self._memo: reports.Memo = {}  # desired-set entries reused across turns
        self._reported_version = 0  # moves whenever a machine's reported tasks change
        self._plans: tuple[
            Any,
            dict[str, tuple[list[dict[str, Any]], set[TaskId]]],
            set[str],
            dict[str, frozenset[str]],
        ] = (None, {}, set(), {})
        self._rebuild_after = -math.inf  # no rebuild of the desired sets before this (pollclock.next_rebuild)
        self.refusals: dict[str, int] = {}  # refusal reason -> count
        # (machine, shard) -> (version, report): the base of the next change that shard sends
        # (a machine handed over is polled by several shards at once: one base each).
        self._copies: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        # Who reaches each machine (reach.py): machine -> shard -> its last word on it, the
        # shards heard from and when, and the machines handed over since when.
        self._sightings: dict[str, dict[str, reach.Sighting]] = {}
        self._heard: dict[str, float] = {}
        self._handed: dict[str, float] = {}
        self._refusing: dict[str, str] = {}  # machine -> why its borglet refuses the cell, as recorded
        self._swept_at = -math.inf
        # A shard heard from within this vouches for what it last said; it sends a heartbeat
        # every poll interval.
        self.vouch_s = 3 * interval + 2.0
        # A replica handed a machine has this long to say anything of it before it is not waited for.
        self.grace_s = (down_after + 3) * interval + 2.0
        self.shard_batches = 0
        self.holds: dict[str, reports.Hold] = {}  # task id -> why it is held, as of the last turn

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()

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
        if key != self._plans[0] and now >= self._rebuild_after:
            # What each machine is sent depends on the view and on what the machines reported
            # alone: built when either changed, not on every turn, and paced.
            cpu = time.thread_time()
            if len(self._memo) > 2 * len(cell.state.tasks) + 1000:
                self._memo = {}
            desired = {
                name: reports.desired_set(cell, name, self.cell_name, self._memo) for name in cell.state.machines
            }
            departed = self._departed(cell)
            for name in departed:
                desired[name] = ([], set())  # removed: its borglet is told to stop what it still runs
            plans, blocking = self._hold_back(cell, desired, departed)
            signatures = {name: frozenset(d["task_id"] for d in keep) for name, (keep, _) in plans.items()}
            self._plans = (key, plans, blocking, signatures)
            took = self.clock() - now
            self._rebuild_after = pollclock.next_rebuild(now, took, time.thread_time() - cpu)
        _, plans, blocking, signatures = self._plans
        relayed: dict[str, list[tuple[Any, ...]]] = {}
        for name, (desired, ids) in plans.items():
            signature = signatures[name]
            address = cell.machines.get(name, MachineInfo()).address or self._addresses.get(name, "")
            with self._lock:
                st = self._machines.setdefault(name, _Machine())
                if name not in self._reported:
                    if self.link is not None:
                        continue  # its shard's first report makes it known
                    if st.inflight or not pollclock.read_due(st.schedule, now):
                        continue
                    st.inflight, st.schedule = (
                        True,
                        pollclock.read_sent(st.schedule, now, self.interval),
                    )
                    work: tuple[Any, ...] = (self._probe, name, address)
                else:
                    # The signatures compared last: equal sets cost a walk of each.
                    if st.inflight or (
                        not pollclock.sync_due(st.schedule, now, name in blocking) and signature == st.signature
                    ):
                        continue
                    st.inflight, st.signature = True, signature
                    st.schedule = pollclock.sync_sent(st.schedule, now, self.sync_every)
                    self._released.update(signature)
                    work = (self._poll, name, address, desired, signature, ids, cell.revision)
            if self._stop.is_set():
                return
            if self.link is not None and work[0] == self._poll:
                relayed.setdefault(self._carrier(name), []).append(work[1:])
                continue
            self._pool.submit(*work)
        for owner, items in relayed.items():
            for i in range(0, len(items), RELAY_CHUNK):
                self._pool.submit(self._poll_through, owner, items[i : i + RELAY_CHUNK])

    def _hold_back(
        self,
        cell: Cell,
        plans: dict[str, tuple[list[dict[str, Any]], set[TaskId]]],
        departed: Mapping[str, Mapping[str, str]] | None = None,
    ) -> tuple[dict[str, tuple[list[dict[str, Any]], set[TaskId]]], set[str]]:
        """Take held tasks out of the desired sets; returns the sets and the machines whose
        reports block a hold (they are polled faster until it is released)."""
        # Removed machines still synced (`_departed`) hold back as up machines do.
        up = [n for n, m in cell.state.machines.items() if m.up] + [n for n in plans if n not in cell.state.machines]
        wanted = {str(d["task_id"]) for desired, _ in plans.values() for d in desired}
        with self._lock:
            # What an up machine was last sent counts as running there until its report says
            # otherwise: a sync whose reply is not in yet may start it at any moment.
            known = {
                n: reports.with_sent(r, st.signature) if (st := self._machines.get(n)) is not None else r
                for n, r in self._reported.items()
            }
            live = reports.live_by_index({**known, **(departed or {})}, up)
            unreported = [n for n in up if n not in self._reported]
            # Forget ids no machine wants any more, so the set stays as small as the cell.
            self._released &= wanted
            released = set(self._released)
            for reported in self._reported.values():
                released.update(reported)
        # Tasks their borglets were seen running count as released; one set for every machine
        # (a task id names one placement, so it is in one machine's desired set), not a copy of
        # `released` per machine: that was most of a rebuild's CPU in a cell of 1,000 machines.
        released.update(d["task_id"] for desired, _ in plans.values() for d in desired if cell.task_info(_task_id(d)).seen)
        out: dict[str, tuple[list[dict[str, Any]], set[TaskId]]] = {}
        holds: dict[str, reports.Hold] = {}
        for name, (desired, ids) in plans.items():
            keep, held = reports.hold_back(desired, live, released, unreported)
            holds.update((h.task_id, h) for h in held)
            held_ids = {h.task_id for h in held}
            out[name] = (keep, {t for t in ids if not _held(t, cell, held_ids)})
        self._note_holds(holds)
        return out, {h.machine for h in holds.values()}

    def _departed(self, cell: Cell) -> dict[str, dict[str, str]]:
        """Removed machines still to be synced (`reports.departed_live`) whose address is known,
        with what they may still run; remembers the address of every machine in the cell for
        when it is removed."""
        for name, info in cell.machines.items():
            if info.address:
                self._addresses[name] = info.address
        with self._lock:
            sent = {n: st.signature for n, st in self._machines.items() if n not in cell.state.machines}
            departed = reports.departed_live(self._reported, cell.state.machines, sent)
        return {n: v for n, v in departed.items() if n in self._addresses}

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
            for h in holds:
                tid = _task_id_of(h.task_id)
                if tid is None:
                    continue
                task, info = d.state.tasks.get(tid), d.task_info(tid)
                if task is None or task.state is not TaskState.RUNNING or info.seen:
                    continue
                if borglet_task_id(tid, info) == h.task_id:
                    d.set_task_info(tid, replace(info, borglet_state=h.describe()))

        try:
            self.writer.mutate(change)
        except (NotLeader, WriteFailed) as err:
            log.info("holds not recorded: %s", err)
        except Exception:
            log.exception("recording holds failed")

    def _poll(
        self,
        name: str,
        address: str,
        desired: list[dict[str, Any]],
        signature: frozenset[str],
        ids: set[TaskId],
        revision: int,
    ) -> None:
        try:
            reply = self._sync(name, address, desired, signature, revision)
            self._handle(name, reply, signature, ids)
        finally:
            with self._lock:
                self._machines[name].inflight = False
            self._wake.set()

    def _poll_through(self, owner: str, items: list[tuple[Any, ...]]) -> None:
        """Sync several machines through the shard of `owner`, in one request.

        A machine whose answer changes nothing is free for its next sync at once; the changes
        the others' answers make are queued to the writer together (one group commit, not one
        commit after another on this thread) and each machine is freed once its own is written.
        (Written one by one here, each waiting out a group commit of a busy leader, the last
        answers of a request waited a minute, and their machines with them: a 10,000-task job
        reached some machines a minute after it was placed.)"""
        queued: set[str] = set()
        try:
            sent = []
            for name, address, desired, signature, _ids, revision in items:
                seq, body = self._prepare(name, desired, signature, revision)
                sent.append({"machine": name, "address": address, "body": body, "seq": seq})
            try:
                answers = {str(a.get("machine")): a for a in self.link.relay(owner, sent)}  # type: ignore[union-attr]
            except Exception:
                log.exception("relay through %s failed", owner)
                answers = {}
            writes: list[tuple[str, Callable[[Draft], None]]] = []
            for (name, address, _desired, signature, ids, _revision), item in zip(items, sent, strict=True):
                answer = answers.get(name) or {}
                reply = self._settle(name, address, item["seq"], signature, int(answer.get("status") or 0),
                                     answer.get("body"), str(answer.get("body") or answer.get("error") or ""))  # fmt: skip
                before = len(writes)
                self._handle(name, reply, signature, ids, writes)
                if len(writes) == before:
                    self._free(name)
            for name, change in writes:
                self.writer.submit(change, self._written(name, change))
                queued.add(name)
        finally:
            with self._lock:
                for name, *_ in items:
                    if name not in queued:
                        self._machines[name].inflight = False
            self._wake.set()

    def _free(self, name: str) -> None:
        """The machine may be sent its next sync."""
        with self._lock:
            self._machines[name].inflight = False
        self._wake.set()

    def _written(self, name: str, change: Callable[[Draft], None]) -> Callable[[Any], None]:
        """What the writer calls once the change an answer of `name` made is written or failed."""

        def done(request: Any) -> None:
            try:
                error = request.error
                if error is None:
                    self._usage_written(name, change)
                elif isinstance(error, (NotLeader, WriteFailed)):
                    log.info("poll of %s not recorded: %s", name, error)
                else:
                    log.error("poll of %s failed", name, exc_info=error)
            finally:
                self._free(name)

        return done

    def _handle(
        self,
        name: str,
        reply: dict[str, Any] | None,
        signature: frozenset[str],
        ids: set[TaskId],
        writes: list[tuple[str, Callable[[Draft], None]]] | None = None,
    ) -> None:
        """Record a sync's answer; with `writes`, the change it makes is added there for the
        caller to queue to the writer instead of written here."""
        try:
            if reply is None:
                if self.link is None or name not in self.cache.cell().state.machines:
                    self._missed(name)  # a removed machine is polled by no shard: its misses count here
                else:
                    # Not a missed poll: the shard's reads tell whether the machine lives.
                    # The next turn sends the whole set again.
                    with self._lock:
                        st = self._machines[name]
                        st.schedule = replace(
                            st.schedule,
                            next_at=min(st.schedule.next_at, self.clock() + self.interval),
                        )
            elif reply.get("refused"):
                with self._lock:
                    st = self._machines[name]
                    st.schedule = pollclock.refused(st.schedule, self.clock())
            else:
                with self._lock:
                    self._machines[name].acked_ids = frozenset(ids)
                if writes is None:
                    self._answered(name, reply, ids)
                elif (change := self._answer(name, reply, ids)) is not None:
                    writes.append((name, change))
        except (NotLeader, WriteFailed) as err:
            log.info("poll of %s not recorded: %s", name, err)
        except Exception:
            log.exception("poll of %s failed", name)

    def _probe(self, name: str, address: str) -> None:
        """Read what a machine runs without changing it: the first contact of this poller."""
        try:
            response = self._http.get(f"{address.rstrip('/')}/v1/state", headers=channel.to_machine(name))
            reply = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as err:
            log.debug("state of %s not read: %s", name, err)
            reply = None
        try:
            if reply is None:
                self._missed(name)
            else:
                self._record_report(name, reply)
                with self._lock:
                    st = self._machines[name]
                    st.schedule = pollclock.read_answered(st.schedule)
        except (NotLeader, WriteFailed) as err:
            log.info("probe of %s not recorded: %s", name, err)
        except Exception:
            log.exception("probe of %s failed", name)
        finally:
            with self._lock:
                self._machines[name].inflight = False
            self._wake.set()

    def _record_report(self, name: str, reply: dict[str, Any]) -> None:
        reported = {
            str(t.get("task_id")): str(t.get("state", "")) for t in reply.get("tasks", []) if isinstance(t, dict)
        }
        with self._lock:
            if self._reported.get(name) != reported:
                self._reported[name] = reported
                self._reported_version += 1

    def _sync(
        self,
        name: str,
        address: str,
        desired: list[dict[str, Any]],
        ids: frozenset[str],
        revision: int,
    ) -> dict[str, Any] | None:
        """Send one sync; the reply, {"refused": reason} for a refusal, None for no answer."""
        seq, body = self._prepare(name, desired, ids, revision)
        try:
            response = self._http.post(f"{address.rstrip('/')}/v1/sync", json=body, headers=channel.to_machine(name))
        except httpx.HTTPError as err:
            log.debug("sync to %s failed: %s", address, err)
            return None
        try:
            parsed: Any = fastjson.loads(response.content)
        except ValueError:
            parsed = None
        return self._settle(name, address, seq, ids, response.status_code, parsed, response.text)

    def _prepare(
        self, name: str, desired: list[dict[str, Any]], ids: frozenset[str], revision: int
    ) -> tuple[int, dict[str, Any]]:
        """The next sync of `name`: its sequence number and body (a delta on the last
        acknowledged sync for a machine with many tasks)."""
        if self._on_poll is not None:
            self._on_poll("sent")
        with self._lock:
            self._seq += 1
            seq = self._seq
            st = self._machines[name]
            base, base_seq = st.acked, st.acked_seq
            st.acked = None  # unknown until this one is answered
        body: dict[str, Any] = {
            "master": self.master_name,
            "epoch": self.epoch,
            "seq": seq,
            "revision": revision,
        }
        if base is not None and len(desired) >= DELTA_MIN_TASKS:
            body["delta"] = {
                "base_seq": base_seq,
                "add": [d for d in desired if d["task_id"] not in base],
                "remove": sorted(base - ids),
            }
        else:
            body["tasks"] = desired
        return seq, body

    def _settle(
        self,
        name: str,
        address: str,
        seq: int,
        ids: frozenset[str],
        status: int,
        body: Any,
        text: str,
    ) -> dict[str, Any] | None:
        """What the borglet's answer to sync `seq` means: the reply, {"refused": reason}, or
        None for no answer (status 0)."""
        if status == 0:
            log.debug("sync to %s failed: %s", address, text)
            return None
        if status == 409:
            reason = _refusal_reason(body)
            self.refusals[reason] = self.refusals.get(reason, 0) + 1
            if self._on_poll is not None:
                self._on_poll(f"refused_{reason}")
            if reason == "stale_epoch":
                log.warning("borglet at %s has seen a newer leader epoch: %s", address, text)
                return None
            log.info("sync %d to %s refused (%s): %s", seq, name, reason, text)
            return {"refused": reason}
        if status in (401, 403):
            # Alive but refusing this cell's signature (its clock, another key): the reason goes
            # on the machine record once, not a warning a second without it.
            try:
                self._note_refusal(name, refusal_reason(body if isinstance(body, dict) else text.encode()))
            except (NotLeader, WriteFailed) as err:
                log.info("refusal of %s not recorded: %s", name, err)
            return None
        if status != 200 or not isinstance(body, dict):
            log.warning("borglet at %s answered %d: %s", address, status, text[:200])
            return None
        with self._lock:
            st = self._machines[name]
            st.acked, st.acked_seq = ids, seq
        return body

    # --- what the link shards send ---------------------------------------------------------------

    def accept(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Take a shard's batch: whole reports and changes to the ones it sent before, and the
        machines that missed polls. Returns the machines whose change could not be applied
        (this leader lacks its base): the shard sends them whole next time."""
        shard = str(batch.get("shard", ""))
        cell = self.cache.cell()
        need_full: list[str] = []
        known: list[tuple[str, dict[str, Any]]] = []
        with self._lock:
            self.shard_batches += 1
            for name, entry in (batch.get("reports") or {}).items():
                if not isinstance(entry, dict):
                    continue
                version = int(entry.get("version") or 0)
                if isinstance(entry.get("report"), dict):
                    report = entry["report"]
                else:
                    copy = self._copies.get((name, shard))
                    self._sightings.setdefault(name, {})[shard] = reach.Sighting(True)  # it answered
                    if copy is None or copy[0] != int(entry.get("base") or -1):
                        need_full.append(name)
                        self._copies.pop((name, shard), None)
                        continue
                    report = shards.apply(copy[1], entry.get("change") or {})
                self._copies[(name, shard)] = (version, report)
                self._sightings.setdefault(name, {})[shard] = reach.Sighting(True)
                if name in cell.state.machines:
                    known.append((name, report))
        # One write for the whole batch: a round of a thousand machines is one group commit.
        changes: list[tuple[str, Callable[[Draft], None]]] = []
        for name, report in known:
            try:
                if self._stale(name, report):
                    # Its facts are not applied, and the shard's next change would be made
                    # against it: a process it shows started would never be confirmed. The
                    # shard sends that machine whole next time, read after the sync.
                    need_full.append(name)
                    with self._lock:
                        self._copies.pop((name, shard), None)
                    continue
                change = self._shard_report(name, report)
            except Exception:
                log.exception("report of %s failed", name)
                continue
            if change is not None:
                changes.append((name, change))
        if changes:

            def batch_change(d: Draft) -> None:
                for name, change in changes:
                    try:
                        change(d)
                    except Exception:  # one machine's facts must not cost the others theirs
                        log.exception("report of %s not applied", name)

            try:
                self.writer.mutate(batch_change)
                for name, change in changes:
                    self._usage_written(name, change)
            except (NotLeader, WriteFailed) as err:
                log.info("reports of %d machine(s) not recorded: %s", len(changes), err)
        missed = {str(n): int(k) for n, k in (batch.get("missed") or {}).items() if n in cell.state.machines}
        refused = {str(n): str(r) for n, r in (batch.get("refused") or {}).items() if n in cell.state.machines}
        try:
            poll = self._reach(shard, missed, refused, cell)
        except (NotLeader, WriteFailed) as err:
            log.info("misses not recorded: %s", err)
            poll = {}
        self._wake.set()
        return {"need_full": need_full, "poll": poll}

    def _reach(
        self, shard: str, missed: dict[str, int], refused: dict[str, str], cell: Cell
    ) -> dict[str, str]:
        """Take a shard's misses and refusals, judge the machines nobody may reach
        (`reach.judge`: down only when no replica that can vouch reaches it) and return the
        machines handed to this shard beyond its share: name -> borglet address."""
        now = self.clock()
        with self._lock:
            if shard:
                self._heard[shard] = now
            for name, misses in missed.items():
                self._sightings.setdefault(name, {})[shard] = reach.Sighting(False, misses)
            for name in refused:
                self._sightings.setdefault(name, {})[shard] = reach.Sighting(True)  # an answer: alive
            vouching = [r for r, at in self._heard.items() if now - at <= self.vouch_s and r in cell.replicas]
            if shard and shard not in vouching:
                vouching.append(shard)  # this replica, before its registration shows
            judged = {n for n in (*missed, *self._handed) if n in cell.state.machines}
            verdicts: dict[str, reach.Verdict] = {}
            for name in judged:
                verdict = reach.judge(
                    name, vouching, self._sightings.get(name, {}), self.down_after,
                    handed_at=self._handed.get(name), now=now, grace_s=self.grace_s,
                )  # fmt: skip
                verdicts[name] = verdict
                if len(verdict.pollers) > 1:
                    self._handed.setdefault(name, now)
                else:
                    self._handed.pop(name, None)
            for name in list(self._handed):
                if name not in cell.state.machines:
                    self._handed.pop(name, None)
            if now - self._swept_at >= SWEEP_EVERY_S:
                # What removed machines and gone replicas said is no one's word any more.
                self._swept_at = now
                for name in [n for n in self._sightings if n not in cell.state.machines]:
                    del self._sightings[name]
                for r in [r for r in self._heard if r not in cell.replicas and now - self._heard[r] > self.vouch_s]:
                    del self._heard[r]
                    for said in self._sightings.values():
                        said.pop(r, None)
        for name, reason in refused.items():
            self._note_refusal(name, reason)
        for name, verdict in verdicts.items():
            if verdict.down:
                self._mark_down(name, verdict.reason)
        return {
            n: cell.machines[n].address
            for n, v in verdicts.items()
            if shard in v.pollers[1:] and n in cell.machines and cell.machines[n].address
        }

    def _carrier(self, name: str) -> str:
        """The replica whose shard carries syncs to `name`: its owner, unless the owner cannot
        reach it and another replica heard from lately can (a machine handed over)."""
        owner = self.link.owner(name)  # type: ignore[union-attr]
        with self._lock:
            if name not in self._handed:
                return owner
            said = self._sightings.get(name, {})
            if (own := said.get(owner)) is None or own.answered:
                return owner
            now = self.clock()
            for r in reach.ranked(name, [r for r, at in self._heard.items() if now - at <= self.vouch_s]):
                if (s := said.get(r)) is not None and s.answered:
                    return r
        return owner

    def _note_refusal(self, name: str, reason: str) -> None:
        """Show on the machine why its borglet refuses the cell (once per reason). The machine
        answered: it is not down, and its tasks are not started elsewhere (docs/decisions.md)."""
        with self._lock:
            if self._refusing.get(name) == reason:
                return
            self._refusing[name] = reason
        text = f"the borglet refuses this cell's requests: {reason}"
        log.warning("machine %s: %s", name, text)

        def change(d: Draft) -> None:
            if name in d.state.machines:
                d.machines[name] = replace(d.machine_info(name), reason=text)

        self.writer.mutate(change)

    def _mark_down(self, name: str, reason: str) -> None:
        m = self.cache.cell().state.machines.get(name)
        if m is None or not m.up:
            return
        log.warning("machine %s: %s: marking it down", name, reason)  # loadtests count this line

        def change(d: Draft) -> None:
            if name in d.state.machines and d.state.machines[name].up:
                d.step("machine_down", name, reason=reason)
                d.machines[name] = replace(d.machine_info(name), reason=reason)

        self.writer.mutate(change)

    def _stale(self, name: str, report: dict[str, Any]) -> bool:
        """A report of this leader's term read before the borglet applied a sync whose reply
        this leader already acted on (`_shard_report` would not take it)."""
        fence = report.get("fence") if isinstance(report.get("fence"), dict) else {}
        epoch, seq = int(fence.get("epoch") or report.get("epoch") or 0), int(fence.get("seq") or 0)
        with self._lock:
            st = self._machines.get(name)
            return st is not None and epoch == self.epoch and seq < st.acked_seq

    def _shard_report(self, name: str, report: dict[str, Any]) -> Callable[[Draft], None] | None:
        """A machine's state as its shard read it: taken as an answer, unless it is older
        than a sync reply this leader already acted on."""
        fence = report.get("fence") if isinstance(report.get("fence"), dict) else {}
        epoch, seq = int(fence.get("epoch") or report.get("epoch") or 0), int(fence.get("seq") or 0)
        with self._lock:
            st = self._machines.setdefault(name, _Machine())
            if epoch > self.epoch:
                return None  # the borglet has seen a newer leader: this one's term is over
            if epoch == self.epoch and seq < st.acked_seq:
                return None  # read before the borglet applied a sync whose reply was already taken
            ids = set(st.acked_ids) if epoch == self.epoch else set()
        return self._answer(name, report, ids)

    def _missed(self, name: str, misses: int | None = None) -> None:
        """A poll of `name` got no answer; `misses` (from its shard) counts them in a row."""
        with self._lock:
            st = self._machines.setdefault(name, _Machine())
            if misses is None:
                st.schedule = schedule = pollclock.missed(st.schedule)
            else:
                st.schedule = schedule = replace(st.schedule, misses=misses)
        if not pollclock.is_down(schedule, self.down_after):
            return
        cell = self.cache.cell()
        m = cell.state.machines.get(name)
        if m is None:
            # A removed machine gone silent for longer than any kill takes: as a down one, it
            # holds nothing back any more.
            now = self.clock()
            with self._lock:
                since = self._silent_since.setdefault(name, now)
                if now - since >= DEPARTED_SILENT_S:
                    self._silent_since.pop(name, None)
                    self._reported.pop(name, None)
                    self._machines[name].signature = frozenset()
                    self._reported_version += 1
            return
        if not m.up:
            return
        log.warning("machine %s missed %d polls: marking it down", name, schedule.misses)
        self.writer.mutate(lambda d: d.step("machine_down", name, reason=f"machine {name} down"))

    def _answered(self, name: str, reply: dict[str, Any], ids: set[TaskId]) -> None:
        change = self._answer(name, reply, ids)
        if change is not None:
            self.writer.mutate(change)
            self._usage_written(name, change)

    def _usage_written(self, name: str, change: Callable[[Draft], None]) -> None:
        if getattr(change, "writes_usage", False):
            with self._lock:
                st = self._machines[name]
                st.schedule = pollclock.usage_written(st.schedule, self.clock())

    def _answer(self, name: str, reply: dict[str, Any], ids: set[TaskId]) -> Callable[[Draft], None] | None:
        """What an answer of `name` changes in the cell, as a change for the writer (None:
        nothing); the change's `writes_usage` says whether it writes the usage."""
        with self._lock:
            st = self._machines[name]
            st.schedule = pollclock.answered(st.schedule)
            write_usage = pollclock.usage_due(st.schedule, self.clock())
        self._record_report(name, reply)
        with self._lock:
            self._silent_since.pop(name, None)
        outcome = reports.map_reply(self.cache.cell(), name, reply, ids)
        self.usage.update(outcome.usage)
        m = self.cache.cell().state.machines.get(name)
        if m is None:
            return None
        machine_usage = tuple(sorted((k, int(v)) for k, v in (reply.get("usage") or {}).items()))
        isolation = str(reply.get("isolation") or "")
        images = tuple(sorted(str(i) for i in reply.get("images") or ()))
        with self._lock:
            self._refusing.pop(name, None)
        machine_reason = skew_reason(reply.get("channel_skew_s"))
        new_reason = self.cache.cell().machines.get(name, MachineInfo()).reason != machine_reason
        if not (outcome.steps or outcome.infos or not m.up or write_usage or new_reason):
            return None

        def change(d: Draft) -> None:
            if not d.state.machines[name].up:
                d.step("machine_up", name, reason=f"machine {name} answers again")
            if d.machine_info(name).reason != machine_reason:
                d.machines[name] = replace(d.machine_info(name), reason=machine_reason)
            for action, args, reason in outcome.steps:
                d.step(action, *args, reason=reason)
            for tid, info in outcome.infos.items():
                task = d.state.tasks.get(tid)
                if task is not None and task.state is TaskState.RUNNING and task.machine == name:
                    # Keep what the cell decided (history, placement, a drain begun since
                    # the sync was sent); take the borglet's facts.
                    cur = d.task_info(tid)
                    if not reports.news(cur, info):
                        continue  # an earlier reply's write said it already
                    d.set_task_info(
                        tid,
                        replace(
                            info,
                            history=cur.history,
                            placement=cur.placement,
                            draining_since=cur.draining_since,
                        ),
                    )
            if write_usage:
                info = d.machine_info(name)
                d.machines[name] = replace(info, usage=machine_usage, isolation=isolation, images=images)
                for tid in ids:
                    task = d.state.tasks.get(tid)
                    if task is not None and task.state is TaskState.RUNNING and tid in self.usage:
                        d.set_task_info(tid, replace(d.task_info(tid), usage=self.usage[tid]))

        change.writes_usage = write_usage  # type: ignore[attr-defined]
        return change


def skew_reason(skew_s: Any) -> str:
    """The machine's reason when its borglet obeys though its clock is off (channel.SKEW_HEADER):
    '' when it is not."""
    if not isinstance(skew_s, int | float) or not skew_s:
        return ""
    side = "ahead of" if skew_s > 0 else "behind"
    return f"clock skew: the borglet's clock is {abs(skew_s):.0f} s {side} the master's; synchronize the clocks (NTP)"


def _refusal_reason(body: Any) -> str:
    # A borglet that does not name a reason predates sequence numbers: only epochs fence it.
    return str(body.get("reason") or "stale_epoch") if isinstance(body, dict) else "stale_epoch"


def _task_id(d: dict[str, Any]) -> TaskId:
    return TaskId(str(d["job"]), int(d["index"]), int(d["incarnation"]))


def _task_id_of(borglet_id: str) -> TaskId | None:
    parsed = reports.parse_borglet_task_id(borglet_id)
    return TaskId(*parsed) if parsed is not None else None


def _held(tid: TaskId, cell: Cell, held_ids: set[str]) -> bool:
    return borglet_task_id(tid, cell.task_info(tid)) in held_ids
