"""Refreshes a leader's lease from a process of its own, so that a busy master cannot starve it.

Why a process: in CPython a thread that waits on a socket must win the GIL back after every
blocking call, and beside busy threads each handoff can take many switch intervals (the
convoy effect). A master flooded with a 10,000-task job refreshed its 2 s lease from a thread
every 0.67 s and still lost it 19 times in 80 s, each loss a new term with all its start-up
work (docs/decisions.md). A child process has an interpreter, and a GIL, of its own.

The parent and the child share four numbers (`multiprocessing.Array`, under its lock):
- the deadline: a CLOCK_MONOTONIC time (system-wide, so both processes read the same clock)
  until which the lease is surely alive: the moment the last successful refresh was sent,
  plus the TTL (see `reference/store/election.py` for why that is safe);
- the token of the term being kept (0: none), so that a refresh finishing after the parent
  ended the term cannot extend it;
- the verdict: the lease is being kept, expired in etcd, or the key is no longer ours;
- the parent's heartbeat, beaten by its election thread every turn.
A lease kept from outside must not outlive the master it stands for (`should_refresh`): the
child stops refreshing at once when the parent is stopped (SIGSTOP, a debugger), when its
heartbeat is older than the TTL and its CPU time stands still (deadlocked, not busy), and in
any case once the heartbeat is older than `hung_s` (a thread spinning while the rest starve).
Commands (keep a term, release it, exit) go over a pipe; the child exits when the parent does.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from reference import cpuweight
from reference.store import ops
from reference.store.client import Lease, StoreClient, StoreError
from reference.store.tls import StoreTLS

log = logging.getLogger(__name__)

KEEPING, EXPIRED, LOST = 0, 1, 2
_DEADLINE, _TOKEN, _VERDICT, _HEARTBEAT, _READY = range(5)
# How often the child looks at its pipe and its parent between refreshes.
_TICK_S = 0.05
_READY_POLL_S = 0.02  # how often `wait_ready` looks at the child's flag


@dataclass(frozen=True)
class Term:
    """What the child needs to keep one term's lease and check that the key is still ours."""

    lease_id: int
    lease_ttl: int
    key: ops.Key
    token: int
    name: str


class LeaseKeeper:
    """The parent's handle on the refreshing child (one per `Election`)."""

    def __init__(
        self,
        endpoints: list[str],
        ttl_s: float,
        interval_s: float,
        retry_s: float,
        timeout_s: float,
        hung_s: float,
        tls: StoreTLS | None = None,
    ) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fork of a threaded master could inherit held locks
        self._shared = ctx.Array("d", 5)
        self._shared[_HEARTBEAT] = time.monotonic()
        self._conn, child_conn = ctx.Pipe()
        settings = {"ttl_s": ttl_s, "interval_s": interval_s, "retry_s": retry_s, "timeout_s": timeout_s,
                    "hung_s": hung_s}
        self._process = ctx.Process(
            target=serve, args=(child_conn, self._shared, endpoints, settings, os.getpid(), tls),
            name="lease keeper", daemon=True,
        )
        self._process.start()
        child_conn.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def wait_ready(self, timeout: float, stop: threading.Event | None = None) -> bool:
        """Wait until the child runs its loop (a new interpreter importing its modules takes
        seconds on a crowded host), at most `timeout` s or until `stop` is set; whether it does.
        A term won before then would lapse with nobody to refresh its lease."""
        end = time.monotonic() + timeout
        while not self._shared[_READY]:
            if time.monotonic() >= end or not self._process.is_alive() or (stop is not None and stop.is_set()):
                return bool(self._shared[_READY])
            time.sleep(_READY_POLL_S)
        return True

    def keep(self, term: Term, deadline: float) -> None:
        """Keep `term`'s lease from now on; `deadline` is when it is surely alive until already."""
        with self._shared.get_lock():
            self._shared[_DEADLINE] = deadline
            self._shared[_TOKEN] = term.token
            self._shared[_VERDICT] = KEEPING
            self._shared[_HEARTBEAT] = time.monotonic()
        self._conn.send(("keep", term))

    def release(self, token: int) -> None:
        """Stop keeping the term `token` (it ended); a refresh in flight no longer counts."""
        with self._shared.get_lock():
            if self._shared[_TOKEN] != token:
                return
            self._shared[_TOKEN] = 0
            self._shared[_DEADLINE] = 0.0
        self._send(("release", token))

    def deadline(self, token: int) -> float:
        """Until when the term `token`'s lease is surely alive (0 when that term is not kept)."""
        with self._shared.get_lock():
            return self._shared[_DEADLINE] if self._shared[_TOKEN] == token else 0.0

    def verdict(self, token: int) -> int:
        with self._shared.get_lock():
            return int(self._shared[_VERDICT]) if self._shared[_TOKEN] == token else KEEPING

    def beat(self) -> None:
        """The parent is alive and running its threads."""
        self._shared[_HEARTBEAT] = time.monotonic()

    def close(self) -> None:
        self._send(("exit", None))
        self._process.join(timeout=2.0)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=2.0)
        self._conn.close()

    def _send(self, message: tuple[str, Any]) -> None:
        try:
            self._conn.send(message)
        except (BrokenPipeError, OSError):
            pass  # the child is gone; the deadline lapses on its own


def _ahead_of_the_crowd() -> None:
    """Get a CPU soon after waking on a crowded host. With autogroups (one per session), the
    kernel weighs sessions against each other first: in its master's session the keeper waited
    behind the master's busy threads for the session's turn among a hundred borglets', and a
    3-replica leader lost its lease with etcd answering (docs/decisions.md). So it takes a
    session of its own, and where root may ask for it, a heavier weight for that session and
    for itself (nice applies within the session, or everywhere without autogroups)."""
    try:
        os.setsid()
    except OSError:
        pass
    cpuweight.weigh_session()
    try:
        os.nice(cpuweight.AHEAD_NICE)
    except OSError:
        pass


def serve(
    conn: Connection, shared: Any, endpoints: list[str], settings: dict[str, float], parent: int,
    tls: StoreTLS | None = None,
) -> None:  # fmt: skip
    """The child's loop: refresh the kept term's lease every interval while the parent lives."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s lease-keeper[%(process)d] %(levelname)s %(message)s")
    _ahead_of_the_crowd()
    timeout = settings["timeout_s"]
    client = StoreClient(endpoints, timeout=timeout, connect_timeout=timeout, tls=tls)
    shared[_READY] = 1.0
    term: Term | None = None
    due = 0.0
    last_cpu: int | None = None
    try:
        while os.getppid() == parent:
            if conn.poll(_TICK_S):
                try:
                    command, arg = conn.recv()
                except EOFError:
                    return
                if command == "exit":
                    return
                if command == "keep":
                    term, due = arg, time.monotonic() + settings["interval_s"]
                elif command == "release" and term is not None and term.token == arg:
                    term = None
                continue
            now = time.monotonic()
            if term is None or now < due:
                continue
            stopped, cpu = parent_activity(parent)
            advanced = cpu is None or cpu != last_cpu  # since the last refresh
            if not should_refresh(stopped, now - shared[_HEARTBEAT], advanced, settings["ttl_s"], settings["hung_s"]):
                due = now + _TICK_S  # let the lease lapse while the parent does not show life
                continue
            last_cpu = cpu
            ok, verdict = refresh_once(client, term, shared, settings["ttl_s"])
            if verdict != KEEPING:
                term = None
            due = time.monotonic() + (settings["interval_s"] if ok else settings["retry_s"])
    finally:
        client.close()


def should_refresh(stopped: bool, beat_age_s: float, cpu_advanced: bool, ttl_s: float, hung_s: float) -> bool:
    """Whether the parent shows enough life for its lease to be refreshed on its behalf."""
    if stopped:
        return False
    if beat_age_s < ttl_s:
        return True
    return beat_age_s < hung_s and cpu_advanced


def parent_activity(pid: int) -> tuple[bool, int | None]:
    """Whether process `pid` is stopped, and its CPU time in clock ticks (None: unknown, no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False, None
    # Fields after the command: state is the first, utime and stime the 12th and 13th.
    return fields[0] in ("T", "t"), int(fields[11]) + int(fields[12])


def refresh_once(client: StoreClient, term: Term, shared: Any, ttl_s: float) -> tuple[bool, int]:
    """One refresh of `term`'s lease and one read of its key; returns (etcd answered, verdict)."""
    sent = time.monotonic()
    try:
        if client.refresh(Lease(term.lease_id, term.lease_ttl)) <= 0:
            return True, _judge(shared, term.token, EXPIRED)
        kv = client.get_kv(term.key)
    except StoreError as exc:
        log.warning("refresh of lease %d failed: %s", term.lease_id, exc)
        return False, KEEPING
    ours = kv is not None and kv.create_revision == term.token and kv.value == term.name.encode("utf-8")
    if not ours:
        return True, _judge(shared, term.token, LOST)
    with shared.get_lock():
        if shared[_TOKEN] == term.token:
            shared[_DEADLINE] = sent + ttl_s
    return True, KEEPING


def _judge(shared: Any, token: int, verdict: int) -> int:
    with shared.get_lock():
        if shared[_TOKEN] == token:
            shared[_VERDICT] = verdict
    return verdict
