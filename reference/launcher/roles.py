"""How each process of a local cell is started: a master replica's and a borglet's command lines, logs and racks, and the etcd members' records."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from reference.cellfile import ADMIN_TOKEN_FILE
from reference.launcher.cellfile import ProcessRecord, Role
from reference.launcher.processes import spawn
from reference.ports import HOST
from reference.store.etcd_cluster import EtcdCluster

DEFAULT_CAPACITY = "cpu=4000m,ram=8GiB"
MASTER_MAX_TXN_OPS = 1000  # under the local etcd's --max-txn-ops, with room to spare


def rack_of(i: int) -> str:
    """Machines alternate between two racks so a job can spread over failure domains."""
    return f"r{i % 2}"


def etcd_records(cluster: EtcdCluster) -> tuple[ProcessRecord, ...]:
    """The started members of `cluster` as records of the cell file."""
    # Without a command: etcd members are brought back by EtcdCluster from its own state file.
    return tuple(
        ProcessRecord(Role.ETCD, m.name, m.pid, m.create_time, url, str(cluster.log_path(i)))
        for i, (m, url) in enumerate(zip(cluster.members, cluster.client_urls, strict=True))
        if m.pid is not None and m.create_time is not None
    )


def start_master(
    root: Path, cell: str, name: str, urls: dict[str, str], etcd_urls: list[str],
    extra: Sequence[str], workdir: str, env: dict[str, str],
) -> ProcessRecord:  # fmt: skip
    """Start master replica `name` of the cell in state dir `root`; `urls` holds every
    replica's URL by name."""
    # Every replica is told of the others so any of them can list all replicas in /v1/cell.
    peers = ",".join(f"{peer}={url}" for peer, url in urls.items() if peer != name)
    port = urls[name].rsplit(":", 1)[1]
    command = [
        sys.executable, "-m", "reference.master", "--name", name, "--listen", f"{HOST}:{port}",
        "--etcd", ",".join(etcd_urls), "--cell", cell, "--advertise", urls[name],
        *(["--peers", peers] if peers else []),
        # The cell's etcd takes larger txns than etcd's default (etcd_cluster.MAX_TXN_OPS).
        "--max-txn-ops", str(MASTER_MAX_TXN_OPS), "--admin-token-file", str(root / ADMIN_TOKEN_FILE), *extra,
    ]  # fmt: skip
    log = root / "logs" / f"{name}.log"
    return spawn(Role.MASTER, name, command, urls[name], log, workdir, env)


def start_borglet(
    root: Path, name: str, port: int, capacity: str, i: int, workdir: str, env: dict[str, str]
) -> ProcessRecord:
    """Start the borglet of machine `name` (the cell's `i`th) on `port`, its state in
    `root`/machines/`name`; it kills its tasks when it is stopped."""
    command = [
        sys.executable, "-m", "reference.borglet", "--name", name, "--listen", f"{HOST}:{port}",
        "--capacity", capacity, "--attrs", f"rack={rack_of(i)}", "--failure-domain", rack_of(i),
        "--state-dir", str(root / "machines" / name), "--kill-tasks-on-exit",
    ]  # fmt: skip
    log = root / "logs" / f"{name}.log"
    # The borglet's cwd is where `cell up` ran: tasks inherit it, so relative paths and
    # `python -m examples...` resolve from there.
    return spawn(Role.BORGLET, name, command, f"http://{HOST}:{port}", log, workdir, env)
