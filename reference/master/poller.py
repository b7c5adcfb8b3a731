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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import httpx

from reference import channel
from reference.master import pollclock, reports
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft, MachineInfo, borglet_task_id
from reference.master.writer import NotLeader, WriteFailed, Writer
from spec.model import TaskId, TaskState

log = logging.getLogger(__name__)

DELTA_MIN_TASKS = 64  # a machine with at least this many desired tasks gets deltas
TURN_MIN_GAP_S = 0.05  # turns start at least this far apart, however many replies wake them


@dataclass
class _Machine:
    schedule: pollclock.Schedule = pollclock.Schedule()
    signature: frozenset[str] = frozenset()
    inflight: bool = False
    # The seq and task ids of the last sync the borglet acknowledged: the base of a delta.
    acked_seq: int = 0
    acked: frozenset[str] | None = None


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
        auth: httpx.Auth | None = None,  # signs each request (reference/channel.py)
    ) -> None:
        self.cache = cache
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
        self._released: set[str] = set()  # borglet task ids sent at least once
        self._seq = 0  # syncs sent by this leader, the last one's number
        self._memo: reports.Memo = {}  # desired-set entries reused across turns
        self._reported_version = 0  # moves whenever a machine's reported tasks change
        self._plans: tuple[Any, dict[str, tuple[list[dict[str, Any]], set[TaskId]]], set[str], dict[str, frozenset[str]]] = (
            None, {}, set(), {}
        )
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
        if key != self._plans[0]:
            # What each machine is sent depends on the view and on what the machines reported
            # alone: built when either changed, not on every turn.
            if len(self._memo) > 2 * len(cell.state.tasks) + 1000:
                self._memo = {}
            desired = {
                name: reports.desired_set(cell, name, self.cell_name, self._memo) for name in cell.state.machines
            }
            plans, blocking = self._hold_back(cell, desired)
            signatures = {name: frozenset(d["task_id"] for d in keep) for name, (keep, _) in plans.items()}
            self._plans = (key, plans, blocking, signatures)
        _, plans, blocking, signatures = self._plans
        for name, (desired, ids) in plans.items():
            signature = signatures[name]
            address = cell.machines.get(name, MachineInfo()).address
            with self._lock:
                st = self._machines.setdefault(name, _Machine())
                if name not in self._reported:
                    if st.inflight or not pollclock.read_due(st.schedule, now):
                        continue
                    st.inflight, st.schedule = True, pollclock.read_sent(st.schedule, now, self.interval)
                    work: tuple[Any, ...] = (self._probe, name, address)
                else:
                    # The signatures compared last: equal sets cost a walk of each.
                    if st.inflight or (
                        not pollclock.sync_due(st.schedule, now, name in blocking) and signature == st.signature
                    ):
                        continue
                    st.inflight, st.signature = True, signature
                    st.schedule = pollclock.sync_sent(st.schedule, now, self.interval)
                    self._released.update(signature)
                    work = (self._poll, name, address, desired, signature, ids, cell.revision)
            if self._stop.is_set():
                return
            self._pool.submit(*work)

    def _hold_back(
        self, cell: Cell, plans: dict[str, tuple[list[dict[str, Any]], set[TaskId]]]
    ) -> tuple[dict[str, tuple[list[dict[str, Any]], set[TaskId]]], set[str]]:
        """Take held tasks out of the desired sets; returns the sets and the machines whose
        reports block a hold (they are polled faster until it is released)."""
        up = [n for n, m in cell.state.machines.items() if m.up]
        wanted = {str(d["task_id"]) for desired, _ in plans.values() for d in desired}
        with self._lock:
            live = reports.live_by_index(self._reported, up)
            unreported = [n for n in up if n not in self._reported]
            # Forget ids no machine wants any more, so the set stays as small as the cell.
            self._released &= wanted
            released = set(self._released)
            for reported in self._reported.values():
                released.update(reported)
        out: dict[str, tuple[list[dict[str, Any]], set[TaskId]]] = {}
        holds: dict[str, reports.Hold] = {}
        for name, (desired, ids) in plans.items():
            seen = {d["task_id"] for d in desired if cell.task_info(_task_id(d)).seen}
            keep, held = reports.hold_back(desired, live, released | seen, unreported)
            holds.update((h.task_id, h) for h in held)
            held_ids = {h.task_id for h in held}
            out[name] = (keep, {t for t in ids if not _held(t, cell, held_ids)})
        self._note_holds(holds)
        return out, {h.machine for h in holds.values()}

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
            if reply is None:
                self._missed(name)
            elif reply.get("refused"):
                with self._lock:
                    st = self._machines[name]
                    st.schedule = pollclock.refused(st.schedule, self.clock())
            else:
                self._answered(name, reply, ids)
        except (NotLeader, WriteFailed) as err:
            log.info("poll of %s not recorded: %s", name, err)
        except Exception:
            log.exception("poll of %s failed", name)
        finally:
            with self._lock:
                self._machines[name].inflight = False
            self._wake.set()

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
        self, name: str, address: str, desired: list[dict[str, Any]], ids: frozenset[str], revision: int
    ) -> dict[str, Any] | None:
        """Send one sync; the reply, {"refused": reason} for a refusal, None for no answer."""
        if self._on_poll is not None:
            self._on_poll("sent")
        with self._lock:
            self._seq += 1
            seq = self._seq
            st = self._machines[name]
            base, base_seq = st.acked, st.acked_seq
            st.acked = None  # unknown until this one is answered
        body: dict[str, Any] = {"master": self.master_name, "epoch": self.epoch, "seq": seq, "revision": revision}
        if base is not None and len(desired) >= DELTA_MIN_TASKS:
            body["delta"] = {
                "base_seq": base_seq,
                "add": [d for d in desired if d["task_id"] not in base],
                "remove": sorted(base - ids),
            }
        else:
            body["tasks"] = desired
        try:
            response = self._http.post(f"{address.rstrip('/')}/v1/sync", json=body, headers=channel.to_machine(name))
        except httpx.HTTPError as err:
            log.debug("sync to %s failed: %s", address, err)
            return None
        if response.status_code == 409:
            reason = _refusal_reason(response)
            self.refusals[reason] = self.refusals.get(reason, 0) + 1
            if self._on_poll is not None:
                self._on_poll(f"refused_{reason}")
            if reason == "stale_epoch":
                log.warning("borglet at %s has seen a newer leader epoch: %s", address, response.text)
                return None
            log.info("sync %d to %s refused (%s): %s", seq, name, reason, response.text)
            return {"refused": reason}
        if response.status_code != 200:
            log.warning("borglet at %s answered %d", address, response.status_code)
            return None
        with self._lock:
            st.acked, st.acked_seq = ids, seq
        return response.json()

    def _missed(self, name: str) -> None:
        with self._lock:
            st = self._machines[name]
            st.schedule = schedule = pollclock.missed(st.schedule)
        if not pollclock.is_down(schedule, self.down_after):
            return
        cell = self.cache.cell()
        m = cell.state.machines.get(name)
        if m is None or not m.up:
            return
        log.warning("machine %s missed %d polls: marking it down", name, schedule.misses)
        self.writer.mutate(lambda d: d.step("machine_down", name, reason=f"machine {name} down"))

    def _answered(self, name: str, reply: dict[str, Any], ids: set[TaskId]) -> None:
        with self._lock:
            st = self._machines[name]
            st.schedule = pollclock.answered(st.schedule)
            write_usage = pollclock.usage_due(st.schedule, self.clock())
        self._record_report(name, reply)
        outcome = reports.map_reply(self.cache.cell(), name, reply, ids)
        self.usage.update(outcome.usage)
        m = self.cache.cell().state.machines.get(name)
        if m is None:
            return
        machine_usage = tuple(sorted((k, int(v)) for k, v in (reply.get("usage") or {}).items()))
        isolation = str(reply.get("isolation") or "")
        if not (outcome.steps or outcome.infos or not m.up or write_usage):
            return

        def change(d: Draft) -> None:
            if not d.state.machines[name].up:
                d.step("machine_up", name, reason=f"machine {name} answers again")
            for action, args, reason in outcome.steps:
                d.step(action, *args, reason=reason)
            for tid, info in outcome.infos.items():
                task = d.state.tasks.get(tid)
                if task is not None and task.state is TaskState.RUNNING and task.machine == name:
                    # Keep what the cell decided (history, placement, a drain begun since
                    # the sync was sent); take the borglet's facts.
                    cur = d.task_info(tid)
                    d.set_task_info(
                        tid,
                        replace(info, history=cur.history, placement=cur.placement, draining_since=cur.draining_since),
                    )
            if write_usage:
                info = d.machine_info(name)
                d.machines[name] = replace(info, usage=machine_usage, isolation=isolation)
                for tid in ids:
                    task = d.state.tasks.get(tid)
                    if task is not None and task.state is TaskState.RUNNING and tid in self.usage:
                        d.set_task_info(tid, replace(d.task_info(tid), usage=self.usage[tid]))

        self.writer.mutate(change)
        if write_usage:
            with self._lock:
                st.schedule = pollclock.usage_written(st.schedule, self.clock())


def _refusal_reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return "stale_epoch"
    # A borglet that does not name a reason predates sequence numbers: only epochs fence it.
    return str(body.get("reason") or "stale_epoch") if isinstance(body, dict) else "stale_epoch"


def _task_id(d: dict[str, Any]) -> TaskId:
    return TaskId(str(d["job"]), int(d["index"]), int(d["incarnation"]))


def _task_id_of(borglet_id: str) -> TaskId | None:
    parsed = reports.parse_borglet_task_id(borglet_id)
    return TaskId(*parsed) if parsed is not None else None


def _held(tid: TaskId, cell: Cell, held_ids: set[str]) -> bool:
    return borglet_task_id(tid, cell.task_info(tid)) in held_ids
