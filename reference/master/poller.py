"""The leader's borglet poller: sends each machine its desired set, reads back task states, marks silent machines down.

Each machine is synced every `interval` seconds, and at once when its desired set changes
(a placement, a kill), so a task starts without waiting for the next poll. A machine that
misses `down_after` polls in a row is marked down through the spec (`machine_down`: its tasks
are lost and restarted elsewhere by policy); one that answers again is marked up.
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

from reference.master import reports
from reference.master.cache import WatchCache
from reference.master.cell import Draft, MachineInfo
from reference.master.writer import NotLeader, WriteFailed, Writer
from spec.model import TaskId, TaskState

log = logging.getLogger(__name__)

USAGE_WRITE_EVERY_S = 10.0  # usage alone is written this rarely: it changes every second


@dataclass
class _Machine:
    next_at: float = 0.0
    signature: frozenset[str] = frozenset()
    inflight: bool = False
    misses: int = 0
    usage_written_at: float = 0.0


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
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.cell_name = cell_name
        self.master_name = master_name
        self.epoch = epoch
        self.interval = interval
        self.down_after = down_after
        self._on_poll = on_poll
        self._machines: dict[str, _Machine] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="poll")
        self._http = httpx.Client(timeout=httpx.Timeout(max(0.5, min(interval, 2.0)), connect=0.5))
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self.usage: dict[TaskId, tuple[tuple[str, int], ...]] = {}

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
            try:
                self._turn()
            except Exception:  # one bad turn must not end the polling of the cell
                log.exception("poller turn failed")
            self._wake.wait(0.1)
            self._wake.clear()

    def _turn(self) -> None:
        cell = self.cache.cell()
        now = time.monotonic()
        for name in cell.state.machines:
            desired, ids = reports.desired_set(cell, name, self.cell_name)
            signature = frozenset(d["task_id"] for d in desired)
            address = cell.machines.get(name, MachineInfo()).address
            with self._lock:
                st = self._machines.setdefault(name, _Machine())
                if st.inflight or (now < st.next_at and signature == st.signature):
                    continue
                st.inflight, st.signature, st.next_at = True, signature, now + self.interval
            if self._stop.is_set():
                return
            self._pool.submit(self._poll, name, address, desired, ids)

    def _poll(self, name: str, address: str, desired: list[dict[str, Any]], ids: set[TaskId]) -> None:
        try:
            reply = self._sync(address, desired)
            if reply is None:
                self._missed(name)
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

    def _sync(self, address: str, desired: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self._on_poll is not None:
            self._on_poll("sent")
        body = {"master": self.master_name, "epoch": self.epoch, "tasks": desired}
        try:
            response = self._http.post(f"{address.rstrip('/')}/v1/sync", json=body)
        except httpx.HTTPError as err:
            log.debug("sync to %s failed: %s", address, err)
            return None
        if response.status_code == 409:
            log.warning("borglet at %s has seen a newer leader epoch: %s", address, response.text)
            return None
        if response.status_code != 200:
            log.warning("borglet at %s answered %d", address, response.status_code)
            return None
        return response.json()

    def _missed(self, name: str) -> None:
        with self._lock:
            st = self._machines[name]
            st.misses += 1
            misses = st.misses
        if misses < self.down_after:
            return
        cell = self.cache.cell()
        m = cell.state.machines.get(name)
        if m is None or not m.up:
            return
        log.warning("machine %s missed %d polls: marking it down", name, misses)
        self.writer.mutate(lambda d: d.step("machine_down", name, reason=f"machine {name} down"))

    def _answered(self, name: str, reply: dict[str, Any], ids: set[TaskId]) -> None:
        with self._lock:
            st = self._machines[name]
            st.misses = 0
            write_usage = time.monotonic() - st.usage_written_at >= USAGE_WRITE_EVERY_S
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
                    # Keep the history the Draft may have grown; take the borglet's facts.
                    cur = d.task_info(tid)
                    d.set_task_info(tid, replace(info, history=cur.history, placement=cur.placement))
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
                st.usage_written_at = time.monotonic()
