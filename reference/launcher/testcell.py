"""A local cell for tests and benches: a 3-member etcd, master replicas and borglets as real processes on loopback.

Every process is started, awaited and stopped as `cell up` and `cell down` do it (spawn,
wait_ready, stop_processes): `LocalCell.stop()` leaves no process behind, task processes a
SIGKILLed borglet left running included (their records are taken before each kill or stop),
and `leftovers()` lists any process of the cell still alive.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil

import reference
from reference import channel
from reference.borglet.taskusers import local_task_env
from reference.cellfile import auth_headers
from reference.launcher.cellapi import ask_leader
from reference.launcher.cellfile import ProcessRecord, Role, is_alive
from reference.launcher.lifecycle import default_runtime
from reference.launcher.processes import (
    child_env,
    descendants,
    kill_process,
    spawn,
    stop_processes,
    wait_ready,
)
from reference.launcher.statedir import ensure_admin_token
from reference.ports import HOST, free_port, free_ports
from reference.store.client import StoreClient
from reference.store.etcd_cluster import ELECTION_MS, HEARTBEAT_MS, EtcdCluster
from reference.waiting import wait_until

T = TypeVar("T")

REPO = Path(reference.__file__).resolve().parent.parent  # the repository root: tasks run from it
#: What a check on a live cell may raise while a process starts, stops or fails over.
TRANSIENT = (httpx.HTTPError, OSError, ValueError, KeyError)
BORGLET_READY_S = 20.0


def wait_for(check: Callable[[], T | None], timeout_s: float, what: str, every: float = 0.1) -> T:
    """`wait_until` on a live cell: an error in TRANSIENT counts as a not yet."""
    return wait_until(check, timeout_s, what, every, ignore=TRANSIENT)


@dataclass
class Proc:
    """One master or borglet of the cell: how it is started, and its process once started."""

    name: str
    port: int
    argv: list[str]
    log: Path
    role: Role = Role.MASTER
    record: ProcessRecord | None = None
    seen: set[ProcessRecord] = field(default_factory=set)  # the tasks it ran, as last seen

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.record.pid if self.record is not None else None

    @property
    def alive(self) -> bool:
        return self.record is not None and is_alive(self.record)

    def start(self) -> None:
        self.record = spawn(self.role, self.name, self.argv, self.url, self.log, str(REPO), child_env(str(REPO)))

    def remember_children(self) -> None:
        if self.record is not None:
            self.seen.update(descendants([self.record]))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.remember_children()
        if self.alive:
            assert self.record is not None
            kill_process(self.record, sig, timeout=10.0)

    def stop(self, timeout: float = 10.0) -> None:
        self.remember_children()
        if self.record is not None:
            stop_processes([self.record], timeout)


class LocalCell:
    """A cell of `masters` replicas and `borglets` machines whose files and logs go to
    `workdir`; as a context manager, started on entry and stopped on exit."""

    def __init__(
        self,
        workdir: Path,
        *,
        masters: int = 3,
        borglets: int = 2,
        capacity: str = "cpu=4000m,ram=4GiB",
        cell: str = "test",
        poll_interval: float = 0.5,
        down_after: int = 3,
        lease_ttl: float = 2.0,
        master_args: tuple[str, ...] = (),
        etcd_heartbeat_ms: int = HEARTBEAT_MS,
        etcd_election_ms: int = ELECTION_MS,
        isolation: str = "rlimit",
        schedulers: int = 0,
        borglet_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The cell's channel key: its masters sign every request to a borglet with it.
        self.channel_key_file = channel.create_key_file(self.workdir / channel.KEY_FILE)
        self.channel_key = channel.load_key(self.channel_key_file)
        self.cell = cell
        self.capacity = capacity
        self.isolation = isolation
        runtime = default_runtime()
        if runtime != "process" and "--runtime" not in borglet_args:
            borglet_args = (*borglet_args, "--runtime", runtime, "--cell", cell)
        self.borglet_args = borglet_args  # more flags for every borglet (--runtime docker ...)
        self.etcd = EtcdCluster(
            self.workdir / "etcd", members=3, heartbeat_ms=etcd_heartbeat_ms, election_ms=etcd_election_ms
        )
        self.masters: list[Proc] = []
        self.borglets: list[Proc] = []
        self.schedulers: list[Proc] = []  # scheduler processes (none: the leader schedules)
        self._n_masters, self._n_borglets, self._n_schedulers = masters, borglets, schedulers
        self._master_opts = [
            "--poll-interval", str(poll_interval), "--down-after", str(down_after),
            "--lease-ttl", str(lease_ttl), "--channel-key-file", str(self.channel_key_file), *master_args,
        ]  # fmt: skip
        # The cell's admin token: every request this object makes carries it; tests that act
        # as another user add one (`add_user`) and send theirs.
        self.admin_token_file = ensure_admin_token(self.workdir)
        self.admin_token = self.admin_token_file.read_text().strip()
        self.auth = auth_headers(self.admin_token)
        self.http = httpx.Client(timeout=10.0, headers=self.auth)

    def etcd_tls_args(self) -> list[str]:
        """The flags that give a master or scheduler the store's client certificate."""
        tls = self.etcd.client_tls
        return tls.args() if tls is not None else []

    def store(self, timeout: float = 5.0) -> StoreClient:
        """A client of the cell's store with the cell's client certificate (close it)."""
        return StoreClient(self.etcd.client_urls, timeout=timeout, tls=self.etcd.client_tls)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LocalCell:
        try:
            self.etcd.start()
            ports = free_ports(self._n_masters)
            peers = ",".join(f"m{i}=http://{HOST}:{p}" for i, p in enumerate(ports))
            for i, port in enumerate(ports):
                argv = [
                    sys.executable, "-m", "reference.master", "--name", f"m{i}",
                    "--listen", f"{HOST}:{port}", "--etcd", ",".join(self.etcd.client_urls),
                    *self.etcd_tls_args(), "--cell", self.cell, "--peers", peers, "--admin-token-file", str(self.admin_token_file),
                    *self._master_opts,
                ]  # fmt: skip
                self.masters.append(Proc(f"m{i}", port, argv, self.workdir / f"master-m{i}.log"))
            for m in self.masters:
                m.start()
            for i in range(self._n_schedulers):
                argv = [
                    sys.executable, "-m", "reference.schedulerd", "--name", f"s{i}",
                    "--etcd", ",".join(self.etcd.client_urls), *self.etcd_tls_args(), "--cell", self.cell,
                    "--channel-key-file", str(self.channel_key_file),
                ]  # fmt: skip
                self.schedulers.append(Proc(f"s{i}", 0, argv, self.workdir / f"scheduler-s{i}.log", Role.SCHEDULER))
                self.schedulers[-1].start()
            for i in range(self._n_borglets):
                self.add_borglet(f"b{i}", register=False)
            self.wait_leader(30)
            for b in self.borglets:
                self.register(b)
        except BaseException:
            self.stop()
            raise
        return self

    def add_borglet(self, name: str, register: bool = True) -> Proc:
        port = free_port()
        state = self.workdir / f"borglet-{name}"
        state.mkdir(exist_ok=True)
        argv = [
            sys.executable, "-m", "reference.borglet", "--name", name,
            "--listen", f"{HOST}:{port}", "--capacity", self.capacity,
            "--attrs", f"rack=r{len(self.borglets) % 2}", "--failure-domain", f"r{len(self.borglets) % 2}",
            "--state-dir", str(state), "--isolation", self.isolation, "--kill-tasks-on-exit",
            "--kill-grace", "1", "--channel-key-file", str(self.channel_key_file),
            *local_task_env(str(REPO)), *self.borglet_args,
        ]  # fmt: skip
        proc = Proc(name, port, argv, self.workdir / f"borglet-{name}.log", Role.BORGLET)
        proc.start()
        self.borglets.append(proc)
        self._wait_ready(proc)
        if register:
            self.register(proc)
        return proc

    def register(self, b: Proc) -> None:
        body = {
            "name": b.name, "address": b.url, "capacity": self.capacity,
            "attrs": {"rack": "r0"}, "failure_domain": f"fd-{b.name}",
        }  # fmt: skip
        wait_for(lambda: self.request("POST", "/v1/machines", json=body).status_code in (201, 409), 20, f"register {b.name}")

    def restart(self, proc: Proc) -> None:
        proc.start()
        if proc in self.borglets:
            self._wait_ready(proc)

    def _wait_ready(self, proc: Proc) -> None:
        assert proc.record is not None
        wait_ready([proc.record], "/healthz", BORGLET_READY_S)

    def stop(self) -> None:
        for s in self.schedulers:
            s.stop()
        for m in self.masters:
            m.stop()
        for b in self.borglets:
            b.stop(15)
        # Tasks a SIGKILLed borglet left behind run in their own sessions: taken down with theirs.
        stop_processes([t for p in self.masters + self.borglets for t in p.seen], timeout=2.0)
        self.etcd.stop()
        self.http.close()

    def leftovers(self) -> list[int]:
        """Pids of the cell's processes (and the tasks they started) still alive."""
        procs = self.masters + self.borglets + self.schedulers
        alive = [p.record.pid for p in procs if p.alive and p.record is not None]
        alive += [t.pid for p in procs for t in p.seen if is_alive(t)]
        alive += [pid for pid in self.etcd.pids() if pid is not None and psutil.pid_exists(pid)]
        return alive

    def __enter__(self) -> LocalCell:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the API ---------------------------------------------------------------------------------

    def live_masters(self) -> list[Proc]:
        return [m for m in self.masters if m.alive]

    def request(self, method: str, path: str, master: Proc | None = None, **kw: Any) -> httpx.Response:
        """One request to `master`, or to the first live master that answers."""
        targets = [master] if master is not None else self.live_masters()
        last: Exception | None = None
        for m in targets:
            try:
                return self.http.request(method, m.url + path, **kw)
            except httpx.HTTPError as err:
                last = err
        raise httpx.ConnectError(f"no master answered {method} {path}: {last}")

    def get(self, path: str, **kw: Any) -> dict[str, Any]:
        r = self.request("GET", path, **kw)
        r.raise_for_status()
        return r.json()

    def add_user(self, name: str) -> str:
        """Add user `name` (as the admin); returns its token."""
        r = self.request("POST", "/v1/users", json={"name": name})
        r.raise_for_status()
        return str(r.json()["token"])

    def leader(self, skip: Proc | None = None) -> Proc | None:
        """The first live master (not `skip`) that says it leads (`ask_leader(itself=True)`)."""
        live = {m.name: m for m in self.live_masters() if m is not skip}
        name = ask_leader(self.http, [m.url for m in live.values()], itself=True, timeout=2.0)
        return live.get(name) if name is not None else None

    def wait_leader(self, timeout: float = 15.0) -> Proc:
        return wait_for(self.leader, timeout, "a leader")

    def submit(self, job: dict[str, Any], timeout: float = 15.0) -> httpx.Response:
        """Submit, retrying 503s (no leader yet) until timeout."""

        def answered() -> httpx.Response | None:
            r = self.request("POST", "/v1/jobs", json=job)
            return r if r.status_code != 503 else None

        return wait_until(answered, timeout, f"submit of {job.get('name')}", 0.2, ignore=(httpx.HTTPError,))

    def tasks(self, user: str, name: str, master: Proc | None = None) -> list[dict[str, Any]]:
        return self.get(f"/v1/jobs/{user}/{name}/tasks", master=master)["tasks"]

    def live_tasks(self, user: str, name: str) -> list[dict[str, Any]]:
        return [t for t in self.tasks(user, name) if t["state"] != "DEAD"]

    def running(self, user: str, name: str, n: int) -> list[dict[str, Any]] | None:
        """The job's tasks if n of them run with a started process, else None."""
        ts = [t for t in self.tasks(user, name) if t["state"] == "RUNNING" and t.get("port")]
        return ts if len(ts) >= n else None
