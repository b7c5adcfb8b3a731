"""`resume` and `restart`: a stopped or running local cell's processes started again on their data."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from reference.launcher import netns
from reference.launcher import tls as cell_tls
from reference.launcher.cellapi import LEADER_TIMEOUT_S, wait_for_leader
from reference.launcher.cellfile import (
    CellInfo,
    LauncherError,
    Role,
    is_alive,
    with_records,
)
from reference.launcher.lifecycle import (
    Progress,
    clusters,
    hold_to_budget,
    load_etcd,
    machines_group,
    respawn,
)
from reference.launcher.processes import (
    READY_TIMEOUT_S,
    child_env,
    kill_process,
    stop_processes,
    wait_borglets,
    wait_ready,
)
from reference.launcher.roles import etcd_records
from reference.launcher.statedir import check_resumable, refuse_running
from reference.launcher.toxiproxy import recreate_proxies
from reference.store.etcd_cluster import EtcdClusterError


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
        cluster = clusters.pop(info.state_dir, None) or load_etcd(info)
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
    cell_tls.renew_before_start(root, say)  # each process starts again with the files it had
    try:
        if info.network is not None:
            made = netns.ensure(info.network)
            if made:
                say(f"hosts: made {', '.join(made)} again on bridge {info.network.bridge}")
        if any(not is_alive(m) for m in info.of_role(Role.ETCD)):
            cluster = load_etcd(info)
            clusters[str(root)] = cluster
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
            info = with_records(info, Role.TOXIPROXY, respawn(toxiproxy, info, env))
            wait_ready(info.of_role(Role.TOXIPROXY), "/version", READY_TIMEOUT_S)
            recreate_proxies(info.toxiproxy_url or "", info.proxies)
        for role, what in ((Role.MASTER, "masters"), (Role.SCHEDULER, "schedulers"), (Role.BORGLET, "borglets")):
            dead = [p for p in info.of_role(role) if not is_alive(p)]
            if dead:
                say(f"{what}: starting {', '.join(p.name for p in dead)}")
                if role is Role.BORGLET:
                    machines_group(info)  # `cell down` removed it; the borglets' commands join it
                started = respawn(dead, info, env)
                info = with_records(info, role, started)
                if role in (Role.MASTER, Role.SCHEDULER):
                    hold_to_budget(info, started)
        borglets = info.of_role(Role.BORGLET)
        wait_borglets(borglets, verify=cell_tls.client_verify(root))
        if info.proxies:
            wait_ready(info.of_role(Role.MASTER), "/healthz", READY_TIMEOUT_S)
        leader = wait_for_leader(info, LEADER_TIMEOUT_S)
        say(f"masters: {leader} is the leader")
        autoscaler = [p for p in info.of_role(Role.AUTOSCALER) if not is_alive(p)]
        if autoscaler:
            say("cell autoscaler: starting it again")
            info = with_records(info, Role.AUTOSCALER, respawn(autoscaler, info, env))
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
