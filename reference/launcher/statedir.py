"""What a local cell's state dir must hold before `up`, `resume` or `restart` start anything, and the shape arguments they accept."""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from reference import procscan
from reference.cellfile import ADMIN_TOKEN_FILE, CELL_FILE
from reference.launcher.cellfile import CellInfo, LauncherError, Role
from reference.resources import parse_capacity
from reference.store.etcd_cluster import EtcdCluster, EtcdClusterError

CLUSTER_SIZES = (1, 3, 5)
# Subdirectories a cell owns inside its state dir, and what each holds: `up` resumes the
# cell they hold, and only `up --fresh` deletes them.
OWNED_DIRS = {
    "etcd": "the etcd data: every machine, job, task and quota of the cell",
    "machines": "the borglets' task tables and task logs",
    "logs": "the processes' logs",
}


def check_arguments(
    cell: str, replicas: int, machines: int, capacity: str, etcd_members: int
) -> None:
    """LauncherError saying what to change if the cell's shape or name is not one `up` starts.
    Master replicas elect through etcd's leases, so any count runs on an etcd of its own
    size; the count must be an etcd size only where etcd has as many members."""
    if replicas < 1 or (replicas not in CLUSTER_SIZES and replicas == etcd_members):
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


def check_hollow(count: int, start_delay_s: float | None, toxiproxy: bool) -> None:
    """LauncherError saying what to change if `--hollow` cannot be started as asked."""
    if count < 0:
        raise LauncherError(f"--hollow must be 0 or more machines, got {count}")
    if start_delay_s is not None and start_delay_s < 0:
        raise LauncherError(f"--hollow-start-delay must be 0 or more seconds, got {start_delay_s}")
    if count and toxiproxy:
        # One proxy per hollow machine would be thousands of proxies onto one port.
        raise LauncherError("--hollow and --toxiproxy cannot be combined: hollow machines are for scale tests")


def check_private(root: Path) -> None:
    """LauncherError unless state dir `root` is absent or owned by this user and not writable
    by others: whoever may write it may put or swap in the cell's channel key, CA and cell
    file (docs/security.md)."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return
    if st.st_uid != os.geteuid():
        raise LauncherError(
            f"--state-dir {root} is owned by uid {st.st_uid}, not this user ({os.geteuid()}): its keys could be "
            "another user's; choose another --state-dir, or chown it"
        )
    if st.st_mode & 0o002:
        raise LauncherError(
            f"--state-dir {root} is writable by other users (mode {st.st_mode & 0o7777:04o}), who could swap in "
            f"its keys: chmod o-w {root}, or choose another --state-dir"
        )


def prepare_state_dir(root: Path, say: Callable[[str], None]) -> None:
    """Refuse a running cell; delete a stopped one (saying what goes) so the new cell starts empty."""
    if (root / CELL_FILE).exists():
        refuse_running(CellInfo.load(root))
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


def ensure_admin_token(root: Path) -> Path:
    """The cell's admin token file in `root`, written (mode 0600, 256 random bits) if absent.

    The masters learn the admin from it (--admin-token-file); the CLI, run where the state
    dir is, sends it. Kept across `up --fresh`: it is the operator's credential, not cell data."""
    path = root / ADMIN_TOKEN_FILE
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        # Created with its final mode: never readable by others, not even for an instant.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("mbt_" + secrets.token_urlsafe(32) + "\n")
    check_token_private(root)
    return path


def check_token_private(root: Path) -> None:
    """LauncherError if the admin token in `root` is open to other users (a rotated one
    written under umask 022 is 0644): every task could read the cell's admin credential."""
    path = root / ADMIN_TOKEN_FILE
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if mode & 0o077:
        raise LauncherError(f"the admin token {path} is open to other users (mode {mode & 0o7777:04o}): chmod 600 it")


def refuse_running(info: CellInfo) -> None:
    """LauncherError naming what to do if any process of the cell still runs."""
    alive = info.running()
    if alive:
        names = ", ".join(f"{p.role} {p.name}" for p in alive[:6]) + (", ..." if len(alive) > 6 else "")
        raise LauncherError(
            f"a cell is already running in {info.state_dir}: {len(alive)} of its "
            f"{len(info.processes)} processes are alive ({names}). To restart it on its data: "
            "`minborg cell restart`; to stop it (its files stay): `minborg cell down`; or choose "
            "another --state-dir"
        )


def check_resumable(info: CellInfo) -> None:
    """Refuse a cell whose files cannot bring it back (a cell file without commands, no etcd data)."""
    root = Path(info.state_dir)
    check_private(root)  # resume and restart start on its keys as they are
    check_token_private(root)
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
