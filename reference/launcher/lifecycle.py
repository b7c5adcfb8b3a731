"""What every stage of a local cell's life shares: the etcd clusters this process started, its CPU groups, where each process listens, a recorded process started again."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from reference.launcher import cpubudget, netns
from reference.launcher.cellfile import (
    CellInfo,
    LauncherError,
    ProcessRecord,
    Role,
)
from reference.launcher.processes import spawn
from reference.launcher.statedir import ensure_admin_token
from reference.ports import HOST
from reference.store.etcd_cluster import EtcdCluster

Progress = Callable[[str], None]

# The etcd clusters this Python process started, by state dir: stopping one it started
# reaps its members instead of leaving zombies behind.
clusters: dict[str, EtcdCluster] = {}
RUNTIMES = ("process", "docker")  # a borglet's --runtime


def default_runtime() -> str:
    """The borglets' runtime where a caller names none: `MINBORG_RUNTIME` (process, the
    default, or docker), so a whole test suite can run its cells on the docker runtime."""
    return os.environ.get("MINBORG_RUNTIME", "") or "process"


def address_of(info: CellInfo, name: str) -> str:
    """Where process `name` listens: its host's address on a netns cell, else loopback."""
    return info.address_of(name) or HOST


def netns_of(info: CellInfo, name: str) -> str | None:
    return info.network.host(name).netns if info.network is not None else None


def load_etcd(info: CellInfo) -> EtcdCluster:
    """The cell's etcd cluster from its state file (on its hosts, on a netns cell)."""
    path = Path(info.state_dir) / "etcd"
    return EtcdCluster.load(path) if info.network is None else netns.NetnsEtcdCluster.on(path, info.network)


def remove_groups(info: CellInfo) -> None:
    if info.replica_cpu is not None or info.machine_shares is not None:
        cpubudget.remove_groups(cpubudget.cell_group(info.cell, info.state_dir))


def machines_group(info: CellInfo) -> list[str]:
    """Make the cell's machines group, when it has one, and return its directories (for the
    borglets' `--join-cgroup`); [] without one."""
    if info.machine_shares is None:
        return []
    group = cpubudget.machines_group(info.cell, info.state_dir)
    try:
        return [str(d) for d in cpubudget.share_cpu(group, info.machine_shares)]
    except OSError as err:
        raise LauncherError(f"cannot make the machines' CPU group {group}: {err}") from None


def hold_to_budget(info: CellInfo, masters: Sequence[ProcessRecord]) -> None:
    """Put each master replica in its CPU group, when the cell has a budget per replica."""
    if info.replica_cpu is None:
        return
    for master in masters:
        group = cpubudget.process_group(info.cell, info.state_dir, master.name)
        try:
            cpubudget.limit_cpu(master.pid, group, info.replica_cpu)
        except OSError as err:
            raise LauncherError(f"--replica-cpu: cannot hold {master.name} to {info.replica_cpu} cores in {group}: {err}") from None


def respawn(records: Sequence[ProcessRecord], info: CellInfo, env: dict[str, str]) -> list[ProcessRecord]:
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
