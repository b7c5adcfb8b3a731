"""A local cell for tests and benches: a 3-member etcd, master replicas and borglets as real processes on loopback.

The cell is started by `launcher.up` (with the tests' names, etcd timing, borglet flags and
registration) and each process is then handled as `cell down` does it (spawn, wait_ready,
stop_processes): `LocalCell.stop()` leaves no process behind, task processes a SIGKILLed
borglet left running included (their records are taken before each kill or stop), and
`leftovers()` lists any process of the cell still alive.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil

import reference
from reference import channel
from reference.cellfile import auth_headers
from reference.launcher.cellapi import ask_leader
from reference.launcher.cellfile import ProcessRecord, Role, is_alive
from reference.launcher.lifecycle import clusters, default_runtime
from reference.launcher.newcell import Names, up
from reference.launcher.processes import (
    READY_TIMEOUT_S,
    child_env,
    descendants,
    kill_process,
    spawn,
    stop_processes,
    wait_ready,
)
from reference.launcher.roles import borglet_flags, start_borglet
from reference.launcher.statedir import ensure_admin_token
from reference.ports import HOST, free_port
from reference.store.client import StoreClient
from reference.store.etcd_cluster import ELECTION_MS, HEARTBEAT_MS, EtcdCluster
from reference.waiting import wait_until

T = TypeVar("T")

REPO = Path(reference.__file__).resolve().parent.parent  # the repository root: tasks run from it
#: What a check on a live cell may raise while a process starts, stops or fails over.
TRANSIENT = (httpx.HTTPError, OSError, ValueError, KeyError)
BORGLET_READY_S = 20.0
#: The test cell's process names: masters m0.., machines b0.., scheduler processes s0..
NAMES = Names(masters="m", machines="b", schedulers="s")
KILL_GRACE_S = 1.0  # a test's killed task gets one second from SIGTERM to SIGKILL


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

    @classmethod
    def of(cls, record: ProcessRecord) -> Proc:
        """A process `launcher.up` started, from its cell-file record."""
        port = int(record.url.rsplit(":", 1)[1]) if record.url else 0
        return cls(record.name, port, list(record.command), Path(record.log), record.role, record)

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
    `workdir`; as a context manager, started on entry and stopped on exit.

    The defaults are the integration tests' cell: a 3-member etcd, no scheduler process, no
    CPU groups, borglets with rlimit isolation and a 1 s kill grace, named m0.., b0.., each
    machine registered as a failure domain of its own. The conformance suite's cell
    (harness/localcell.py) is this class with `cell up`'s shape: `names=Names()`,
    `cell_up_registration`, a scheduler process, the machines' CPU group, the borglets' defaults."""

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
        isolation: str | None = "rlimit",
        schedulers: int = 0,
        borglet_args: tuple[str, ...] = (),
        kill_grace_s: float | None = KILL_GRACE_S,
        names: Names = NAMES,
        cell_up_registration: bool = False,
        machine_shares: int | None = None,
        task_dir: Path = REPO,
        runtime: str | None = None,
    ) -> None:
        """`isolation`, `kill_grace_s` None: the borglet's defaults. `cell_up_registration`: the
        machines are registered as `cell up` registers them (racks alternate, a rack is a
        failure domain), not by `register`. `machine_shares`: the machines' CPU group (`up`).
        `task_dir`: where the processes and their tasks run. `runtime` None: MINBORG_RUNTIME's,
        unless `borglet_args` names one."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The cell's channel key: its masters sign every request to a borglet with it.
        self.channel_key_file = channel.create_key_file(self.workdir / channel.KEY_FILE)
        self.channel_key = channel.load_key(self.channel_key_file)
        self.cell = cell
        self.capacity = capacity
        self.isolation = isolation
        # The borglets' runtime: MINBORG_RUNTIME's, unless the test names one in its flags.
        self.runtime = runtime or ("process" if "--runtime" in borglet_args else default_runtime())
        # More flags for every borglet (--runtime docker ...), after the test cell's own.
        self.borglet_args = borglet_flags(isolation, kill_grace_s, borglet_args)
        self.names, self.cell_up_registration, self.machine_shares = names, cell_up_registration, machine_shares
        self.task_dir = task_dir
        self.etcd_timing_ms = (etcd_heartbeat_ms, etcd_election_ms)
        # Replaced by the cluster `launcher.up` starts: the same members, timing and TLS.
        self.etcd = EtcdCluster(
            self.workdir / "etcd", members=3, heartbeat_ms=etcd_heartbeat_ms, election_ms=etcd_election_ms
        )
        self.masters: list[Proc] = []
        self.borglets: list[Proc] = []
        self.schedulers: list[Proc] = []  # scheduler processes (none: the leader schedules)
        self._n_masters, self._n_borglets, self._n_schedulers = masters, borglets, schedulers
        self._master_opts = [
            "--poll-interval", str(poll_interval), "--down-after", str(down_after),
            "--lease-ttl", str(lease_ttl), *master_args,
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
        """`launcher.up` in `workdir`: 3 etcd members, the masters and scheduler processes, the
        borglets (no CPU budgets); then each machine registered as `register` does, unless
        `cell up` registered them."""
        try:
            info = up(
                self.workdir, self.cell, self._n_masters, self._n_borglets, self.capacity, etcd_members=3,
                master_args=self._master_opts, schedulers=self._n_schedulers, runtime=self.runtime,
                machine_shares=self.machine_shares, workdir=str(self.task_dir), etcd_timing_ms=self.etcd_timing_ms,
                borglet_args=self.borglet_args, register=self.cell_up_registration, names=self.names,
                fresh=True,  # a new cell each start: a stopped one left in `workdir` is deleted, not resumed
            )  # fmt: skip
            self.etcd = clusters[str(self.workdir)]
            self.channel_key = channel.load_key(self.channel_key_file)  # `up` made the cell's own
            self.masters = [Proc.of(r) for r in info.of_role(Role.MASTER)]
            self.schedulers = [Proc.of(r) for r in info.of_role(Role.SCHEDULER)]
            self.borglets = [Proc.of(r) for r in info.of_role(Role.BORGLET)]
            # Every replica answers before a test begins (`up` waits for a leader alone).
            wait_ready([m.record for m in self.masters if m.record is not None], "/healthz", READY_TIMEOUT_S)
            self.wait_leader(30)
            for b in self.borglets if not self.cell_up_registration else ():
                self.register(b)
        except BaseException:
            self.stop()
            raise
        return self

    def add_borglet(self, name: str, register: bool = True) -> Proc:
        """Start one more borglet, `name`, as `launcher.up` starts the cell's own."""
        record = start_borglet(
            self.workdir, name, free_port(), self.capacity, len(self.borglets), str(self.task_dir), child_env(str(self.task_dir)),
            runtime=self.runtime, cell=self.cell, extra=self.borglet_args,
        )  # fmt: skip
        proc = Proc.of(record)
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
        clusters.pop(str(self.workdir), None)
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
