"""How each process of a local cell is started: a master replica's and a borglet's command lines, logs and racks, and the etcd members' records."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from reference import channel, pki
from reference.borglet.taskusers import local_task_env
from reference.cellfile import ADMIN_TOKEN_FILE
from reference.launcher import tls as cell_tls
from reference.launcher.cellfile import ProcessRecord, Role
from reference.launcher.processes import spawn
from reference.ports import HOST
from reference.store.etcd_cluster import EtcdCluster
from reference.store.tls import StoreTLS

DEFAULT_CAPACITY = "cpu=4000m,ram=8GiB"
# The cell file's name of the one process that serves every hollow machine (scale tests only).
HOLLOW_PROCESS = "hollow"
HOLLOW_PREFIX = "/m/"  # a hollow machine's address is the process's URL + /m/<machine>
MASTER_MAX_TXN_OPS = 1000  # under the local etcd's --max-txn-ops, with room to spare
PKI_DIR = "pki"  # in the state dir: the cell's CA, etcd's certificates, the store's client certificate


def channel_key_file(root: Path) -> Path:
    """Where the cell's channel key lives: its masters sign with it, its borglets check it."""
    return root / channel.KEY_FILE


def borglet_auth(root: Path, machine: str) -> channel.ClientAuth:
    """Signs requests to `machine` of the cell in state dir `root` as its masters do: for a
    probe or a test that reads a borglet directly."""
    return channel.ClientAuth(channel.load_key(channel_key_file(root)), machine=machine)


def make_channel_key(root: Path) -> Path:
    """A new channel key for a new cell in state dir `root` (mode 0600); a key left there by
    an earlier cell is replaced, so that cell's processes cannot command this one's borglets."""
    path = channel_key_file(root)
    path.unlink(missing_ok=True)
    return channel.create_key_file(path)


def channel_args(root: Path, signed: bool, borglet: bool) -> list[str]:
    """A process's channel flags: the cell's key file; in a cell started unsigned (to measure
    what signing costs) none for a master or scheduler and `--insecure-channel` for a borglet."""
    if signed:
        return ["--channel-key-file", str(channel_key_file(root))]
    return ["--insecure-channel"] if borglet else []


def rack_of(i: int) -> str:
    """Machines alternate between two racks so a job can spread over failure domains."""
    return f"r{i % 2}"


def pki_dir(root: Path) -> Path:
    """Where the cell's CA and certificates live (reference/pki.py)."""
    return root / PKI_DIR


def make_cell_ca(root: Path, cell: str) -> Path:
    """A new CA for a new cell in state dir `root`; one left there by an earlier cell is
    replaced (as the channel key is), so none of that cell's certificates open this one's store."""
    pki.create_ca(pki_dir(root), cell)
    return pki_dir(root)


def etcd_records(cluster: EtcdCluster) -> tuple[ProcessRecord, ...]:
    """The started members of `cluster` as records of the cell file."""
    # Without a command: etcd members are brought back by EtcdCluster from its own state file.
    return tuple(
        ProcessRecord(Role.ETCD, m.name, m.pid, m.create_time, url, str(cluster.log_path(i)), start_ticks=m.start_ticks)
        for i, (m, url) in enumerate(zip(cluster.members, cluster.client_urls, strict=True))
        if m.pid is not None and m.create_time is not None
    )


def start_master(
    root: Path, cell: str, name: str, urls: dict[str, str], etcd_urls: list[str],
    extra: Sequence[str], workdir: str, env: dict[str, str], signed: bool = True,
    etcd_tls: StoreTLS | None = None, netns: str | None = None,
) -> ProcessRecord:  # fmt: skip
    """Start master replica `name` of the cell in state dir `root`; `urls` holds every
    replica's URL by name (it listens on its own host); `signed` False: its requests to
    borglets go unsigned. `netns`: its host's namespace on a netns cell."""
    # Every replica is told of the others so any of them can list all replicas in /v1/cell.
    peers = ",".join(f"{peer}={url}" for peer, url in urls.items() if peer != name)
    port = urls[name].rsplit(":", 1)[1]
    host = urlsplit(urls[name]).hostname or HOST
    command = [
        sys.executable, "-m", "reference.master", "--name", name, "--listen", f"{host}:{port}",
        "--etcd", ",".join(etcd_urls), *(etcd_tls.args() if etcd_tls else []),
        "--cell", cell, "--advertise", urls[name], *(["--peers", peers] if peers else []),
        # The cell's etcd takes larger txns than etcd's default (etcd_cluster.MAX_TXN_OPS).
        "--max-txn-ops", str(MASTER_MAX_TXN_OPS), *channel_args(root, signed, borglet=False),
        "--admin-token-file", str(root / ADMIN_TOKEN_FILE), *cell_tls.master_args(root, name, urls[name]), *extra,
    ]  # fmt: skip
    log = root / "logs" / f"{name}.log"
    return spawn(Role.MASTER, name, command, urls[name], log, workdir, env, netns)


def start_scheduler(
    root: Path, cell: str, name: str, etcd_urls: list[str], workdir: str, env: dict[str, str],
    signed: bool = True, etcd_tls: StoreTLS | None = None, netns: str | None = None, tls: bool = False,
) -> ProcessRecord:  # fmt: skip
    """Start scheduler process `name` of the cell (`reference.schedulerd`): it serves no
    address; it reads etcd and posts its plans to the leader."""
    command = [
        sys.executable, "-m", "reference.schedulerd", "--name", name, "--etcd", ",".join(etcd_urls),
        *(etcd_tls.args() if etcd_tls else []), "--cell", cell, *channel_args(root, signed, borglet=False),
        *(cell_tls.ca_args(root) if tls else []),  # the leader's https URL: verified with the cell's CA
    ]  # fmt: skip
    return spawn(Role.SCHEDULER, name, command, "", root / "logs" / f"{name}.log", workdir, env, netns)


def start_borglet(
    root: Path, name: str, port: int, capacity: str, i: int, workdir: str, env: dict[str, str],
    signed: bool = True, runtime: str = "process", cell: str = "", cgroups: Sequence[str] = (),
    host: str = HOST, netns: str | None = None, tls: bool = False, extra: Sequence[str] = (),
) -> ProcessRecord:  # fmt: skip
    """Start the borglet of machine `name` (the cell's `i`th) on `port`, its state in
    `root`/machines/`name`; it kills its tasks when it is stopped. `runtime` "docker": tasks of
    jobs that name an image run as containers, labelled with `cell`. `cgroups`: directories it
    joins first (the cell's machines group). `host`: the address it listens on (its own host's,
    in namespace `netns`, on a netns cell). `extra`: more flags (`borglet_flags`)."""
    command = [
        sys.executable, "-m", "reference.borglet", "--name", name, "--listen", f"{host}:{port}",
        "--capacity", capacity, "--attrs", f"rack={rack_of(i)}", "--failure-domain", rack_of(i),
        "--state-dir", str(root / "machines" / name), "--kill-tasks-on-exit",
        *channel_args(root, signed, borglet=True), *(cell_tls.server_args(root, name, [host]) if tls else []),
        *(["--runtime", runtime, "--cell", cell] if runtime != "process" else []),
        *(arg for d in cgroups for arg in ("--join-cgroup", d)),
        *local_task_env(workdir),  # tasks get no other variable of the operator's
        *extra,
    ]  # fmt: skip
    log = root / "logs" / f"{name}.log"
    # The borglet's cwd is where `cell up` ran: tasks inherit it, so relative paths and
    # `python -m examples...` resolve from there.
    return spawn(Role.BORGLET, name, command, f"{cell_tls.scheme(tls)}://{host}:{port}", log, workdir, env, netns)


def borglet_flags(isolation: str | None = None, kill_grace_s: float | None = None, more: Sequence[str] = ()) -> list[str]:
    """A cell's flags for every borglet beyond those `start_borglet` gives: how its tasks are
    isolated (`--isolation`) and the seconds from SIGTERM to SIGKILL (`--kill-grace`); None
    leaves the borglet's default."""
    return [
        *(["--isolation", isolation] if isolation is not None else []),
        *(["--kill-grace", f"{kill_grace_s:g}"] if kill_grace_s is not None else []),
        *more,
    ]


def start_hollow(
    root: Path, count: int, port: int, capacity: str, start_delay_s: float | None, workdir: str,
    env: dict[str, str], signed: bool = True, tls: bool = False,
) -> ProcessRecord:  # fmt: skip
    """Start the one process that serves `count` hollow machines on `port` (scale tests only);
    `start_delay_s` None leaves the hollow borglet's own default. Each machine checks the
    channel's signatures as a borglet does."""
    command = [
        sys.executable, "-m", "reference.borglet", "--hollow", str(count), "--name", "hollow",
        "--listen", f"{HOST}:{port}", "--capacity", capacity,
        "--log-level", "warning", *channel_args(root, signed, borglet=True),
        *(cell_tls.server_args(root, HOLLOW_PROCESS, [HOST]) if tls else []),
        *(["--hollow-start-delay", str(start_delay_s)] if start_delay_s is not None else []),
    ]  # fmt: skip
    log = root / "logs" / f"{HOLLOW_PROCESS}.log"
    return spawn(Role.BORGLET, HOLLOW_PROCESS, command, f"{cell_tls.scheme(tls)}://{HOST}:{port}", log, workdir, env)


def hollow_addresses(url: str, count: int) -> dict[str, str]:
    """Each hollow machine's address, by name, under the URL of the process that serves them."""
    from reference.borglet.hollow import machine_names  # the names the hollow process gives them

    return {name: f"{url}{HOLLOW_PREFIX}{name}" for name in machine_names(count)}


def is_hollow(address: str) -> bool:
    """Whether a machine's address is a hollow machine's (`http://HOST:PORT/m/<machine>`)."""
    return HOLLOW_PREFIX in address.partition("://")[2]
