"""Start, inspect and stop a local cell on 127.0.0.1: etcd members, master replicas, borglets."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx
import psutil

import reference
from reference import procscan
from reference.client import CELL_FILE, CellClient, ClientError, state_dir_path
from reference.resources import parse_capacity, parse_pairs
from reference.ports import free_ports
from reference.store.etcd_cluster import EtcdCluster, EtcdClusterError

HOST = "127.0.0.1"
CLUSTER_SIZES = (1, 3, 5)
DEFAULT_CAPACITY = "cpu=4000m,ram=8GiB"
# Subdirectories a cell owns inside its state dir, and what each holds: `up` resumes the
# cell they hold, and only `up --fresh` deletes them.
OWNED_DIRS = {
    "etcd": "the etcd data: every machine, job, task and quota of the cell",
    "machines": "the borglets' task tables and task logs",
    "logs": "the processes' logs",
}

# Bounds on every wait. Python processes importing FastAPI take about a second each on a
# loaded two-core host; an election needs one lease TTL at most after the masters are up.
READY_TIMEOUT_S = 30.0
# Each process a launch starts at once adds this much to the wait for all to answer: a hundred
# borglets starting together on two cores take minutes, not seconds, to import and listen.
READY_PER_PROCESS_S = 1.5
MASTER_MAX_TXN_OPS = 1000  # under the local etcd's --max-txn-ops, with room to spare
LEADER_TIMEOUT_S = 45.0
# A borglet stopping with --kill-tasks-on-exit gives each task its kill grace (3 s) first.
STOP_TIMEOUT_S = 15.0

Progress = Callable[[str], None]


class LauncherError(RuntimeError):
    """The local cell could not be started, found or stopped as asked."""


class Role(StrEnum):
    ETCD = "etcd"
    MASTER = "master"
    BORGLET = "borglet"
    TOXIPROXY = "toxiproxy"
    AUTOSCALER = "autoscaler"


@dataclass(frozen=True)
class ProcessRecord:
    """One process of the cell. The start time tells it apart from a later process that
    reuses its pid, so `down` never signals an unrelated process; the command line is what
    `up` and `restart` run again to bring it back on its data."""

    role: Role
    name: str
    pid: int
    create_time: float
    url: str
    log: str
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProxyRecord:
    """One Toxiproxy proxy of the cell: `listen` forwards to `upstream` (both host:port)."""

    name: str
    listen: str
    upstream: str


@dataclass(frozen=True)
class CellInfo:
    """What the cell file says: where every process of a local cell listens and runs."""

    cell: str
    state_dir: str
    workdir: str
    started_at: float
    master_urls: tuple[str, ...]
    etcd_urls: tuple[str, ...]
    borglet_urls: dict[str, str]
    processes: tuple[ProcessRecord, ...] = ()
    stopped_at: float | None = None
    version: int = 1
    # Set only for a cell started with --toxiproxy: the server's API and every named proxy.
    toxiproxy_url: str | None = None
    proxies: tuple[ProxyRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["master_urls"], data["etcd_urls"] = list(self.master_urls), list(self.etcd_urls)
        data["processes"] = [asdict(p) for p in self.processes]
        if self.toxiproxy_url is None:
            # A cell without Toxiproxy keeps the cell file it always had.
            del data["toxiproxy_url"], data["proxies"]
        else:
            data["proxies"] = [asdict(p) for p in self.proxies]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellInfo:
        procs = tuple(
            ProcessRecord(**{**p, "role": Role(p["role"]), "command": tuple(p.get("command") or ())})
            for p in data.get("processes", [])
        )
        return cls(
            cell=data["cell"],
            state_dir=data["state_dir"],
            workdir=data["workdir"],
            started_at=data["started_at"],
            master_urls=tuple(data["master_urls"]),
            etcd_urls=tuple(data["etcd_urls"]),
            borglet_urls=dict(data["borglet_urls"]),
            processes=procs,
            stopped_at=data.get("stopped_at"),
            version=data.get("version", 1),
            toxiproxy_url=data.get("toxiproxy_url"),
            proxies=tuple(ProxyRecord(**p) for p in data.get("proxies") or []),
        )

    def save(self) -> None:
        path = Path(self.state_dir) / CELL_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(path)  # atomic: a client never reads half a cell file

    @classmethod
    def load(cls, state_dir: str | os.PathLike[str] | None = None) -> CellInfo:
        path = state_dir_path(state_dir) / CELL_FILE
        try:
            return cls.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            raise LauncherError(f"no cell in {path.parent}: {path} does not exist") from None
        except (ValueError, KeyError, TypeError) as err:
            raise LauncherError(f"unreadable cell file {path}: {err}") from None

    def of_role(self, role: Role) -> list[ProcessRecord]:
        return [p for p in self.processes if p.role is role]

    def running(self) -> list[ProcessRecord]:
        return [p for p in self.processes if is_alive(p)]


# --- processes -----------------------------------------------------------------------------

# Popen handles of processes this Python process started, so stopping them in the same
# process (tests, the demo) reaps them instead of leaving zombies behind.
_children: dict[int, subprocess.Popen[bytes]] = {}
_clusters: dict[str, EtcdCluster] = {}


def is_alive(record: ProcessRecord) -> bool:
    """Whether the recorded process still runs (a zombie or a reused pid does not count)."""
    return _process(record.pid, record.create_time) is not None


def _process(pid: int, create_time: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.05 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.NoSuchProcess:
        return None


def child_env(workdir: str) -> dict[str, str]:
    """Environment of masters and borglets, inherited by tasks.

    The package root and the start directory go on PYTHONPATH so `python -m reference.master`
    and a task's `python -m examples.hello_world.server` import without an install; this
    interpreter's directory goes first on PATH so a task's `python` is the same Python.
    """
    env = dict(os.environ)
    package_root = str(Path(reference.__file__).resolve().parent.parent)
    paths = [package_root, workdir, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("MINBORG_MASTER", None)  # a master must not take a stray client setting as its own
    return env


def spawn(
    role: Role, name: str, command: list[str], url: str, log: Path, cwd: str, env: dict[str, str]
) -> ProcessRecord:
    """Start one process in its own session (a terminal's ^C or hang-up does not reach it)."""
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            cwd=cwd, env=env, start_new_session=True,
        )  # fmt: skip
    _children[popen.pid] = popen
    return ProcessRecord(
        role, name, popen.pid, psutil.Process(popen.pid).create_time(), url, str(log), tuple(command)
    )


def stop_processes(
    records: Sequence[ProcessRecord], timeout: float = STOP_TIMEOUT_S
) -> list[ProcessRecord]:
    """SIGTERM each live process's group, SIGKILL what is left after `timeout`; returns the
    records still alive after that (none, unless the kernel refuses)."""
    live = [r for r in records if is_alive(r)]
    for record in live:
        _signal_group(record.pid, signal.SIGCONT)  # a paused process must run to exit
        _signal_group(record.pid, signal.SIGTERM)
    left = _wait_gone(live, timeout)
    for record in left:
        _signal_group(record.pid, signal.SIGKILL)
    left = _wait_gone(left, 5.0)
    _reap(records)
    return left


def kill_process(record: ProcessRecord, sig: int = signal.SIGKILL, timeout: float = 5.0) -> None:
    """Send `sig` to one recorded process (only if it is still the same process)."""
    if not is_alive(record):
        raise LauncherError(f"{record.role} {record.name} (pid {record.pid}) is not running")
    os.kill(record.pid, sig)
    if sig in (signal.SIGKILL, signal.SIGTERM) and _wait_gone([record], timeout):
        raise LauncherError(f"{record.role} {record.name} (pid {record.pid}) survived signal {sig}")
    _reap([record])


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(records: Sequence[ProcessRecord], timeout: float) -> list[ProcessRecord]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [r for r in records if is_alive(r)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _reap(records: Iterable[ProcessRecord]) -> None:
    for record in records:
        popen = _children.get(record.pid)
        if popen is not None and popen.poll() is not None:
            del _children[record.pid]


def _descendants(records: Iterable[ProcessRecord]) -> list[ProcessRecord]:
    """The live descendants (tasks) of the given processes, as records to check later."""
    found = []
    for record in records:
        proc = _process(record.pid, record.create_time)
        if proc is None:
            continue
        try:
            children = proc.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for child in children:
            try:
                found.append(
                    ProcessRecord(Role.BORGLET, f"task of {record.name}", child.pid,
                                  child.create_time(), "", "")
                )  # fmt: skip
            except psutil.NoSuchProcess:
                pass
    return found


def _log_tail(path: str, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- up --------------------------------------------------------------------------------------


def up(
    state_dir: str | os.PathLike[str] | None = None,
    cell: str = "local",
    replicas: int = 1,
    machines: int = 3,
    machine_capacity: str = DEFAULT_CAPACITY,
    etcd_members: int | None = None,
    toxiproxy: bool = False,
    base_port: int | None = None,
    *,
    autoscale_machines: tuple[int, int] | None = None,
    master_args: Sequence[str] = (),
    fresh: bool = False,
    progress: Progress | None = None,
) -> CellInfo:
    """Start a local cell and return its cell file's contents once a leader exists and every
    machine is registered. On any failure everything started so far is stopped again.

    A state dir that holds a stopped cell is resumed on its data (`resume`; the shape
    arguments then come from its cell file); `fresh` deletes that cell first instead."""
    say = progress or (lambda _msg: None)
    etcd_members = replicas if etcd_members is None else etcd_members
    _check_arguments(cell, replicas, machines, machine_capacity, etcd_members)
    root = state_dir_path(state_dir)
    if not fresh and (root / CELL_FILE).exists():
        return resume(root, progress=say)
    server = find_toxiproxy_server() if toxiproxy else None
    _prepare_state_dir(root, say)
    workdir = os.getcwd()
    env = child_env(workdir)
    info = CellInfo(cell, str(root), workdir, time.time(), (), (), {})
    try:
        say(f"etcd: starting {etcd_members} member(s)")
        cluster = EtcdCluster(root / "etcd", members=etcd_members, host=HOST, base_port=base_port)
        _clusters[str(root)] = cluster
        cluster.start()
        info = replace(info, etcd_urls=tuple(cluster.client_urls), processes=_etcd_records(cluster))
        info.save()

        count = replicas + machines
        ports = (
            free_ports(count, host=HOST)
            if base_port is None
            else list(range(base_port + 2 * etcd_members, base_port + 2 * etcd_members + count))
        )
        master_ports, borglet_ports = ports[:replicas], ports[replicas:]
        names = [f"master{i}" for i in range(replicas)]
        urls = {
            name: f"http://{HOST}:{port}" for name, port in zip(names, master_ports, strict=True)
        }
        etcd_of = {name: list(cluster.client_urls) for name in names}
        if server is not None:
            say("toxiproxy: starting the server and a proxy on every link")
            # Masters and borglets are not listening yet: their ports must not be handed out again.
            reserved = set(ports)
            info = _start_toxiproxy(info, root, server, workdir, env, reserved)
            plan = plan_proxies(names, urls, cluster.client_urls, borglet_ports)
            proxies = create_proxies(info.toxiproxy_url or "", plan, reserved)
            info = replace(info, proxies=tuple(proxies))
            info.save()
            etcd_of = {name: proxied_etcd_urls(info.proxies, name) for name in names}
        say(f"masters: starting {replicas} replica(s)")
        masters = [
            _start_master(root, cell, name, urls, etcd_of[name], master_args, workdir, env)
            for name in names
        ]
        say(f"borglets: starting {machines} machine(s) of {machine_capacity}")
        borglets = [
            _start_borglet(root, f"machine{i}", port, machine_capacity, i, workdir, env)
            for i, port in enumerate(borglet_ports)
        ]
        info = replace(
            info,
            # Clients reach the masters through their proxies when there are any.
            master_urls=tuple(client_url(info.proxies, m.name, m.url) for m in masters),
            borglet_urls={b.name: b.url for b in borglets},
            processes=info.processes + tuple(masters) + tuple(borglets),
        )
        info.save()

        _wait_borglets(borglets)
        if info.proxies:
            # Toxiproxy accepts a connection before its upstream listens and then drops it,
            # which a client cannot tell from a lost answer: wait until every master listens.
            _wait_ready(masters, "/healthz", READY_TIMEOUT_S)
        leader = wait_for_leader(info, LEADER_TIMEOUT_S)
        say(f"masters: {leader} is the leader")
        _register_machines(info, machine_capacity)
        say(f"machines: {machines} registered")
        if autoscale_machines is not None:
            from reference.elastic import cellscaler  # it imports this module

            say(f"cell autoscaler: {autoscale_machines[0]} to {autoscale_machines[1]} machines")
            scaler = cellscaler.spawn(info, autoscale_machines, machine_capacity)
            info = replace(info, processes=info.processes + (scaler,))
            info.save()
    except BaseException:
        _stop_cell(info)
        info.save()
        raise
    return info


def _check_arguments(
    cell: str, replicas: int, machines: int, capacity: str, etcd_members: int
) -> None:
    if replicas not in CLUSTER_SIZES:
        raise LauncherError(f"--replicas must be one of {CLUSTER_SIZES}, got {replicas}")
    if etcd_members not in CLUSTER_SIZES:
        raise LauncherError(f"etcd members must be one of {CLUSTER_SIZES}, got {etcd_members}")
    if machines < 0:
        raise LauncherError(f"--machines must be 0 or more, got {machines}")
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", cell):
        raise LauncherError(f"invalid cell name {cell!r}: use lowercase letters, digits and '-'")
    try:
        parse_capacity(capacity)
    except ValueError as err:
        raise LauncherError(f"invalid --machine-capacity: {err}") from None


def _prepare_state_dir(root: Path, say: Progress) -> None:
    """Refuse a running cell; delete a stopped one (saying what goes) so the new cell starts empty."""
    if (root / CELL_FILE).exists():
        _refuse_running(CellInfo.load(root))
        stragglers = procscan.scan(root)
        if stragglers:
            say(f"--fresh: killing {len(stragglers)} task process(es) of the old cell still running")
            left = procscan.kill(root, stragglers)
            if left:
                raise LauncherError(f"task processes of the old cell would not die: pids {[p.pid for p in left]}")
        for name, what in OWNED_DIRS.items():
            if (root / name).exists():
                say(f"--fresh: deleting {root / name} ({what})")
                shutil.rmtree(root / name, ignore_errors=True)
    else:
        leftovers = [name for name in OWNED_DIRS if (root / name).exists()]
        if leftovers:
            raise LauncherError(
                f"{root} holds {', '.join(leftovers)} but no {CELL_FILE}: it does not look like "
                "a minborg state dir; choose another --state-dir"
            )
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "machines").mkdir(parents=True, exist_ok=True)


def _etcd_records(cluster: EtcdCluster) -> tuple[ProcessRecord, ...]:
    # Without a command: etcd members are brought back by EtcdCluster from its own state file.
    return tuple(
        ProcessRecord(Role.ETCD, m.name, m.pid, m.create_time, url, str(cluster.log_path(i)))
        for i, (m, url) in enumerate(zip(cluster.members, cluster.client_urls, strict=True))
        if m.pid is not None and m.create_time is not None
    )


def _start_master(
    root: Path, cell: str, name: str, urls: dict[str, str], etcd_urls: list[str],
    extra: Sequence[str], workdir: str, env: dict[str, str],
) -> ProcessRecord:  # fmt: skip
    # Every replica is told of the others so any of them can list all replicas in /v1/cell.
    peers = ",".join(f"{peer}={url}" for peer, url in urls.items() if peer != name)
    port = urls[name].rsplit(":", 1)[1]
    command = [
        sys.executable, "-m", "reference.master", "--name", name, "--listen", f"{HOST}:{port}",
        "--etcd", ",".join(etcd_urls), "--cell", cell, "--advertise", urls[name],
        *(["--peers", peers] if peers else []),
        # The cell's etcd takes larger txns than etcd's default (etcd_cluster.MAX_TXN_OPS).
        "--max-txn-ops", str(MASTER_MAX_TXN_OPS), *extra,
    ]  # fmt: skip
    log = root / "logs" / f"{name}.log"
    return spawn(Role.MASTER, name, command, urls[name], log, workdir, env)


def rack_of(i: int) -> str:
    """Machines alternate between two racks so a job can spread over failure domains."""
    return f"r{i % 2}"


def _start_borglet(
    root: Path, name: str, port: int, capacity: str, i: int, workdir: str, env: dict[str, str]
) -> ProcessRecord:
    command = [
        sys.executable, "-m", "reference.borglet", "--name", name, "--listen", f"{HOST}:{port}",
        "--capacity", capacity, "--attrs", f"rack={rack_of(i)}", "--failure-domain", rack_of(i),
        "--state-dir", str(root / "machines" / name), "--kill-tasks-on-exit",
    ]  # fmt: skip
    log = root / "logs" / f"{name}.log"
    # The borglet's cwd is where `cell up` ran: tasks inherit it, so relative paths and
    # `python -m examples...` resolve from there.
    return spawn(Role.BORGLET, name, command, f"http://{HOST}:{port}", log, workdir, env)


def _wait_ready(records: Sequence[ProcessRecord], path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(records)
    with httpx.Client(timeout=1.0) as http:
        while pending:
            for record in list(pending):
                _check_running(record)
                try:
                    if http.get(record.url + path).status_code == 200:
                        pending.remove(record)
                except httpx.TransportError:
                    pass
            if pending and time.monotonic() > deadline:
                names = ", ".join(r.name for r in pending)
                raise LauncherError(
                    f"{names} not answering {path} after {timeout:.0f}s; "
                    f"log of {pending[0].name}:\n{_log_tail(pending[0].log)}"
                )
            if pending:
                time.sleep(0.1)


def _wait_borglets(borglets: Sequence[ProcessRecord]) -> None:
    """Wait for borglets started together: the more of them, the longer they take to listen."""
    _wait_ready(borglets, "/healthz", READY_TIMEOUT_S + READY_PER_PROCESS_S * len(borglets))


def _check_running(record: ProcessRecord) -> None:
    if not is_alive(record):
        raise LauncherError(
            f"{record.role} {record.name} exited at startup; end of {record.log}:\n{_log_tail(record.log)}"
        )


def wait_for_leader(
    info: CellInfo, timeout: float = LEADER_TIMEOUT_S, not_named: str | None = None
) -> str:
    """Poll /v1/cell on every live master until one names a leader (other than `not_named`).

    Only a leader among this cell's own masters counts: if another process took a master's
    port before it could bind, the answer would come from a different cell.
    """
    deadline = time.monotonic() + timeout
    masters = info.of_role(Role.MASTER)
    own = {m.name for m in masters}
    last = "no master answered"
    with httpx.Client(timeout=1.0) as http:
        while True:
            live = [m for m in masters if is_alive(m)]
            if not live:
                _check_running(masters[0])
            for master in live:
                try:
                    response = http.get(master.url + "/v1/cell")
                    leader = response.json().get("leader") if response.status_code == 200 else None
                    last = f"{master.name}: HTTP {response.status_code}"
                except (httpx.TransportError, ValueError) as err:
                    last = f"{master.name}: {err}"
                    continue
                if leader and leader not in own:
                    raise LauncherError(
                        f"{master.url} answers for another cell (its leader is {leader}, not one "
                        f"of {sorted(own)}): its port was taken; run `cell up` again"
                    )
                if leader and leader != not_named:
                    return str(leader)
            if time.monotonic() > deadline:
                tail = _log_tail(masters[0].log)
                raise LauncherError(
                    f"no leader elected after {timeout:.0f}s ({last}); end of {masters[0].log}:\n{tail}"
                )
            time.sleep(0.1)


def _register_machines(info: CellInfo, capacity: str) -> None:
    # Quantities go as the user wrote them ("4000m", "8GiB"): the API parses them itself.
    declared = parse_pairs(capacity)
    with CellClient(list(info.master_urls)) as client:
        for i, (name, url) in enumerate(info.borglet_urls.items()):
            machine = {
                "name": name,
                # The masters reach a machine at the address it is registered with.
                "address": borglet_address(info.proxies, i, url),
                "capacity": declared,
                "attrs": {"rack": rack_of(i)},
                "failure_domain": rack_of(i),
            }
            try:
                client.add_machine(machine)
            except ClientError as err:
                if err.status != 409:  # already registered: fine on a retried registration
                    raise LauncherError(f"could not register machine {name}: {err}") from None


# --- resume and restart -----------------------------------------------------------------------


def _refuse_running(info: CellInfo) -> None:
    alive = info.running()
    if alive:
        names = ", ".join(f"{p.role} {p.name}" for p in alive[:6]) + (", ..." if len(alive) > 6 else "")
        raise LauncherError(
            f"a cell is already running in {info.state_dir}: {len(alive)} of its "
            f"{len(info.processes)} processes are alive ({names}). To restart it on its data: "
            "`minborg cell restart`; to stop it (its files stay): `minborg cell down`; or choose "
            "another --state-dir"
        )


def _check_resumable(info: CellInfo) -> None:
    """Refuse a cell whose files cannot bring it back (a cell file without commands, no etcd data)."""
    root = Path(info.state_dir)
    bare = [p.name for p in info.processes if p.role is not Role.ETCD and not p.command]
    if bare:
        raise LauncherError(
            f"the cell file in {root} does not record how {', '.join(bare)} were started (it predates "
            "resuming cells); start a new cell with `minborg cell up --fresh`"
        )
    try:
        cluster = EtcdCluster.load(root / "etcd")
    except EtcdClusterError:
        raise LauncherError(f"no etcd data in {root / 'etcd'}: start a new cell with `minborg cell up --fresh`") from None
    missing = [str(cluster.data_dir(i)) for i in range(len(cluster.members)) if not cluster.data_dir(i).is_dir()]
    if missing:
        raise LauncherError(f"etcd data dirs missing: {', '.join(missing)}; start a new cell with `minborg cell up --fresh`")
    if not Path(info.workdir).is_dir():
        raise LauncherError(f"the cell's working directory {info.workdir} is gone; start a new cell with --fresh")


def resume(state_dir: str | os.PathLike[str] | None = None, progress: Progress | None = None) -> CellInfo:
    """Bring a stopped cell back on its data: etcd members on their data dirs, the masters
    (which rejoin and elect), the borglets on their state dirs (they re-adopt the tasks that
    still run and report the others lost); machines stay registered in etcd."""
    say = progress or (lambda _msg: None)
    info = CellInfo.load(state_dir)
    _refuse_running(info)
    _check_resumable(info)
    shape = Counter(p.role for p in info.processes)
    say(
        f"resuming cell {info.cell} from {info.state_dir}: {shape[Role.ETCD]} etcd member(s), "
        f"{shape[Role.MASTER]} master(s), {shape[Role.BORGLET]} machine(s), as recorded "
        "(the shape options apply to a new cell only: --fresh)"
    )
    info = replace(info, started_at=time.time(), stopped_at=None)
    info.save()
    return _start_missing(info, say)


def restart(
    state_dir: str | os.PathLike[str] | None = None,
    control_plane: bool = False,
    progress: Progress | None = None,
) -> CellInfo:
    """Restart etcd and the masters on their data and, unless `control_plane`, the borglets
    on their state dirs. Tasks keep running throughout: the borglets are stopped without
    their tasks (SIGKILL to the borglet alone) and re-adopt them when they start again.
    Whatever was already dead (a SIGKILLed control plane) is simply started."""
    say = progress or (lambda _msg: None)
    info = CellInfo.load(state_dir)
    _check_resumable(info)
    if info.of_role(Role.AUTOSCALER):
        stop_processes(info.of_role(Role.AUTOSCALER))  # it writes the cell file: read it after
        info = CellInfo.load(state_dir)
    masters = [m for m in info.of_role(Role.MASTER) if is_alive(m)]
    if masters:
        say(f"masters: stopping {len(masters)}")  # they resign: the leader key goes at once
        stop_processes(masters)
    etcd = [m for m in info.of_role(Role.ETCD) if is_alive(m)]
    if etcd:
        say(f"etcd: stopping {len(etcd)} member(s)")
        cluster = _clusters.pop(info.state_dir, None) or EtcdCluster.load(Path(info.state_dir) / "etcd")
        cluster.stop()
        stop_processes(etcd, timeout=5.0)
    if not control_plane:
        borglets = [b for b in info.of_role(Role.BORGLET) if is_alive(b)]
        if borglets:
            say(f"borglets: stopping {len(borglets)}, their tasks left running")
            for record in borglets:
                kill_process(record, signal.SIGKILL)  # SIGTERM would kill its tasks with it
    info = replace(info, started_at=time.time(), stopped_at=None)
    info.save()
    return _start_missing(info, say)


def _start_missing(info: CellInfo, say: Progress) -> CellInfo:
    """Start every process of the cell file that is not running, on its data, and wait until
    a leader is elected. On failure what runs is left running (`cell status` shows it)."""
    root = Path(info.state_dir)
    env = child_env(info.workdir)
    try:
        if any(not is_alive(m) for m in info.of_role(Role.ETCD)):
            cluster = EtcdCluster.load(root / "etcd")
            _clusters[str(root)] = cluster
            say(f"etcd: starting {sum(not is_alive(m) for m in info.of_role(Role.ETCD))} member(s) on their data")
            cluster.resume(READY_TIMEOUT_S)
            info = _with(info, Role.ETCD, _etcd_records(cluster))
        toxiproxy = [p for p in info.of_role(Role.TOXIPROXY) if not is_alive(p)]
        if toxiproxy:
            say("toxiproxy: starting the server and its proxies again")
            info = _with(info, Role.TOXIPROXY, _respawn(toxiproxy, info, env))
            _wait_ready(info.of_role(Role.TOXIPROXY), "/version", READY_TIMEOUT_S)
            _recreate_proxies(info.toxiproxy_url or "", info.proxies)
        for role, what in ((Role.MASTER, "masters"), (Role.BORGLET, "borglets")):
            dead = [p for p in info.of_role(role) if not is_alive(p)]
            if dead:
                say(f"{what}: starting {', '.join(p.name for p in dead)}")
                info = _with(info, role, _respawn(dead, info, env))
        borglets = info.of_role(Role.BORGLET)
        _wait_borglets(borglets)
        if info.proxies:
            _wait_ready(info.of_role(Role.MASTER), "/healthz", READY_TIMEOUT_S)
        leader = wait_for_leader(info, LEADER_TIMEOUT_S)
        say(f"masters: {leader} is the leader")
        autoscaler = [p for p in info.of_role(Role.AUTOSCALER) if not is_alive(p)]
        if autoscaler:
            say("cell autoscaler: starting it again")
            info = _with(info, Role.AUTOSCALER, _respawn(autoscaler, info, env))
    except LauncherError as err:
        raise LauncherError(
            f"{err}\ncell {info.cell} is partly up: `minborg cell status` shows what runs; "
            "`minborg cell restart` tries again, `minborg cell down` stops it"
        ) from None
    except EtcdClusterError as err:
        raise LauncherError(
            f"etcd did not come back on its data: {err}\n`minborg cell down` stops what runs"
        ) from None
    return info


def _respawn(records: Sequence[ProcessRecord], info: CellInfo, env: dict[str, str]) -> list[ProcessRecord]:
    return [
        spawn(r.role, r.name, list(r.command), r.url, Path(r.log), info.workdir, env) for r in records
    ]


def _with(info: CellInfo, role: Role, records: Iterable[ProcessRecord]) -> CellInfo:
    """The cell file with the given records of `role` replacing those of the same name; saved."""
    new = {r.name: r for r in records}
    processes = tuple(new.pop(p.name, p) if p.role is role else p for p in info.processes)
    info = replace(info, processes=processes + tuple(new.values()))
    info.save()
    return info


def _recreate_proxies(api: str, proxies: Sequence[ProxyRecord]) -> None:
    """Create each recorded proxy again on its recorded address (a new server has none)."""
    with httpx.Client(timeout=5.0) as http:
        for p in proxies:
            body = {"name": p.name, "listen": p.listen, "upstream": p.upstream, "enabled": True}
            response = http.post(api + "/proxies", json=body)
            if response.status_code not in (201, 409):
                raise LauncherError(f"toxiproxy refused proxy {p.name} on {p.listen}: {response.text}")


# --- toxiproxy ---------------------------------------------------------------------------------

TOXIPROXY_ENV = "MINBORG_TOXIPROXY_SERVER"
TOXIPROXY_INSTALL = "chaos/install_toxiproxy.sh"


def find_toxiproxy_server(project: Path | None = None) -> str:
    """The Toxiproxy server binary: $MINBORG_TOXIPROXY_SERVER, else the project's
    tools/bin/toxiproxy-server (where chaos/install_toxiproxy.sh puts it), else PATH."""
    project = project or Path(reference.__file__).resolve().parent.parent
    candidates = [
        os.environ.get(TOXIPROXY_ENV),
        str(project / "tools" / "bin" / "toxiproxy-server"),
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("toxiproxy-server")
    if found:
        return found
    raise LauncherError(
        f"--toxiproxy needs the Toxiproxy server: no toxiproxy-server in {project / 'tools/bin'}, "
        f"${TOXIPROXY_ENV} or PATH; install it with `bash {TOXIPROXY_INSTALL}`"
    )


def plan_proxies(
    masters: Sequence[str], master_urls: dict[str, str], etcd_urls: Sequence[str],
    borglet_ports: Sequence[int],
) -> list[tuple[str, str]]:  # fmt: skip
    """(name, upstream host:port) of every link: client to each master, each master to each
    etcd member, the masters to each borglet."""
    plan = [(f"client-{name}", _hostport(master_urls[name])) for name in masters]
    plan += [
        (f"{name}-etcd{j}", _hostport(url)) for name in masters for j, url in enumerate(etcd_urls)
    ]
    plan += [(f"master-borglet{k}", f"{HOST}:{port}") for k, port in enumerate(borglet_ports)]
    return plan


def _free_port(reserved: set[int]) -> int:
    """A free port not in `reserved` (ports promised to processes that have not bound yet)."""
    for _attempt in range(50):
        port = free_ports(1, host=HOST)[0]
        if port not in reserved:
            reserved.add(port)
            return port
    raise LauncherError("no free port found for toxiproxy")


def create_proxies(
    api: str, plan: Sequence[tuple[str, str]], reserved: set[int]
) -> list[ProxyRecord]:
    """Create each planned proxy on a free port (retrying a port taken meanwhile)."""
    records = []
    with httpx.Client(timeout=5.0) as http:
        for name, upstream in plan:
            for _attempt in range(5):
                listen = f"{HOST}:{_free_port(reserved)}"
                body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
                response = http.post(api + "/proxies", json=body)
                if response.status_code == 201:
                    records.append(ProxyRecord(name, listen, upstream))
                    break
            else:
                raise LauncherError(f"toxiproxy refused proxy {name}: {response.text}")
    return records


def proxied_etcd_urls(proxies: Sequence[ProxyRecord], master: str) -> list[str]:
    """The etcd URLs one master is given: its own master<i>-etcd<j> proxies, in member order."""
    mine = sorted(
        (p for p in proxies if p.name.startswith(f"{master}-etcd")),
        key=lambda p: int(p.name.rsplit("etcd", 1)[1]),
    )
    return [f"http://{p.listen}" for p in mine]


def client_url(proxies: Sequence[ProxyRecord], master: str, direct: str) -> str:
    found = [p for p in proxies if p.name == f"client-{master}"]
    return f"http://{found[0].listen}" if found else direct


def borglet_address(proxies: Sequence[ProxyRecord], k: int, direct: str) -> str:
    found = [p for p in proxies if p.name == f"master-borglet{k}"]
    return f"http://{found[0].listen}" if found else direct


def _hostport(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")


def _start_toxiproxy(
    info: CellInfo, root: Path, server: str, workdir: str, env: dict[str, str], reserved: set[int]
) -> CellInfo:
    port = _free_port(reserved)
    url = f"http://{HOST}:{port}"
    command = [server, "-host", HOST, "-port", str(port)]
    record = spawn(Role.TOXIPROXY, "toxiproxy", command, url, root / "logs" / "toxiproxy.log",
                   workdir, env)  # fmt: skip
    info = replace(info, toxiproxy_url=url, processes=info.processes + (record,))
    info.save()
    _wait_ready([record], "/version", READY_TIMEOUT_S)
    return info


# --- down and status ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stopped:
    """What `shut_down` did: the cell processes it found running, the task processes a scan
    of /proc still found under the state dir once the borglets had stopped (all killed), and
    what is left of either (nothing, unless the kernel refused)."""

    info: CellInfo
    processes: int
    tasks_found: int
    tasks_left: tuple[procscan.TaskProcess, ...]
    survivors: tuple[ProcessRecord, ...]


def shut_down(
    state_dir: str | os.PathLike[str] | None = None, progress: Progress | None = None
) -> Stopped:
    """Stop every process of the local cell (borglets first so their tasks die with them, then
    masters, then etcd), then find task processes that outlived their borglet (SIGKILLed, or
    a task that left its session) by the borglet dir in their environment and kill them.
    Files stay where they are."""
    say = progress or (lambda _msg: None)
    info = CellInfo.load(state_dir)
    if info.of_role(Role.AUTOSCALER):
        # It adds machines to the cell file: stop it first, then read what it left there.
        stop_processes(info.of_role(Role.AUTOSCALER))
        info = CellInfo.load(state_dir)
    running = len(info.running())
    survivors = _stop_cell(info, say)
    found = procscan.scan(info.state_dir)
    left = procscan.kill(info.state_dir, found) if found else []
    say(f"task processes: {len(found)} found under {info.state_dir} after the borglets stopped, {len(left)} left")
    stopped = replace(info, stopped_at=time.time())
    stopped.save()
    return Stopped(stopped, running, len(found), tuple(left), tuple(survivors))


def down(
    state_dir: str | os.PathLike[str] | None = None, progress: Progress | None = None
) -> CellInfo:
    """`shut_down`, raising LauncherError if any process of the cell or its tasks is left."""
    result = shut_down(state_dir, progress)
    if result.survivors or result.tasks_left:
        listing = ", ".join(
            [f"{r.name} (pid {r.pid})" for r in result.survivors]
            + [f"task {t.task_id or '?'} (pid {t.pid})" for t in result.tasks_left]
        )
        raise LauncherError(f"processes still running after cell down: {listing}")
    return result.info


def _stop_cell(info: CellInfo, say: Progress = lambda _msg: None) -> list[ProcessRecord]:
    """Stop everything in the cell file; returns the processes that would not die."""
    stop_processes(info.of_role(Role.AUTOSCALER))  # before the machines it would replace
    borglets, masters = info.of_role(Role.BORGLET), info.of_role(Role.MASTER)
    tasks = _descendants(borglets)
    # Re-adopted tasks are no children of their borglet: count them by their environment.
    running = {p.pid for p in procscan.scan(info.state_dir)} | {t.pid for t in tasks}
    say(f"borglets: stopping {sum(map(is_alive, borglets))} and their {len(running)} task process(es)")
    stop_processes(borglets)
    # A task that outlived its borglet (SIGKILLed borglet, ignored SIGTERM) leads its own session.
    stop_processes(tasks, timeout=2.0)
    say(f"masters: stopping {sum(map(is_alive, masters))}")
    stop_processes(masters)
    toxiproxy = info.of_role(Role.TOXIPROXY)
    if toxiproxy:
        say("toxiproxy: stopping the server")
        stop_processes(toxiproxy, timeout=5.0)
    etcd = info.of_role(Role.ETCD)
    say(f"etcd: stopping {sum(map(is_alive, etcd))} member(s)")
    cluster = _clusters.pop(info.state_dir, None)
    try:
        (cluster or EtcdCluster.load(Path(info.state_dir) / "etcd")).stop()
    except EtcdClusterError:
        pass  # no etcd state file: the records below still get stopped
    stop_processes(etcd, timeout=5.0)
    return [r for r in (*info.processes, *tasks) if is_alive(r)]


def status(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The local cell's processes (alive or not) and, when a master answers, its /v1/cell."""
    info = CellInfo.load(state_dir)
    processes = [
        {
            "role": str(p.role),
            "name": p.name,
            "pid": p.pid,
            "alive": is_alive(p),
            "url": p.url,
            "log": p.log,
        }
        for p in info.processes
    ]
    result: dict[str, Any] = {
        "cell": info.cell,
        "state_dir": info.state_dir,
        "running": any(p["alive"] for p in processes),
        "stopped_at": info.stopped_at,
        "master_urls": list(info.master_urls),
        "etcd_urls": list(info.etcd_urls),
        "processes": processes,
        "api": None,
        "api_error": None,
    }
    if result["running"] and info.master_urls:
        try:
            with CellClient(list(info.master_urls), timeout=2.0, retry_s=3.0) as client:
                result["api"] = client.cell()
        except ClientError as err:
            result["api_error"] = str(err)
    return result
