"""A local cell for tests, the bench and demos: a 3-member etcd, master replicas and borglets as real processes on loopback.

`LocalCell` starts everything, registers each borglet's machine through the API, and on
`stop()` leaves no process behind: borglets stop with --kill-tasks-on-exit, task processes
orphaned by a borglet killed with SIGKILL are killed from the pids recorded before, and
`leftovers()` lists any process of the cell still alive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from reference.store.etcd_cluster import ELECTION_MS, HEARTBEAT_MS, EtcdCluster

REPO = Path(__file__).resolve().parents[2]  # the repository root: tasks run from it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition", every: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; AssertionError naming `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, OSError, ValueError, KeyError) as err:
            last = err
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


@dataclass
class Proc:
    """One child process of the cell (a master or a borglet)."""

    name: str
    port: int
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    seen: set[tuple[int, float]] = field(default_factory=set)  # (pid, create_time) of descendants

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def remember_children(self) -> None:
        if not self.alive:
            return
        assert self.popen is not None
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.popen.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    self.seen.add((child.pid, child.create_time()))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.remember_children()
        if self.alive:
            assert self.popen is not None
            self.popen.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        self.remember_children()
        if self.alive:
            assert self.popen is not None
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


class LocalCell:
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
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cell = cell
        self.capacity = capacity
        self.isolation = isolation
        self.etcd = EtcdCluster(
            self.workdir / "etcd", members=3, heartbeat_ms=etcd_heartbeat_ms, election_ms=etcd_election_ms
        )
        self.masters: list[Proc] = []
        self.borglets: list[Proc] = []
        self._n_masters, self._n_borglets = masters, borglets
        self._master_opts = [
            "--poll-interval", str(poll_interval), "--down-after", str(down_after),
            "--lease-ttl", str(lease_ttl), *master_args,
        ]  # fmt: skip
        self.http = httpx.Client(timeout=10.0)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LocalCell:
        try:
            self.etcd.start()
            ports = [free_port() for _ in range(self._n_masters)]
            peers = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(ports))
            for i, port in enumerate(ports):
                argv = [
                    sys.executable, "-m", "reference.master", "--name", f"m{i}",
                    "--listen", f"127.0.0.1:{port}", "--etcd", ",".join(self.etcd.client_urls),
                    "--cell", self.cell, "--peers", peers, *self._master_opts,
                ]  # fmt: skip
                self.masters.append(Proc(f"m{i}", port, argv, self.workdir / f"master-m{i}.log"))
            for m in self.masters:
                m.start()
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
            "--listen", f"127.0.0.1:{port}", "--capacity", self.capacity,
            "--attrs", f"rack=r{len(self.borglets) % 2}", "--failure-domain", f"r{len(self.borglets) % 2}",
            "--state-dir", str(state), "--isolation", self.isolation, "--kill-tasks-on-exit",
            "--kill-grace", "1",
        ]  # fmt: skip
        proc = Proc(name, port, argv, self.workdir / f"borglet-{name}.log")
        proc.start()
        self.borglets.append(proc)
        wait_for(lambda: self.http.get(f"{proc.url}/healthz", timeout=1).status_code == 200, 20, f"borglet {name}")
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
            wait_for(lambda: self.http.get(f"{proc.url}/healthz", timeout=1).status_code == 200, 20, f"borglet {proc.name}")

    def stop(self) -> None:
        for m in self.masters:
            m.stop()
        for b in self.borglets:
            b.stop(15)
        for p in self.masters + self.borglets:
            for pid, created in p.seen:
                with contextlib.suppress(psutil.Error):
                    child = psutil.Process(pid)
                    if child.create_time() == created:
                        # Tasks run in their own sessions: take their children with them.
                        if os.getpgid(pid) == pid:
                            os.killpg(pid, signal.SIGKILL)
                        else:
                            child.kill()
        self.etcd.stop()
        self.http.close()

    def leftovers(self) -> list[int]:
        """Pids of the cell's processes (and the tasks they started) still alive."""
        alive = []
        for p in self.masters + self.borglets:
            if p.alive and p.popen is not None:
                alive.append(p.popen.pid)
            for pid, created in p.seen:
                with contextlib.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                        alive.append(pid)
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

    def leader(self, skip: Proc | None = None) -> Proc | None:
        for m in self.live_masters():
            if m is skip:
                continue
            try:
                if self.http.get(m.url + "/healthz", timeout=2).json().get("role") == "leader":
                    return m
            except httpx.HTTPError:
                continue
        return None

    def wait_leader(self, timeout: float = 15.0) -> Proc:
        return wait_for(self.leader, timeout, "a leader")

    def submit(self, job: dict[str, Any], timeout: float = 15.0) -> httpx.Response:
        """Submit, retrying 503s (no leader yet) until timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                r = self.request("POST", "/v1/jobs", json=job)
                if r.status_code != 503:
                    return r
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"submit of {job.get('name')} kept failing")
            time.sleep(0.2)

    def tasks(self, user: str, name: str, master: Proc | None = None) -> list[dict[str, Any]]:
        return self.get(f"/v1/jobs/{user}/{name}/tasks", master=master)["tasks"]

    def live_tasks(self, user: str, name: str) -> list[dict[str, Any]]:
        return [t for t in self.tasks(user, name) if t["state"] != "DEAD"]

    def running(self, user: str, name: str, n: int) -> list[dict[str, Any]] | None:
        """The job's tasks if n of them run with a started process, else None."""
        ts = [t for t in self.tasks(user, name) if t["state"] == "RUNNING" and t.get("port")]
        return ts if len(ts) >= n else None
