"""`down` and `shut_down`: every process of a local cell stopped, task processes that outlived their borglet included."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

from reference import procscan
from reference.launcher import netns
from reference.launcher.cellfile import (
    CellInfo,
    LauncherError,
    ProcessRecord,
    Role,
    is_alive,
)
from reference.launcher.lifecycle import (
    Progress,
    clusters,
    load_etcd,
    remove_groups,
)
from reference.launcher.processes import descendants, stop_processes
from reference.store.etcd_cluster import EtcdClusterError


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
    survivors = stop_cell(info, say)
    found = procscan.scan(info.state_dir)
    left = procscan.kill(info.state_dir, found) if found else []
    if found:
        remove_groups(info)  # again: a task that outlived its borglet kept its group
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


def stop_cell(info: CellInfo, say: Progress = lambda _msg: None) -> list[ProcessRecord]:
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
    remove_groups(info)
    toxiproxy = info.of_role(Role.TOXIPROXY)
    if toxiproxy:
        say("toxiproxy: stopping the server")
        stop_processes(toxiproxy, timeout=5.0)
    etcd = info.of_role(Role.ETCD)
    say(f"etcd: stopping {sum(map(is_alive, etcd))} member(s)")
    cluster = clusters.pop(info.state_dir, None)
    try:
        (cluster or load_etcd(info)).stop()
    except EtcdClusterError:
        pass  # no etcd state file: the records below still get stopped
    stop_processes(etcd, timeout=5.0)
    left = [r for r in (*info.processes, *tasks) if is_alive(r)]
    if info.network is not None:
        say(f"hosts: removing {len(info.network.hosts)} network namespaces and bridge {info.network.bridge}")
        for problem in netns.remove(info.network):
            say(f"hosts: {problem}")
    return left
