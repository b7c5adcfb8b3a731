"""A local cell's life: `up` (a new cell, or a stopped one resumed on its data), `restart`, `down` and `status`."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from reference import procscan
from reference.cellfile import CELL_FILE, read_admin_token, state_dir_path
from reference.client import CellClient, ClientError
from reference.launcher import cpubudget, netns
from reference.launcher import tls as cell_tls
from reference.launcher.cellapi import LEADER_TIMEOUT_S, register_machines, wait_for_leader
from reference.launcher.cellfile import (
    CellInfo,
    LauncherError,
    ProcessRecord,
    Role,
    is_alive,
    live_process,
    with_records,
)
from reference.launcher.processes import (
    READY_TIMEOUT_S,
    child_env,
    descendants,
    kill_process,
    spawn,
    stop_processes,
    wait_borglets,
    wait_ready,
)
from reference.launcher.roles import (
    DEFAULT_CAPACITY,
    HOLLOW_PROCESS,
    etcd_records,
    hollow_addresses,
    make_cell_ca,
    make_channel_key,
    start_borglet,
    start_hollow,
    start_master,
    start_scheduler,
)
from reference.launcher.statedir import (
    check_arguments,
    check_hollow,
    check_resumable,
    ensure_admin_token,
    prepare_state_dir,
    refuse_running,
)
from reference.launcher.toxiproxy import (
    client_url,
    create_proxies,
    find_toxiproxy_server,
    plan_proxies,
    proxied_etcd_urls,
    recreate_proxies,
    start_toxiproxy,
)
from reference.ports import HOST, free_ports
from reference.store.etcd_cluster import EtcdCluster, EtcdClusterError

Progress = Callable[[str], None]

# The etcd clusters this Python process started, by state dir: stopping one it started
# reaps its members instead of leaving zombies behind.
_clusters: dict[str, EtcdCluster] = {}
RUNTIMES = ("process", "docker")  # a borglet's --runtime


def default_runtime() -> str:
    """The borglets' runtime where a caller names none: `MINBORG_RUNTIME` (process, the
    default, or docker), so a whole test suite can run its cells on the docker runtime."""
    return os.environ.get("MINBORG_RUNTIME", "") or "process"


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
    master_args: Sequence[str] = (),
    fresh: bool = False,
    progress: Progress | None = None,
    hollow: int = 0,
    hollow_start_delay_s: float | None = None,
    replica_cpu: float | None = None,
    schedulers: int = 1,
    insecure_channel: bool = False,
    runtime: str | None = None,
    machine_shares: int | None = cpubudget.DEFAULT_MACHINE_SHARES,
    store_tls: bool = True,
    hosts: str = "loopback",
    tls: bool = False,
) -> CellInfo:
    """Start a local cell and return its cell file's contents once a leader exists and every
    machine is registered. On any failure everything started so far is stopped again.

    A state dir that holds a stopped cell is resumed on its data (`resume`; the shape
    arguments then come from its cell file); `fresh` deletes that cell first instead.

    `hollow` adds that many hollow machines (scale tests only), served by one more process,
    beside the `machines` real borglets: `machines=0` makes a cell of hollow machines alone.
    `replica_cpu` holds each master replica and scheduler process to that many cores
    (`cpubudget`), each in its own cgroup, for as long as the cell lives (restarts and resumes
    included). `schedulers` scheduler processes run beside the masters, one active at a time;
    with none, the leader schedules. `insecure_channel` starts the masters without the
    channel key and the borglets with `--insecure-channel`: only to measure what signing costs.
    `machine_shares` puts the real borglets, and with them their tasks, in one CPU group of
    that weight (cpu.shares; every other process weighs 1024); None or 0: no group.
    `runtime` "docker" starts the borglets with `--runtime docker`: a job that names an image
    runs in containers (borglet/containers.py); None: `default_runtime()`.
    `store_tls` False starts etcd on plain http, open to any local process: only to measure
    what TLS costs (`minborg bench writes --store plain`), never for a cell in use.
    `hosts` "netns" gives each process a host of its own (`netns`: a network namespace and an
    address on a bridge the cell makes); "loopback", the default: every process on 127.0.0.1.
    `tls` (always on with netns hosts): the masters' API and the borglets serve HTTPS only,
    with certificates of the cell's CA (launcher/tls.py); Toxiproxy is not offered with it."""
    runtime = runtime or default_runtime()
    say = progress or (lambda _msg: None)
    etcd_members = replicas if etcd_members is None else etcd_members
    check_arguments(cell, replicas, machines, machine_capacity, etcd_members)
    check_hollow(hollow, hollow_start_delay_s, toxiproxy)
    if runtime not in RUNTIMES:
        raise LauncherError(f"--runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
    if replica_cpu is not None:
        problem = cpubudget.budget_problem(replica_cpu) or cpubudget.unusable()
        if problem:
            raise LauncherError(f"--replica-cpu: {problem}")
    if machine_shares:
        problem = cpubudget.shares_problem(machine_shares) or cpubudget.unusable()
        if problem:
            raise LauncherError(f"--machine-cpu-shares: {problem}")
    root = state_dir_path(state_dir)
    if not fresh and (root / CELL_FILE).exists():
        return resume(root, progress=say)
    if tls and toxiproxy:
        raise LauncherError("--tls cannot be combined with --toxiproxy (its proxies and the CLI's URLs are plain http)")
    tls = cell_tls.wanted(tls, hosts)  # always on netns hosts (which refuse --toxiproxy themselves)
    net = _plan_hosts(hosts, cell, etcd_members, replicas, schedulers, machines, toxiproxy, hollow, base_port, runtime)
    server = find_toxiproxy_server() if toxiproxy else None
    prepare_state_dir(root, say)
    make_channel_key(root)
    say("pki: a new CA for the cell, certificates for etcd and its clients")
    ca_dir = make_cell_ca(root, cell)
    ensure_admin_token(root)
    workdir = os.getcwd()
    env = child_env(workdir)
    signed = not insecure_channel
    info = CellInfo(cell, str(root), workdir, time.time(), (), (), {}, replica_cpu=replica_cpu)
    try:
        if net is not None:
            info = replace(info, network=net)
            info.save()  # before any is made: a failure from here on removes them with the rest
            say(f"hosts: {len(net.hosts)} network namespaces on bridge {net.bridge} ({net.subnet}; this host {net.gateway})")
            netns.ensure(net)
        say(f"etcd: starting {etcd_members} member(s)")
        cluster = (
            EtcdCluster(root / "etcd", members=etcd_members, host=HOST, base_port=base_port, tls=store_tls, pki_dir=ca_dir)
            if net is None
            else netns.NetnsEtcdCluster(root / "etcd", net, etcd_members, tls=store_tls, pki_dir=ca_dir)
        )
        _clusters[str(root)] = cluster
        cluster.start()
        etcd_tls = cluster.client_tls
        info = replace(
            info, etcd_urls=tuple(cluster.client_urls), processes=etcd_records(cluster), etcd_tls=etcd_tls,
            etcd_version=cluster.version(),
        )  # fmt: skip
        say(f"etcd: {info.etcd_version}, {cluster.scheme} with client certificates of the cell's CA only"
            if cluster.tls else f"etcd: {info.etcd_version}")  # fmt: skip
        info.save()

        count = replicas + machines + (1 if hollow else 0)
        ports = (
            free_ports(count, host=HOST)
            if base_port is None
            else list(range(base_port + 2 * etcd_members, base_port + 2 * etcd_members + count))
        )
        if net is not None:  # each process has an address of its own: the same port on each
            ports = [netns.MASTER_PORT] * replicas + [netns.BORGLET_PORT] * machines
        master_ports, borglet_ports = ports[:replicas], ports[replicas : replicas + machines]
        names = [f"master{i}" for i in range(replicas)]
        urls = {
            name: f"{cell_tls.scheme(tls)}://{_address(info, name)}:{port}"
            for name, port in zip(names, master_ports, strict=True)
        }
        etcd_of = {name: list(cluster.client_urls) for name in names}
        if server is not None:
            say("toxiproxy: starting the server and a proxy on every link")
            # Masters and borglets are not listening yet: their ports must not be handed out again.
            reserved = set(ports)
            info = start_toxiproxy(info, root, server, workdir, env, reserved)
            plan = plan_proxies(names, urls, cluster.client_urls, borglet_ports)
            proxies = create_proxies(info.toxiproxy_url or "", plan, reserved)
            info = replace(info, proxies=tuple(proxies))
            info.save()
            etcd_of = {name: proxied_etcd_urls(info.proxies, name, cluster.scheme) for name in names}
        if tls:
            say("tls: the masters' API, Sigma and the borglets serve HTTPS only, certificates of the cell's CA")
        say(f"masters: starting {replicas} replica(s)")
        masters = [
            start_master(root, cell, name, urls, etcd_of[name], master_args, workdir, env, signed, etcd_tls,
                         netns=_netns(info, name))  # fmt: skip
            for name in names
        ]
        if schedulers:
            say(f"scheduler: starting {schedulers} process(es), one active at a time")
        masters += [
            start_scheduler(root, cell, f"scheduler{i}", list(cluster.client_urls), workdir, env, signed, etcd_tls,
                            netns=_netns(info, f"scheduler{i}"), tls=tls)  # fmt: skip
            for i in range(schedulers)
        ]
        say(f"borglets: starting {machines} machine(s) of {machine_capacity}")
        info = replace(info, machine_shares=machine_shares if machines and machine_shares else None)
        joined = _machines_group(info)
        borglets = [
            start_borglet(root, f"machine{i}", port, machine_capacity, i, workdir, env, signed, runtime, cell, joined,
                          host=_address(info, f"machine{i}"), netns=_netns(info, f"machine{i}"), tls=tls)  # fmt: skip
            for i, port in enumerate(borglet_ports)
        ]
        hollow_urls: dict[str, str] = {}
        if hollow:
            say(f"borglets: starting one process of {hollow} hollow machine(s) of {machine_capacity}")
            served = start_hollow(
                root, hollow, ports[-1], machine_capacity, hollow_start_delay_s, workdir, env, signed, tls
            )
            borglets.append(served)
            hollow_urls = hollow_addresses(served.url, hollow)
        info = replace(
            info,
            # Clients reach the masters through their proxies when there are any.
            master_urls=tuple(client_url(info.proxies, m.name, m.url) for m in masters if m.role is Role.MASTER),
            borglet_urls={b.name: b.url for b in borglets if b.name != HOLLOW_PROCESS} | hollow_urls,
            processes=info.processes + tuple(masters) + tuple(borglets),
        )
        info.save()
        _hold_to_budget(info, masters)  # once recorded: a failure here stops them with the rest

        wait_borglets(borglets, verify=cell_tls.client_verify(root))
        if info.proxies:
            # Toxiproxy accepts a connection before its upstream listens and then drops it,
            # which a client cannot tell from a lost answer: wait until every master listens.
            wait_ready([m for m in masters if m.role is Role.MASTER], "/healthz", READY_TIMEOUT_S)
        leader = wait_for_leader(info, LEADER_TIMEOUT_S)
        say(f"masters: {leader} is the leader")
        register_machines(info, machine_capacity)
        say(f"machines: {len(info.borglet_urls)} registered")
    except BaseException:
        _stop_cell(info)
        info.save()
        raise
    return info


def resume(state_dir: str | os.PathLike[str] | None = None, progress: Progress | None = None) -> CellInfo:
    """Bring a stopped cell back on its data: etcd members on their data dirs, the masters
    (which rejoin and elect), the borglets on their state dirs (they re-adopt the tasks that
    still run and report the others lost); machines stay registered in etcd."""
    say = progress or (lambda _msg: None)
    info = CellInfo.load(state_dir)
    refuse_running(info)
    check_resumable(info)
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
    """Restart etcd, the masters and the scheduler processes on their data and, unless
    `control_plane`, the borglets on their state dirs. Tasks keep running throughout: the borglets are stopped without
    their tasks (SIGKILL to the borglet alone) and re-adopt them when they start again.
    Whatever was already dead (a SIGKILLed control plane) is simply started."""
    say = progress or (lambda _msg: None)
    info = CellInfo.load(state_dir)
    check_resumable(info)
    if info.of_role(Role.AUTOSCALER):
        stop_processes(info.of_role(Role.AUTOSCALER))  # it writes the cell file: read it after
        info = CellInfo.load(state_dir)
    masters = [m for m in info.of_role(Role.MASTER) if is_alive(m)]
    if masters:
        say(f"masters: stopping {len(masters)}")  # they resign: the leader key goes at once
        stop_processes(masters)
    schedulers = [s for s in info.of_role(Role.SCHEDULER) if is_alive(s)]
    if schedulers:
        say(f"schedulers: stopping {len(schedulers)}")
        stop_processes(schedulers)
    etcd = [m for m in info.of_role(Role.ETCD) if is_alive(m)]
    if etcd:
        say(f"etcd: stopping {len(etcd)} member(s)")
        cluster = _clusters.pop(info.state_dir, None) or _load_etcd(info)
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
        if info.network is not None:
            made = netns.ensure(info.network)
            if made:
                say(f"hosts: made {', '.join(made)} again on bridge {info.network.bridge}")
        if any(not is_alive(m) for m in info.of_role(Role.ETCD)):
            cluster = _load_etcd(info)
            _clusters[str(root)] = cluster
            say(f"etcd: starting {sum(not is_alive(m) for m in info.of_role(Role.ETCD))} member(s) on their data")
            cluster.resume(READY_TIMEOUT_S, quorum=True)
            info = with_records(replace(info, etcd_version=cluster.version()), Role.ETCD, etcd_records(cluster))
            for i, why in sorted(cluster.failed.items()):
                up = len(cluster.members) - len(cluster.failed)
                say(f"etcd: member {cluster.members[i].name} did not start ({why}; log {cluster.log_path(i)}); "
                    f"the cell runs on {up} of {len(cluster.members)} members, a quorum")
        toxiproxy = [p for p in info.of_role(Role.TOXIPROXY) if not is_alive(p)]
        if toxiproxy:
            say("toxiproxy: starting the server and its proxies again")
            info = with_records(info, Role.TOXIPROXY, _respawn(toxiproxy, info, env))
            wait_ready(info.of_role(Role.TOXIPROXY), "/version", READY_TIMEOUT_S)
            recreate_proxies(info.toxiproxy_url or "", info.proxies)
        for role, what in ((Role.MASTER, "masters"), (Role.SCHEDULER, "schedulers"), (Role.BORGLET, "borglets")):
            dead = [p for p in info.of_role(role) if not is_alive(p)]
            if dead:
                say(f"{what}: starting {', '.join(p.name for p in dead)}")
                if role is Role.BORGLET:
                    _machines_group(info)  # `cell down` removed it; the borglets' commands join it
                started = _respawn(dead, info, env)
                info = with_records(info, role, started)
                if role in (Role.MASTER, Role.SCHEDULER):
                    _hold_to_budget(info, started)
        borglets = info.of_role(Role.BORGLET)
        wait_borglets(borglets, verify=cell_tls.client_verify(root))
        if info.proxies:
            wait_ready(info.of_role(Role.MASTER), "/healthz", READY_TIMEOUT_S)
        leader = wait_for_leader(info, LEADER_TIMEOUT_S)
        say(f"masters: {leader} is the leader")
        autoscaler = [p for p in info.of_role(Role.AUTOSCALER) if not is_alive(p)]
        if autoscaler:
            say("cell autoscaler: starting it again")
            info = with_records(info, Role.AUTOSCALER, _respawn(autoscaler, info, env))
    except LauncherError as err:
        raise LauncherError(
            f"{err}\ncell {info.cell} is partly up: `minborg cell status` shows what runs; "
            "`minborg cell restart` tries again, `minborg cell down` stops it"
        ) from None
    except EtcdClusterError as err:
        raise LauncherError(
            f"etcd did not come back on its data: {err}\n`minborg cell down` stops what runs"
        ) from None
    except netns.NetnsError as err:
        raise LauncherError(f"cell {info.cell}'s hosts: {err}") from None
    return info


def _plan_hosts(
    hosts: str, cell: str, etcd_members: int, replicas: int, schedulers: int, machines: int, toxiproxy: bool,
    hollow: int, base_port: int | None, runtime: str,
) -> netns.Network | None:  # fmt: skip
    """The hosts of a new cell: None on loopback; on netns, one per process, checked free."""
    if hosts not in netns.HOSTS_MODES:
        raise LauncherError(f"--hosts must be one of {', '.join(netns.HOSTS_MODES)}, not {hosts!r}")
    if hosts == "loopback":
        return None
    clash = [what for what, on in (("--toxiproxy (faults come by packet filter: `minborg cell partition`)", toxiproxy),
                                   ("--hollow", hollow), ("--base-port", base_port is not None),
                                   ("--runtime docker", runtime != "process")) if on]  # fmt: skip
    if clash:
        raise LauncherError(f"--hosts netns cannot be combined with {', '.join(clash)}")
    problem = netns.usable()
    if problem:
        raise LauncherError(problem)
    names = [*(f"etcd{i}" for i in range(etcd_members)), *(f"master{i}" for i in range(replicas)),
             *(f"scheduler{i}" for i in range(schedulers)), *(f"machine{i}" for i in range(machines))]  # fmt: skip
    try:
        net = netns.plan_network(cell, names, netns.used_networks())
        netns.check_free(net)
    except netns.NetnsError as err:
        raise LauncherError(str(err)) from None
    return net


def _address(info: CellInfo, name: str) -> str:
    """Where process `name` listens: its host's address on a netns cell, else loopback."""
    return info.address_of(name) or HOST


def _netns(info: CellInfo, name: str) -> str | None:
    return info.network.host(name).netns if info.network is not None else None


def _load_etcd(info: CellInfo) -> EtcdCluster:
    """The cell's etcd cluster from its state file (on its hosts, on a netns cell)."""
    path = Path(info.state_dir) / "etcd"
    return EtcdCluster.load(path) if info.network is None else netns.NetnsEtcdCluster.on(path, info.network)


def _remove_groups(info: CellInfo) -> None:
    if info.replica_cpu is not None or info.machine_shares is not None:
        cpubudget.remove_groups(cpubudget.cell_group(info.cell, info.state_dir))


def _machines_group(info: CellInfo) -> list[str]:
    """Make the cell's machines group, when it has one, and return its directories (for the
    borglets' `--join-cgroup`); [] without one."""
    if info.machine_shares is None:
        return []
    group = cpubudget.machines_group(info.cell, info.state_dir)
    try:
        return [str(d) for d in cpubudget.share_cpu(group, info.machine_shares)]
    except OSError as err:
        raise LauncherError(f"cannot make the machines' CPU group {group}: {err}") from None


def _hold_to_budget(info: CellInfo, masters: Sequence[ProcessRecord]) -> None:
    """Put each master replica in its CPU group, when the cell has a budget per replica."""
    if info.replica_cpu is None:
        return
    for master in masters:
        group = cpubudget.process_group(info.cell, info.state_dir, master.name)
        try:
            cpubudget.limit_cpu(master.pid, group, info.replica_cpu)
        except OSError as err:
            raise LauncherError(f"--replica-cpu: cannot hold {master.name} to {info.replica_cpu} cores in {group}: {err}") from None


def _respawn(records: Sequence[ProcessRecord], info: CellInfo, env: dict[str, str]) -> list[ProcessRecord]:
    return [
        spawn(r.role, r.name, _with_admin_token(r, info), r.url, Path(r.log), info.workdir, env) for r in records
    ]


def _with_admin_token(record: ProcessRecord, info: CellInfo) -> list[str]:
    """The recorded command; a master recorded before cells had an admin token gets one, so
    the commands run beside the state dir keep working on a resumed older cell."""
    command = list(record.command)
    if record.role is Role.MASTER and "--admin-token-file" not in command:
        command += ["--admin-token-file", str(ensure_admin_token(Path(info.state_dir)))]
    return command


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
    if found:
        _remove_groups(info)  # again: a task that outlived its borglet kept its group
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
    tasks = descendants(borglets)
    # Re-adopted tasks are no children of their borglet: count them by their environment.
    running = {p.pid for p in procscan.scan(info.state_dir)} | {t.pid for t in tasks}
    say(f"borglets: stopping {sum(map(is_alive, borglets))} and their {len(running)} task process(es)")
    stop_processes(borglets)
    # A task that outlived its borglet (SIGKILLed borglet, ignored SIGTERM) leads its own session.
    stop_processes(tasks, timeout=2.0)
    say(f"masters: stopping {sum(map(is_alive, masters))}")
    stop_processes(info.of_role(Role.SCHEDULER))
    stop_processes(masters)
    _remove_groups(info)
    toxiproxy = info.of_role(Role.TOXIPROXY)
    if toxiproxy:
        say("toxiproxy: stopping the server")
        stop_processes(toxiproxy, timeout=5.0)
    etcd = info.of_role(Role.ETCD)
    say(f"etcd: stopping {sum(map(is_alive, etcd))} member(s)")
    cluster = _clusters.pop(info.state_dir, None)
    try:
        (cluster or _load_etcd(info)).stop()
    except EtcdClusterError:
        pass  # no etcd state file: the records below still get stopped
    stop_processes(etcd, timeout=5.0)
    left = [r for r in (*info.processes, *tasks) if is_alive(r)]
    if info.network is not None:
        say(f"hosts: removing {len(info.network.hosts)} network namespaces and bridge {info.network.bridge}")
        for problem in netns.remove(info.network):
            say(f"hosts: {problem}")
    return left


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
            **_cpu(info, p),
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
        "etcd_version": info.etcd_version,
        "etcd_tls": info.etcd_tls is not None,
        "hosts": {h.name: h.address for h in info.network.hosts} if info.network is not None else None,
        "replica_cpu": info.replica_cpu,
        "machine_shares": info.machine_shares,
        "processes": processes,
        "api": None,
        "api_error": None,
    }
    if result["running"] and info.master_urls:
        try:
            token = read_admin_token(info.state_dir)
            with CellClient(list(info.master_urls), timeout=2.0, retry_s=3.0, token=token,
                            ca=str(cell_tls.ca_file(info.state_dir))) as client:  # fmt: skip
                result["api"] = client.cell()
        except ClientError as err:
            result["api_error"] = str(err)
    return result


def _cpu(info: CellInfo, record: ProcessRecord) -> dict[str, Any]:
    """A process's CPU seconds used and, for a master replica of a cell with a budget, the
    budget its group holds (cores): from the group's cpuacct (children included), else the
    process's own times."""
    if info.replica_cpu is not None and record.role in (Role.MASTER, Role.SCHEDULER):
        group = cpubudget.process_group(info.cell, info.state_dir, record.name)
        return {"cpu_s": cpubudget.cpu_used_s(group), "cpu_budget": cpubudget.quota_of(group)}
    proc = live_process(record.pid, record.create_time)
    try:
        times = proc.cpu_times() if proc is not None else None
    except psutil.Error:
        times = None
    return {"cpu_s": times.user + times.system if times is not None else None}
