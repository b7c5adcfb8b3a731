"""`up`: a new local cell started from nothing, all or nothing (a stopped one is handed to `resume`)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from reference.cellfile import CELL_FILE, state_dir_path
from reference.launcher import cpubudget, netns
from reference.launcher import tls as cell_tls
from reference.launcher.cellapi import LEADER_TIMEOUT_S, register_machines, wait_for_leader
from reference.launcher.cellfile import CellInfo, LauncherError, Role
from reference.launcher.lifecycle import (
    RUNTIMES,
    Progress,
    address_of,
    clusters,
    default_runtime,
    hold_to_budget,
    machines_group,
    netns_of,
)
from reference.launcher.processes import (
    READY_TIMEOUT_S,
    child_env,
    wait_borglets,
    wait_ready,
)
from reference.launcher.restarts import resume
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
from reference.launcher.shutdown import stop_cell
from reference.launcher.statedir import (
    check_arguments,
    check_hollow,
    check_private,
    ensure_admin_token,
    prepare_state_dir,
)
from reference.launcher.toxiproxy import (
    client_url,
    create_proxies,
    find_toxiproxy_server,
    plan_proxies,
    proxied_etcd_urls,
    start_toxiproxy,
)
from reference.ports import HOST, free_ports
from reference.store.etcd_cluster import EtcdCluster


@dataclass(frozen=True)
class Names:
    """The prefixes of a cell's process names: the `i`th master is `master` + i, and so on."""

    masters: str = "master"
    machines: str = "machine"
    schedulers: str = "scheduler"

    def master(self, i: int) -> str:
        return f"{self.masters}{i}"

    def machine(self, i: int) -> str:
        return f"{self.machines}{i}"

    def scheduler(self, i: int) -> str:
        return f"{self.schedulers}{i}"


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
    workdir: str | None = None,
    etcd_timing_ms: tuple[int, int] | None = None,
    borglet_args: Sequence[str] = (),
    register: bool = True,
    names: Names | None = None,
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
    with certificates of the cell's CA (launcher/tls.py); Toxiproxy is not offered with it.
    `workdir`: where the processes run (their tasks' working directory); None: this process's.
    `etcd_timing_ms`: etcd's (heartbeat, election) timeouts; None: EtcdCluster's own.
    `borglet_args`: more flags for every borglet (`roles.borglet_flags`: isolation, kill grace).
    `register` False leaves the machines unregistered: the caller registers them its own way.
    `names`: how the masters, machines and scheduler processes are named (`Names`)."""
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
    check_private(root)
    if not fresh and (root / CELL_FILE).exists():
        return resume(root, progress=say)
    if tls and toxiproxy:
        raise LauncherError("--tls cannot be combined with --toxiproxy (its proxies and the CLI's URLs are plain http)")
    tls = cell_tls.wanted(tls, hosts)  # always on netns hosts (which refuse --toxiproxy themselves)
    named = names or Names()
    if etcd_timing_ms is not None and hosts != "loopback":
        raise LauncherError("etcd timing is set on loopback cells only (a netns cell's members keep etcd's defaults)")
    net = _plan_hosts(hosts, cell, etcd_members, replicas, schedulers, machines, toxiproxy, hollow, base_port, runtime, named)
    server = find_toxiproxy_server() if toxiproxy else None
    prepare_state_dir(root, say)
    make_channel_key(root)
    say("pki: a new CA for the cell, certificates for etcd and its clients")
    ca_dir = make_cell_ca(root, cell)
    ensure_admin_token(root)
    workdir = workdir or os.getcwd()
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
            EtcdCluster(root / "etcd", members=etcd_members, host=HOST, base_port=base_port, tls=store_tls, pki_dir=ca_dir,
                        **_etcd_timing(etcd_timing_ms))
            if net is None
            else netns.NetnsEtcdCluster(root / "etcd", net, etcd_members, tls=store_tls, pki_dir=ca_dir)
        )
        clusters[str(root)] = cluster
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
        names = [named.master(i) for i in range(replicas)]
        urls = {
            name: f"{cell_tls.scheme(tls)}://{address_of(info, name)}:{port}"
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
                         netns=netns_of(info, name))  # fmt: skip
            for name in names
        ]
        if schedulers:
            say(f"scheduler: starting {schedulers} process(es), one active at a time")
        masters += [
            start_scheduler(root, cell, named.scheduler(i), list(cluster.client_urls), workdir, env, signed, etcd_tls,
                            netns=netns_of(info, named.scheduler(i)), tls=tls)  # fmt: skip
            for i in range(schedulers)
        ]
        say(f"borglets: starting {machines} machine(s) of {machine_capacity}")
        info = replace(info, machine_shares=machine_shares if machines and machine_shares else None)
        joined = machines_group(info)
        borglets = [
            start_borglet(root, named.machine(i), port, machine_capacity, i, workdir, env, signed, runtime, cell, joined,
                          host=address_of(info, named.machine(i)), netns=netns_of(info, named.machine(i)), tls=tls,
                          extra=borglet_args)  # fmt: skip
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
        hold_to_budget(info, masters)  # once recorded: a failure here stops them with the rest

        wait_borglets(borglets, verify=cell_tls.client_verify(root))
        if info.proxies:
            # Toxiproxy accepts a connection before its upstream listens and then drops it,
            # which a client cannot tell from a lost answer: wait until every master listens.
            wait_ready([m for m in masters if m.role is Role.MASTER], "/healthz", READY_TIMEOUT_S)
        leader = wait_for_leader(info, LEADER_TIMEOUT_S)
        say(f"masters: {leader} is the leader")
        if register:
            register_machines(info, machine_capacity)
            say(f"machines: {len(info.borglet_urls)} registered")
    except BaseException:
        stop_cell(info)
        info.save()
        raise
    return info


def _plan_hosts(
    hosts: str, cell: str, etcd_members: int, replicas: int, schedulers: int, machines: int, toxiproxy: bool,
    hollow: int, base_port: int | None, runtime: str, named: Names,
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
    names = [*(f"etcd{i}" for i in range(etcd_members)), *map(named.master, range(replicas)),
             *map(named.scheduler, range(schedulers)), *map(named.machine, range(machines))]  # fmt: skip
    try:
        net = netns.plan_network(cell, names, netns.used_networks())
        netns.check_free(net)
    except netns.NetnsError as err:
        raise LauncherError(str(err)) from None
    return net


def _etcd_timing(timing_ms: tuple[int, int] | None) -> dict[str, int]:
    """EtcdCluster's heartbeat_ms and election_ms from `up`'s etcd_timing_ms; {}: its defaults."""
    return {} if timing_ms is None else {"heartbeat_ms": timing_ms[0], "election_ms": timing_ms[1]}
